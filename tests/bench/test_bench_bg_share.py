"""bench_bg_share.py end to end on a tiny saved demo shaped like `make demo`'s (out/demo/demo.json in a
checkout, its PS costs in out/bench): the background's share from the switch counters, hand-computed,
and the simulator's for the demo's own prediction setting."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from geryon.demo.predict import ITERATIONS, PAYLOAD_FRACTION, sim_args
from geryon.threshold.profile import synthetic
from geryon.threshold.simulator import simulate

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)

RATE = 8_000_000  # link bits/s
BG = 2_000_000  # background bits/s per worker
PROFILE = synthetic([40_000, 80_000], [1e-3, 2e-3], [2e-3, 3e-3], model="tiny")


def port(nbytes: int, drops: int = 0) -> dict:
    return {"0": {"bytes": nbytes, "packets": nbytes // 1500, "drops": drops}}


def setting(mode: str, workers: int) -> dict:
    """A prediction's stored setting (predict.sim_setting less bandwidth_bps), as demo.json keeps it."""
    return {
        "workers": workers,
        "num_ps": 2,
        "mode": mode,
        "thresholds": [0.5],
        "slice_bytes": None,
        "partition": True,
        "interleave": False,
        "inflight": None,
        "barrier": True,
        "colocate": False,
        "background_bps": float(BG),
    }


def write_demo(root: Path) -> Path:
    runs = [
        {  # ps: 2 workers, counted from the switch's reset: 10 s of wall
            "mode": "ps",
            "workers": 2,
            "switch": "fifo",
            "paired": None,
            "wall_s": 10.0,
            "warmup_times": [1.0],
            "step_times": [1.0, 1.0],
            "error": None,
            "switch_counters": {
                "ps0": port(600_000),
                "ps1": port(400_000),  # pushes: 500 kB per worker, so are its pulls
                "worker0": port(1_500_000, drops=7),  # 1 MB of background
                "worker1": port(1_300_000),  # 0.8 MB
                "bg": port(20_000),
                "chief": port(1_000),
            },
        },
        {  # endhost, paired: counted over its own rounds, 4 s
            "mode": "endhost",
            "workers": 2,
            "switch": "fifo",
            "paired": {"rotation": ["geryon", "endhost"], "alternation": "round"},
            "wall_s": 99.0,
            "warmup_times": [1.0],
            "step_times": [1.0, 2.0],
            "error": None,
            "switch_counters": {
                "ps0": port(1_000_000),
                "ps1": port(1_000_000),
                "worker0": port(1_400_000),  # 0.4 MB
                "worker1": port(1_600_000),  # 0.6 MB
            },
        },
        {  # single: worker1 trains nothing, its port carries the background alone
            "mode": "single",
            "workers": 1,
            "switch": "fifo",
            "paired": None,
            "wall_s": 5.0,
            "step_times": [1.0],
            "error": None,
            "switch_counters": {
                "ps0": port(200_000),
                "ps1": port(100_000),
                "worker0": port(800_000),  # 0.5 MB
                "worker1": port(1_500_000),  # all of it
            },
        },
        {"mode": "vanilla", "workers": 2, "error": "boom", "switch_counters": None, "wall_s": 1.0},
    ]
    result = {
        "format": "geryon.demo",
        "version": 1,
        "config": {"rate_bits": RATE, "background_bits": BG, "workers": 2, "ps": 2},
        "runs": runs,
        "prediction": {
            "modes": {
                "ps": {"error": -0.1, "simulated": setting("fifo", 2)},
                "endhost": {"error": -0.05, "simulated": setting("end-host", 2)},
                "single": {"error": 0.01, "simulated": setting("fifo", 1)},
            }
        },
        "incluster": {"profile": PROFILE.to_dict()},
        "background": {"senders": [{"mbit_s": 1.5}, {"mbit_s": 1.7}]},
        "wall_s": 120.0,
    }
    path = root / "out" / "demo" / "demo.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))
    return path


def mbit(nbytes: float, seconds: float) -> float:
    return nbytes * 8 * PAYLOAD_FRACTION / seconds / 1e6


def test_measured_share_from_the_counters_hand_computed(run_bench: RunBench, tmp_path: Path) -> None:
    write_demo(tmp_path / "demo1")
    out = tmp_path / "bg.json"
    done = run_bench("bench_bg_share.py", str(tmp_path / "demo1"), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bg Mbit/s" in done.stdout and "endhost" in done.stdout
    assert "senders' own average" in done.stdout
    data = json.loads(out.read_text())
    assert data["simulated"] is False
    (demo,) = data["demos"]
    assert demo["sender_mbit_s"] == [1.5, 1.7]
    assert "vanilla" not in demo["modes"]  # a failed run has no counters to read
    (ps,) = demo["modes"]["ps"]
    assert ps["window"] == "wall" and ps["window_s"] == 10.0
    assert ps["ports"]["worker0"]["bg_bytes"] == 1_000_000 and ps["ports"]["worker0"]["drops"] == 7
    assert ps["bg_mbit_s"] == pytest.approx(mbit(900_000, 10.0))  # mean of the two worker ports
    (endhost,) = demo["modes"]["endhost"]
    assert endhost["window"] == "rounds" and endhost["window_s"] == 4.0
    assert endhost["bg_mbit_s"] == pytest.approx(mbit(500_000, 4.0))
    (single,) = demo["modes"]["single"]
    assert single["bg_mbit_s"] == pytest.approx(mbit(500_000, 5.0))
    assert single["idle_mbit_s"] == [pytest.approx(mbit(1_500_000, 5.0))]
    rows = {r["mode"]: r for r in data["modes"]}
    assert [r["mode"] for r in data["modes"]] == ["ps", "endhost", "single"]
    assert rows["ps"]["measured"]["median"] == pytest.approx(mbit(900_000, 10.0))
    assert rows["ps"]["prediction_error"]["median"] == -0.1
    assert rows["single"]["idle_port"]["median"] == pytest.approx(mbit(1_500_000, 5.0))
    assert rows["ps"]["simulated"]["median"] is None


def test_simulated_share_replays_each_modes_setting(run_bench: RunBench, tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_demo(tmp_path / name)
    out = tmp_path / "bg.json"
    done = run_bench(
        "bench_bg_share.py",
        str(tmp_path / "a"),
        str(tmp_path / "b" / "out" / "demo"),
        "--simulate",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {r["mode"]: r for r in data["modes"]}
    for mode, sim_mode, workers in (("ps", "fifo", 2), ("endhost", "end-host", 2), ("single", "fifo", 1)):
        s = setting(sim_mode, workers)
        s["bandwidth_bps"] = RATE * PAYLOAD_FRACTION
        sim = simulate(PROFILE, iterations=ITERATIONS, seed=0, **sim_args(s))
        want = sim.background_bytes["switch->worker0"] * 8 / sim.iteration_ends[-1] / 1e6
        assert rows[mode]["simulated"]["median"] == pytest.approx(want), mode
        assert rows[mode]["simulated"]["n"] == 2 and rows[mode]["measured"]["n"] == 2
        # Max-min on a fifo port: the background never above its rate, below it while pulls share.
        assert 0 < want <= BG / 1e6 * (1 + 1e-9), mode  # at it where no pull overlaps
        assert rows[mode]["measured_minus_simulated"] == pytest.approx(
            rows[mode]["measured"]["median"] - want
        )


def test_a_missing_or_foreign_demo_exits_2_naming_it(run_bench: RunBench, tmp_path: Path) -> None:
    done = run_bench("bench_bg_share.py", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "nowhere: no demo.json there" in done.stderr
    other = tmp_path / "demo.json"
    other.write_text(json.dumps({"format": "geryon.bench"}))
    done = run_bench("bench_bg_share.py", str(other))
    assert done.returncode == 2 and "format: expected 'geryon.demo'" in done.stderr
