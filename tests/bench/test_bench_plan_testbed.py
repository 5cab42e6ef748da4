"""bench_plan_testbed.py: the plans and the sweep it builds (--plan-only, as a user runs it: the CLI's
plan in a subprocess), and its verdict from records shaped as VariantRun writes them."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from types import ModuleType

import pytest

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its sibling benchlib
    return importlib.import_module("bench_plan_testbed")


def _profile(tmp_path: Path) -> Path:
    from geryon.threshold.profile import synthetic

    path = tmp_path / "profile.json"
    sizes = [4 * 20000, 4 * 400000, 4 * 900000, 4 * 2_000_000]
    synthetic(sizes, [1e-3, 2e-3, 2e-3, 1e-3], [2e-3, 4e-3, 4e-3, 2e-3]).save(path)
    return path


def test_plan_only_prints_both_plans_and_a_sweep_that_holds_them(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    done = run_bench(
        "bench_plan_testbed.py", "--profile", str(_profile(tmp_path)), "--plan-only", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "plan (cli): slices" in done.stdout and "plan (demo terms): slices" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["plans"]["cli"]["argv"][:3] == ["geryon", "plan", "training"]
    assert "100mbit:workers:in:lowest" in doc["plans"]["cli"]["argv"]
    assert set(doc["variants"]) == {"none", "4MiB", "1MiB", "256KiB"}
    names = {s: {v["name"] for v in items} for s, items in doc["variants"].items()}
    # 4 layers: the 3 two-class cuts between their urgencies in every cluster
    assert all(len({x for x in n if "-" not in x}) == 3 for n in names.values()), names
    for plan in doc["plans"].values():  # each recommendation is in the sweep, and its chunk sizes
        rec = plan["recommended"]
        cluster = {None: "none", 4 << 20: "4MiB", 1 << 20: "1MiB", 256 << 10: "256KiB"}[rec["slice_bytes"]]
        base = "t" + "-".join(f"{t:.4f}" for t in rec["thresholds"])
        assert base in names[cluster] and f"{base}-c16k" in names[cluster]
    from geryon.demo import variants

    for items in doc["variants"].values():  # what the chief will parse
        variants.parse(items, 4)


def test_a_bad_profile_is_a_usage_error(run_bench: RunBench, tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{}")
    done = run_bench("bench_plan_testbed.py", "--profile", str(bad), "--plan-only")
    assert done.returncode == 2 and "--profile:" in done.stderr


def _rec(slice_: str, name: str, repeat: int, times: list[float], ts: list[float]) -> dict:
    return {"slice": slice_, "repeat": repeat, "step_times": times, "error": None,
            "variant": {"name": name, "thresholds": ts, "chunk_bytes": None}}  # fmt: skip


def test_summary_finds_the_best_and_pairs_the_plan_with_it_in_one_cluster(bench: ModuleType) -> None:
    records = [
        _rec("1MiB", "t0.5000", 0, [1.0, 1.1, 1.0], [0.5, 1.0]),
        _rec("1MiB", "t0.2500", 0, [0.9, 1.0, 0.95], [0.25, 1.0]),
        _rec("none", "t0.5000", 0, [1.2, 1.3, 1.2], [0.5, 1.0]),
        {**_rec("none", "t0.2500", 0, [], [0.25, 1.0]), "error": "boom"},
    ]
    plan = {"recommended": {"slice_bytes": 1 << 20, "thresholds": [0.5], "chunk_bytes": 256 << 10,
                            "iteration_s": 0.8}}  # fmt: skip
    got = bench.summarize(records, {"cli": plan})
    assert got["best"]["variant"] == "t0.2500" and got["best"]["slice"] == "1MiB"
    assert [r["classes"] for r in got["rows"]] == [2, 2, 2]
    v = got["plans"]["cli"]
    assert v["variant"] == "t0.5000" and v["over_best"] == pytest.approx(1.0 / 0.95)
    assert v["met"] is False  # 5.3% slower than the best
    assert v["paired"]["pairs"] == 3 and v["paired"]["ratio"] == pytest.approx(1.1 / 1.0)
