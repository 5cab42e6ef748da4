"""bench/bench_demo_shape.py: the candidate grid, its worst-case scores and the pick, on a profile with
vggmini's parameters (shapes of geryon.cluster.models' vggmini) and layer times split evenly."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# vggmini's layers and their kernels (3 blocks of 2 convs at 32/64/128, FC 2048-512-512-10).
LAYERS = [
    ("conv1_1", (3, 3, 3, 32)),
    ("conv1_2", (3, 3, 32, 32)),
    ("conv2_1", (3, 3, 32, 64)),
    ("conv2_2", (3, 3, 64, 64)),
    ("conv3_1", (3, 3, 64, 128)),
    ("conv3_2", (3, 3, 128, 128)),
    ("fc1", (2048, 512)),
    ("fc2", (512, 512)),
    ("logits", (512, 10)),
]


@pytest.fixture
def shape(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("bench_demo_shape")


def vggmini_like() -> dict[str, Any]:
    n = len(LAYERS)
    params = []
    for i, (name, kernel) in enumerate(LAYERS):
        urgency = 1 - (i + 1) / n
        params.append(
            {
                "name": f"{name}/kernel",
                "shape": list(kernel),
                "element_size": 4,
                "urgency": urgency,
                "layer": i,
            }
        )
        params.append(
            {"name": f"{name}/bias", "shape": [kernel[-1]], "element_size": 4, "urgency": urgency, "layer": i}
        )
    return {
        "format": "geryon.profile",
        "version": 1,
        "model": "vggmini",
        "batch_size": 256,
        "urgency_function": "layer",
        "source": "test",
        "meta": {},
        "layers": [{"name": name, "forward_s": 0.03, "backward_s": 0.05} for name, _ in LAYERS],
        "params": params,
    }  # fmt: skip


def test_background_makes_the_gap_and_the_pick_fits_the_time_budget(shape: ModuleType) -> None:
    rows = shape.evaluate(vggmini_like(), [0.5, 1.0])
    assert len(rows) == len(shape.BATCHES) * len(shape.RATES) * len(shape.PSES) * len(
        shape.BACKGROUND_FRACTIONS
    )
    chosen, baseline = shape.pick(rows)
    assert (baseline["batch"], baseline["background_bits"]) == (256, 0)
    assert chosen["demo_train_s"] <= baseline["demo_train_s"] * 1.0001
    # The score is the worst of geryon's leads over endhost and ps, over both compute estimates.
    for r in rows:
        assert r["score"] == min(r["vs_endhost"], r["vs_ps"])
        for t in r["per_compute"].values():
            assert r["vs_endhost"] <= t["endhost"] / t["geryon"] + 1e-12
    # Without background end-host order is near ideal; the pick has background and a real gap.
    assert chosen["background_bits"] > 0 and chosen["score"] > 1.1
    assert max(r["score"] for r in rows if r["background_bits"] == 0) < chosen["score"]
    assert baseline["score"] < 1.05
