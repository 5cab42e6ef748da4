"""geryon.demo.runner: configs, counters and modes (pure), and on a real testbed: a failing
mode is recorded while the others run, and SIGTERM brings the testbed down."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from demo_proc import demo_in_training

from geryon.demo import config, defaults, modes, runner

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")
REPO = Path(__file__).resolve().parents[2]


def test_defaults_and_quick_configs_are_valid_and_complete() -> None:
    cfg = config.make_config()
    assert cfg["model"] == "vggmini" and cfg["input_shape"] == [32, 32, 3]
    assert cfg["modes"] == ["vanilla", "ps", "geryon", "paper", "endhost", "single"]
    quick = config.make_config(quick=True)
    assert quick["model"] == "tiny" and quick["steps"] < cfg["steps"] and quick["modes"] == cfg["modes"]
    # The result's config carries every knob of the schema.
    public = runner.new_result(cfg)["config"]
    for key in ("model", "input_shape", "batch_size", "workers", "ps", "rate_bits", "buffer_bytes"):
        assert key in public
    for key in ("slice_bytes", "classes", "steps", "warmup", "repeats", "search", "modes"):
        assert key in public


def test_the_default_shape_says_why_and_another_shape_does_not() -> None:
    # The demo's default shape was chosen with the simulator (bench/bench_demo_shape.py): background
    # bulk traffic on the workers' ports; the run says so in one line, a changed shape does not.
    cfg = config.make_config()
    assert cfg["background_bits"] == 100_000_000 and cfg["batch_size"] == 64
    assert runner.new_result(cfg)["shape_note"] == defaults.SHAPE_WHY
    assert "only network priority" in defaults.SHAPE_WHY
    assert runner.new_result(config.make_config({"steps": 3}))["shape_note"] == defaults.SHAPE_WHY
    assert runner.new_result(config.make_config({"ps": 3}))["shape_note"] is None
    assert runner.new_result(config.make_config(quick=True))["shape_note"] is None


def test_modes_run_in_table_order_whatever_the_order_given() -> None:
    assert modes.parse_modes("endhost,geryon,vanilla") == ("vanilla", "geryon", "endhost")
    assert modes.parse_modes("paper,endhost") == ("paper", "endhost")
    assert modes.parse_search("fixed:0.25,0.5", 3).thresholds == (0.25, 0.5)
    assert modes.parse_search("fixed:0.25,0.5", 3).label() == "fixed:0.25,0.5"
    assert modes.initial_thresholds(4) == (0.25, 0.5, 0.75)
    table = {m: modes.mode(m) for m in modes.MODES}
    assert table["geryon"].switch == "priority" and table["geryon"].search
    assert table["endhost"].classes and table["endhost"].switch == "fifo" and not table["endhost"].search
    assert not table["vanilla"].partitioned and table["ps"].partitioned
    assert table["single"].single_worker
    # The baselines: paper = classes with FIFO inside a class; endhost = one class, urgency
    # order at the sender, FIFO switch; geryon = both.
    assert (table["geryon"].order, table["paper"].order, table["endhost"].order) == (
        "urgency",
        "arrival",
        "urgency",
    )
    assert (
        table["endhost"].single_class and not table["geryon"].single_class and not table["paper"].single_class
    )
    assert table["paper"].switch == "priority" and not table["paper"].search
    # One cluster for the modes sharing protocol and partitioning; the grpc modes run alone.
    assert [m for m in modes.MODES if table[m].paired] == ["geryon", "paper", "endhost"]


def test_one_class_thresholds_put_every_urgency_in_the_last_class() -> None:
    from geryon.tagger.map_table import class_of, validate_thresholds

    for k in (2, 3, 6):
        ts = modes.one_class_thresholds(k)
        assert validate_thresholds(ts) == ts
        # Layer urgencies 1 - l/L reach 0 (the last layer) and at most 1 - 1/L.
        assert {class_of(u, ts) for u in (0.0, 0.25, 0.5, 1 - 1 / 3, 1 - 1 / 10_000)} == {k - 1}


def test_counters_accumulate_per_mode_over_rounds() -> None:
    total: dict[str, Any] = {}
    runner.counter_add(total, {"worker0": {"0": {"bytes": 100, "packets": 2, "drops": 0}}})
    runner.counter_add(
        total, {"worker0": {"0": {"bytes": 50, "packets": 1, "drops": 1}}, "ps0": {"1": {"bytes": 7}}}
    )
    assert total == {"worker0": {"0": {"bytes": 150, "packets": 3, "drops": 1}}, "ps0": {"1": {"bytes": 7}}}


def test_counter_delta_is_per_host_and_class_with_string_keys() -> None:
    before = {"worker0": {0: {"bytes": 10, "packets": 1, "drops": 0}}}
    after = {
        "worker0": {0: {"bytes": 110, "packets": 3, "drops": 1}, 1: {"bytes": 5, "packets": 1, "drops": 0}}
    }
    delta = runner.counter_delta(before, after)
    assert delta == {"worker0": {"0": {"bytes": 100, "packets": 2, "drops": 1}, "1": after["worker0"][1]}}


def test_progress_lines_say_step_time_threshold_and_trial() -> None:
    line = runner.step_line(
        {"step": 12, "of": 40, "seconds": 0.523, "warmup": False, "thresholds": [0.3], "trial": 4}
    )
    assert line == "step 12/40, 0.52 s/step, threshold 0.3 (search trial 4)"
    paired = runner.step_line(
        {"step": 7, "mode": "endhost", "phase": "measure", "seconds": 0.4, "thresholds": [1.0], "trial": None}
    )
    assert paired == "round 7 endhost (measure), 0.40 s, threshold 1"
    failed = {"error": "chief: boom", "wall_s": 3.0}
    assert runner.result_line(failed) == "FAILED after 3 s: chief: boom"


def quick_cfg(**overrides: Any) -> dict[str, Any]:
    return config.make_config({"steps": 3, "warmup": 1, **overrides}, quick=True)


@needs_root
@pytest.mark.slow
def test_a_failing_mode_is_recorded_and_the_next_one_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.testbed import namespaces

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    # A protocol no TF server knows: every task of that mode fails at start, for real.
    broken = modes.Mode("vanilla", "grpc+nosuch", False, "fifo", False, False, False)
    monkeypatch.setitem(modes._TABLE, "vanilla", broken)
    result = runner.run_demo(quick_cfg(modes=["vanilla", "ps"]), tmp_path / "out")
    vanilla, ps = result["runs"]
    assert vanilla["mode"] == "vanilla" and "exited" in vanilla["error"]
    assert "nosuch" in vanilla["error"] or "server" in vanilla["error"].lower()
    assert ps["error"] is None and len(ps["step_times"]) == 3 and ps["images_per_s"] > 0
    assert runner.failed_modes(result) == ["vanilla"]
    assert result["params"], "the parameters come from the first mode that ran"
    on_disk = json.loads(Path(result["path"]).read_text())
    assert on_disk["runs"][0]["error"] == vanilla["error"]
    assert namespaces.listed(f"gtb-{result['testbed']['run_id']}-") == []
    for pid in (*vanilla.get("pids", {}).values(), *ps["pids"].values()):
        assert not Path(f"/proc/{pid}").exists() or _zombie_or_other(pid)


def _zombie_or_other(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"geryon.demo" not in cmdline  # the PID was reused by something else


@needs_root
@pytest.mark.slow
def test_sigterm_during_training_brings_the_testbed_down(tmp_path: Path) -> None:
    env = dict(os.environ, GERYON_TESTBED_STATE=str(tmp_path / "state"))
    with demo_in_training("ps", tmp_path, env) as (proc, run_id):
        assert proc.stderr is not None
        os.kill(proc.pid, signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 130, rest
    from geryon.testbed import namespaces

    assert f"testbed {run_id} down" in rest
    assert namespaces.listed(f"gtb-{run_id}-") == []
    assert not (tmp_path / "state" / f"{run_id}.json").exists()
