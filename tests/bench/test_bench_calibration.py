"""bench_tf_order.py, bench_ps_costs.py and bench_incluster.py end to end, in miniature: real TF
clusters on loopback, their JSON read back (the PS costs through calibration.load_knobs, as the
simulator will)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from geryon.threshold.calibration import KNOBS, knobs_document, load_knobs

pytest.importorskip("tensorflow")

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


def test_tf_order_small(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "order.json"
    flags = ("--runs", "1", "--iterations", "3", "--num-ps", "2", "--out", str(out))
    done = run_bench("bench_tf_order.py", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "interleave" in done.stdout
    run = json.loads(out.read_text())["runs"][0]
    assert run["pulls"] == 16 and len(run["iterations"]) == 3
    for it in run["iterations"]:
        assert sorted(it["order"]) == sorted(f"l{i}/{k}" for i in range(8) for k in ("bias", "kernel"))
        assert -1 <= it["tau_cons"] <= 1 and 0 <= it["interleave"] <= 1
        assert 1 <= it["in_flight"] <= 16
        assert 0 < it["in_flight_per_ps"] <= 16


def test_ps_costs_small_is_read_by_load_knobs(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    # 14 repeats, the demo's own budget (geryon/demo/pscosts.py): at 5-7 a paired-difference knob came out
    # negative in about 1 of 6 runs on the loaded 2-core machine (a failure beside a demo); 0 of 10 at 14
    # alone, but CI's run beside the other xdist worker's TF clusters once drew per_message_s = -134 us
    # (2026-12-05). A knob below the noise floor is the bench's own refusal (exit 1, nothing written, and
    # the demo predicts without PS costs then), not what this test checks: the pipeline from a run that
    # measured to load_knobs. So a refusal, and only that refusal, is retried, at most twice.
    for attempt in range(1, 4):
        tried = f"attempt {attempt} of 3: "
        done = run_bench("bench_ps_costs.py", "--runs", "1", "--repeats", "14", "--out", str(out))
        refused = done.returncode == 1 and "came out negative (noise larger than the effect)" in done.stdout
        if not refused:
            break
        assert not out.exists(), "a refused measurement writes nothing"
    assert done.returncode == 0, tried + done.stdout[-2000:] + done.stderr[-3000:]
    knobs = load_knobs(out)
    assert tuple(knobs) == KNOBS
    # Loose physical bounds, orders of magnitude around what this machine measures: a byte through
    # memory or loopback costs between 1e-12 and 1e-7 s, a message between 1 us and 100 ms.
    for key in ("aggregate_s_per_byte", "update_s_per_byte", "loopback_s_per_byte"):
        assert 1e-12 < knobs[key] < 1e-7, (key, knobs[key])
    for key in ("per_message_s", "per_slice_s"):
        assert 1e-6 < knobs[key] < 0.1, (key, knobs[key])
    meta = json.loads(out.read_text())["meta"]
    assert meta["runs"] == 1 and meta["repeats"] == 14 and meta["per_slice_includes_per_message"] is True


@pytest.mark.parametrize(
    "script", ["bench_tf_order.py", "bench_ps_costs.py", "bench_incluster.py", "bench_step_cost.py"]
)
def test_bad_flags_exit_2(run_bench: RunBench, script: str) -> None:
    done = run_bench(script, "--runs", "0")
    assert done.returncode == 2 and "--runs" in done.stderr


def test_incluster_small(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "incluster.json"
    done = run_bench(
        "bench_incluster.py",
        *("--runs", "1", "--model", "tiny", "--batch-size", "8", "--workers", "1", "--ps", "1"),
        *("--duration-ms", "1500", "--out", str(out)),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = json.loads(out.read_text())["runs"][0]
    assert run["c_cluster_s"] > 0 and run["c_alone_s"] > 0 and run["steps_traced"] >= 3
    assert set(run["layers"]) == set(run["layers_alone"]) == {"conv1_1", "conv2_1", "fc1", "logits"}


def test_step_cost_small_is_added_to_the_calibration(run_bench: RunBench, tmp_path: Path) -> None:
    calibration = tmp_path / "costs.json"
    knobs = {
        "aggregate_s_per_byte": 1.4e-10,
        "update_s_per_byte": 3.2e-10,
        "per_message_s": 9e-5,
        "per_slice_s": 1.4e-4,
        "loopback_s_per_byte": 7e-10,
    }
    calibration.write_text(json.dumps(knobs_document(knobs, {"runs": 1})))
    out = tmp_path / "step.json"
    done = run_bench(
        "bench_step_cost.py",
        *("--runs", "1", "--seconds", "3", "--workers", "1", "--ps", "1"),
        *("--calibration", str(calibration), "--out", str(out)),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = load_knobs(calibration)
    assert {k: got[k] for k in KNOBS} == knobs  # the PS costs are kept as they were
    # A round of the demo's chief with (almost) no compute: between 0.1 ms and 1 s on any machine.
    assert 1e-4 < got["step_fixed_s"] < 1.0
    meta = json.loads(calibration.read_text())["meta"]
    assert meta["runs"] == 1 and len(meta["step_fixed"]["runs"]) == 1
    run = meta["step_fixed"]["runs"][0]
    assert run["fixed_ms"] == pytest.approx(got["step_fixed_s"] * 1e3)
    assert run["r0_ms"] - run["transfer_ms"] == pytest.approx(run["fixed_ms"])
    assert json.loads(out.read_text())["step_fixed_s"] == got["step_fixed_s"]
    missing = run_bench("bench_step_cost.py", "--calibration", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "--calibration" in missing.stderr
