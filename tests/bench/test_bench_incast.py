"""bench_incast.py end to end, in miniature: a real testbed of the demo's shape (root), its JSON read
back through geryon.demo.predict.load_incast, as the demo's prediction reads it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from geryon.demo.predict import load_incast
from geryon.demo.pscosts import load_bench

REPO = Path(__file__).resolve().parents[2]
RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)
bench = load_bench(REPO / "bench" / "bench_incast.py")


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (network namespaces)")
def test_incast_small_runs_every_pattern_and_predict_reads_it(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "incast.json"
    flags = ("--repeats", "2", "--bytes", "262144", "--class-split", "0.25", "--out", str(out))
    done = run_bench("bench_incast.py", *flags, "--switch", "priority")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2x2" in done.stdout and "efficiency" in done.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["switch"] == "priority" and result["cc"]
    assert result["class_split"] == 0.25 and result["class_dscp"] == [46, 26]
    by_pattern: dict[str, list[dict]] = {}
    for run in result["runs"]:
        by_pattern.setdefault(run["pattern"], []).append(run)
    assert sorted(by_pattern) == ["1 sender", "2 senders", "2 senders per class", "2x2", "2x2 per class"]
    for pattern, runs in by_pattern.items():
        assert len(runs) == 2
        for run in runs:
            # Every PS port gets the bytes: 2x2 delivers them to both PSes.
            assert run["bytes"] == 262144 * (2 if pattern.startswith("2x2") else 1)
            assert len(run["each_s"]) == len(bench.PATTERNS[pattern])
            assert run["seconds"] > 0 and run["drops"] >= 0
            # No sender may finish after the transfer's end, nor before it started.
            assert all(0 < t <= run["seconds"] for t in run["each_s"])
    for pattern in ("2 senders", "2x2", "2 senders per class", "2x2 per class"):
        eff = result["efficiency"][pattern]
        assert eff["n"] == 2 and eff["mean"] > 0 and eff["ci95"][0] <= eff["median"] <= eff["ci95"][1]
    incast = load_incast(out)
    assert set(incast) == {"priority", "priority per-class"}
    assert all(0 < i.shared <= 1 and 0 < i.alone <= 1 for i in incast.values())


def test_per_class_flows_split_each_pairs_bytes_by_class() -> None:
    # 8 flows, 2 per worker-PS pair; class 0 gets the split of its pair's share, nothing is lost.
    parts = bench.flow_bytes("2x2 per class", 1000, 0.25)
    assert len(parts) == 8 and sum(parts) == 1000
    assert [(h, d, c) for h, d, c in bench.PATTERNS["2x2 per class"]][:2] == [
        ("worker0", "ps0", 0),
        ("worker0", "ps0", 1),
    ]
    assert parts[:2] == [62, 188] and parts[2:] == [62, 188] * 3
    # The one-class patterns share evenly; a remainder goes to one flow.
    assert bench.flow_bytes("2 senders", 1001, 0.25) == [501, 500]
    # Every flow carries at least a byte, whatever the split.
    assert min(bench.flow_bytes("2 senders per class", 8, 0.01)) == 1


def test_bad_arguments_exit_2_naming_the_flag(run_bench: RunBench) -> None:
    done = run_bench("bench_incast.py", "--repeats", "0")
    assert done.returncode == 2 and "--repeats" in done.stderr
    done = run_bench("bench_incast.py", "--bytes", "10")
    assert done.returncode == 2 and "--bytes" in done.stderr
    done = run_bench("bench_incast.py", "--class-split", "1")
    assert done.returncode == 2 and "--class-split" in done.stderr
