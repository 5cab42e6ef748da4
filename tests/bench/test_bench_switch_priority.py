"""bench_switch_priority.py end to end, in miniature: a real namespace testbed of the demo's switch
config (root), two bulk TCP senders in DSCP 46 and 26 into one switch port, both switch modes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from geryon.demo.pscosts import load_bench

REPO = Path(__file__).resolve().parents[2]
bench = load_bench(REPO / "bench" / "bench_switch_priority.py")
RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (network namespaces)")
def test_a_short_run_measures_both_switches_on_a_real_testbed(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "prio.json"
    done = run_bench("bench_switch_priority.py", "--repeats", "2", "--seconds", "0.6", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "takeover" in done.stdout and "share0" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["bench"] == "switch_priority" and doc["cc"]
    assert [r["switch"] for r in doc["results"]] == ["priority", "fifo"]
    assert len(doc["runs"]) == 2 * 2 * 3  # repeats x switches x scenarios
    for run in doc["runs"]:
        # Both senders sent, and the port delivered something to the sink.
        assert all(int(b) > 0 for b in run["sent_bytes"].values())
        if run["scenario"] == "both":
            assert run["share0"] + run["share1"] == pytest.approx(1.0)
            assert 0.2 < run["port_use"] <= 1.1
        elif run["scenario"] == "takeover":
            assert 0 <= run["share1_after"] <= 1
        else:
            assert run["rate1_alone"] > 0.2 and run["rate0_reverse"] > 0.2
    prio = {r["switch"]: r for r in doc["results"]}
    # The demo's switch gives the urgent class the port (this much holds even on a loaded machine);
    # one FIFO queue does not.
    assert prio["priority"]["both"]["share0"]["median"] > 0.8
    assert prio["fifo"]["both"]["share0"]["median"] < 0.8
    # Class 1's ACKs cross the port class 0 fills: held back by strict priority, not by one FIFO.
    ratio = {sw: r["reverse"]["reverse_ratio"]["median"] for sw, r in prio.items()}
    assert ratio["fifo"] > ratio["priority"] + 0.3, ratio
    # The priority port's HTB counters saw both classes (the sink's split is cross-checked there).
    both = [r for r in doc["runs"] if r["switch"] == "priority" and r["scenario"] == "both"]
    assert all(r["port"]["ps0"]["0"]["bytes"] > 0 and r["port"]["ps0"]["1"]["bytes"] > 0 for r in both)


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (network namespaces)")
def test_mixed_placement_sends_both_classes_from_each_worker(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "mixed.json"
    done = run_bench(
        "bench_switch_priority.py",
        "--repeats",
        "1",
        "--seconds",
        "0.6",
        "--placement",
        "mixed",
        "--switch",
        "priority",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["placement"] == "mixed" and len(doc["senders"]) == 4
    for run in doc["runs"]:
        if run["scenario"] != "reverse":
            assert sorted(run["sent_bytes"]) == ["worker0/0", "worker0/1", "worker1/0", "worker1/1"]
        assert all(b > 0 for b in run["sent_bytes"].values())
    (both,) = [r for r in doc["runs"] if r["scenario"] == "both"]
    (reverse,) = [r for r in doc["runs"] if r["scenario"] == "reverse"]
    # The reverse scenario has its own senders, whatever the placement.
    assert sorted(reverse["sent_bytes"]) == ["ps1/0", "worker0/1", "worker1/0"]
    # Host queues, then the switch: the urgent class still gets the port.
    assert both["share0"] > 0.8


def test_takeover_is_read_from_the_bins() -> None:
    # Class 1 alone at 1000 bytes/ms; class 0 starts at 10 ms, gets 500/ms for 5 ms, then all of it.
    n = 200
    hi = [0] * 10 + [500] * 5 + [1000] * (n - 15)
    lo = [1000] * 10 + [500] * 5 + [0] * (n - 15)
    got = bench.analyse_takeover({0: hi, 1: lo}, 0.010, 0.180, payload_bps=8e6)
    # Trailing 10 ms windows from class 0's start: bins 10-19 hold 75% class 0, each later window
    # 5 points more; bins 13-22 are the first with 90% (2 x 500 + 8 x 1000 of 10,000).
    assert got["takeover_s"] == pytest.approx(0.013)
    assert got["rate0_10ms"] == pytest.approx((5 * 500 + 5 * 1000) * 8 / 0.010 / 8e6)
    assert got["share1_after"] == 0.0
    never = bench.analyse_takeover({0: [100] * n, 1: [100] * n}, 0.0, 0.15, payload_bps=8e6)
    assert never["takeover_s"] is None


def test_reverse_compares_class_1_before_and_after_class_0_fills_its_ack_port() -> None:
    ones = [1000] * 1000 + [10] * 1000  # 1000 bytes/ms alone, 10 once class 0 starts at 1 s
    zeros = [0] * 1000 + [1000] * 1000
    got = bench.analyse_reverse(ones, zeros, 1.0, 0.9, payload_bps=8e6)
    assert got["rate1_alone"] == pytest.approx(1.0) and got["rate1_reverse"] == pytest.approx(0.01)
    assert got["reverse_ratio"] == pytest.approx(0.01) and got["rate0_reverse"] == pytest.approx(1.0)


def test_both_shares_leave_out_the_start_up() -> None:
    n = 1000
    warm = int(bench.WARM_S / bench.BIN_S)
    hi = [0] * warm + [900] * (n - warm)
    lo = [5000] * warm + [100] * (n - warm)
    got = bench.analyse_both({0: hi, 1: lo}, 1.0, payload_bps=8e6)
    assert got["share0"] == pytest.approx(0.9) and got["share1"] == pytest.approx(0.1)
    assert got["port_use"] == pytest.approx(1000 * 750 * 8 / 0.75 / 8e6)


def test_bad_flags_exit_2_naming_the_flag(run_bench: RunBench) -> None:
    for flags, name in (
        (("--repeats", "0"), "--repeats"),
        (("--seconds", "0.1"), "--seconds"),
        (("--rate", "5"), "--rate"),
        (("--buffer", "10"), "--buffer"),
        (("--switch", "wrr"), "--switch"),
        (("--placement", "one"), "--placement"),
    ):
        done = run_bench("bench_switch_priority.py", *flags)
        assert done.returncode == 2 and name in done.stderr, (flags, done.stderr)
