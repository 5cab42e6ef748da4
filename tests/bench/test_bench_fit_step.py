"""bench_fit_step.py end to end, in miniature: a real loopback cluster, the custom loop and one fit
variant, one round each, the JSON read back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("tf_keras")

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


def test_one_round_of_each_variant_is_timed_and_written(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    flags = ("--rounds", "1", "--steps", "2", "--spe", "2", "--out", str(out))
    done = run_bench("bench_fit_step.py", *flags, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "fit spe 2" in done.stdout and "/ custom" in done.stdout
    doc = json.loads(out.read_text())
    assert set(doc["medians"]) == {"custom", "fit spe 2"}
    assert all(len(v) == 1 and v[0] > 0 for v in doc["medians"].values())
    custom = next(r for r in doc["rows"] if r["variant"] == "custom")
    assert custom["ratio"] == 1.0
    # Every variant's processes did some work: a step costs the worker CPU.
    assert all(c["worker0"] > 0 for v in doc["cpu_per_step"].values() for c in v)


@pytest.mark.parametrize("flag", [("--rounds", "0"), ("--spe", "0"), ("--spe", "x"), ("--workers", "0")])
def test_bad_flags_exit_2_naming_the_flag(run_bench: RunBench, flag: tuple[str, str]) -> None:
    done = run_bench("bench_fit_step.py", *flag)
    assert done.returncode == 2 and flag[0] in done.stderr, done.stderr
