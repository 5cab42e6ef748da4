"""The background's real share of the workers' switch ports in saved demos, against the simulator's.

    .venv/bin/python bench/bench_bg_share.py DEMO [DEMO ...] [--simulate] [--out out/bench/bg_share.json]

DEMO is a saved demo: a directory holding out/demo/demo.json (a checkout `make demo` ran in), a
directory holding demo.json, or the file itself. Nothing runs on the testbed: every number comes from
what the demo recorded (issue 15: ps and endhost are predicted 4-13% too slow in several demos).

Measured, per mode and worker port, from the run's switch counters (geryon.demo.runner: the bytes each
switch port sent toward its host, per class, over the mode's run). The background (runner.background:
a paced TCP stream from the bg host to every worker, its own DSCP) and the pulls share a worker's port;
a fifo port has one queue, so the counters cannot tell them apart. The pulls are counted instead on the
PS ports: each trained worker pushes every parameter's gradient (the same bytes as the pull) to the PS
ports, so a trained worker's pulls are (bytes of all PS ports) / (trained workers), and

    background = bytes of the worker's port - its pulls      (an untrained worker's port: all of it)

Both sides count ACKs of the other direction and retransmissions alike (their difference is in the
interval of the per-demo spread). Over the mode's window: the paired modes (geryon, paper, endhost
alternate round by round in one cluster; runner.PairedRun) count only their own rounds, so the window
is the sum of their round times (warm-up, search and measured rounds); the other modes count from the
switch's reset to the chief's end, task start-up included ("wall"), so their rate mixes the start-up
(no training on the ports) with training. Rates are payload Mbit/s (x predict.PAYLOAD_FRACTION: the
counters count frames, the sender's and the simulator's rates are TCP payload).

Simulated (--simulate): the demo's own prediction setting per mode (demo.json's prediction, the
in-cluster profile, the PS costs of the demo's out/bench/ps_costs.json) through the simulator; the
background's bytes into worker0's port (SimResult.background_bytes) over the simulated run, the mean
over the setting's random orders. The simulator shares a fifo port max-min, the background capped at
its nominal rate.

Also printed: each untrained worker port's rate (the single mode's worker1: background alone on its
port) and the senders' own demo-wide average, which say whether the paced sender kept its schedule
(traffic.bulk catches up what it fell behind, so a port free of training sees it above its rate).

Medians over demos with a 95% bootstrap interval (geryon.demo.paired.bootstrap_ci). Prints a table,
writes JSON (default out/bench/bg_share.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.demo.paired import bootstrap_ci
from geryon.demo.predict import ITERATIONS, ORDER_SEEDS, PAYLOAD_FRACTION, sim_args
from geryon.demo.result_file import DemoResultError, load_result

MODE_ORDER = ("vanilla", "ps", "geryon", "paper", "endhost", "single")


class BenchError(ValueError):
    pass


def demo_json(path: str | Path) -> Path:
    """The demo.json of a saved demo given as the file, its directory or a checkout that ran it."""
    p = Path(path)
    for candidate in (p, p / "demo.json", p / "out" / "demo" / "demo.json"):
        if candidate.is_file():
            return candidate
    raise BenchError(f"{path}: no demo.json there (nor in demo.json, out/demo/demo.json)")


def load(path: Path) -> dict[str, Any]:
    try:
        return load_result(path)
    except DemoResultError as e:
        raise BenchError(str(e)) from None


def _port_bytes(counters: Mapping[str, Any], host: str) -> int:
    return sum(int(c["bytes"]) for c in (counters.get(host) or {}).values())


def _window(run: Mapping[str, Any], where: str) -> tuple[float, str]:
    """(seconds, kind) the run's counters cover: its rounds when paired, else its wall time."""
    if run.get("paired"):
        rounds = [float(t) for t in (run.get("warmup_times") or []) + (run.get("step_times") or [])]
        if not rounds:
            raise BenchError(f"{where}: a paired run without round times")
        return sum(rounds), "rounds"
    wall = run.get("wall_s")
    if not isinstance(wall, int | float) or isinstance(wall, bool) or wall <= 0:
        raise BenchError(f"{where}.wall_s: expected seconds > 0, got {wall!r}")
    return float(wall), "wall"


def measure_run(run: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The background's payload Mbit/s per worker port over the run's window; None: no counters."""
    counters = run.get("switch_counters")
    if not counters or run.get("error"):
        return None
    if not isinstance(counters, Mapping):
        raise BenchError(f"{where}.switch_counters: expected an object")
    trained = run.get("workers")
    if not isinstance(trained, int) or isinstance(trained, bool) or trained < 1:
        raise BenchError(f"{where}.workers: expected an integer >= 1, got {trained!r}")
    seconds, kind = _window(run, where)
    pulls = sum(_port_bytes(counters, h) for h in counters if h.startswith("ps")) / trained
    ports: dict[str, dict[str, Any]] = {}
    for host in sorted(h for h in counters if h.startswith("worker")):
        index = int(host.removeprefix("worker"))
        is_trained = index < trained
        bg = _port_bytes(counters, host) - (pulls if is_trained else 0.0)
        ports[host] = {
            "trained": is_trained,
            "bg_bytes": bg,
            "bg_mbit_s": bg * 8 * PAYLOAD_FRACTION / seconds / 1e6,
            "drops": sum(int(c.get("drops", 0)) for c in counters[host].values()),
        }
    busy = [p["bg_mbit_s"] for p in ports.values() if p["trained"]]
    return {
        "mode": run.get("mode"),
        "switch": run.get("switch"),
        "window": kind,
        "window_s": seconds,
        "ports": ports,
        "bg_mbit_s": statistics.mean(busy) if busy else None,
        "idle_mbit_s": [p["bg_mbit_s"] for p in ports.values() if not p["trained"]],
    }


def simulate_mode(result: Mapping[str, Any], mode: str, ps_costs: Any) -> dict[str, Any] | None:
    """The simulator's background rate into worker0's port for the demo's own setting of `mode`."""
    from geryon.threshold.profile import Profile
    from geryon.threshold.simulator import simulate

    pred = (result.get("prediction") or {}).get("modes", {}).get(mode)
    profile_data = (result.get("incluster") or {}).get("profile")
    if not isinstance(pred, Mapping) or not isinstance(profile_data, Mapping):
        return None  # no prediction, or no in-cluster profile to replay it with
    setting = dict(pred["simulated"])
    setting["bandwidth_bps"] = float(result["config"]["rate_bits"]) * PAYLOAD_FRACTION
    if not setting.get("background_bps"):
        return None
    profile = Profile.from_dict(dict(profile_data), where="incluster.profile")
    args = sim_args(setting)
    seeds = ORDER_SEEDS if args.get("inflight") is not None else 1
    rates, steps = [], []
    for k in range(seeds):
        sim = simulate(profile, iterations=ITERATIONS, ps_costs=ps_costs, seed=k, **args)
        end = sim.iteration_ends[-1]
        rates.append(sim.background_bytes.get("switch->worker0", 0.0) * 8 / end / 1e6)
        steps.append(sim.iteration_s)
    return {
        "bg_mbit_s": statistics.mean(rates),
        "simulated_s": statistics.mean(steps),
        "seeds": seeds,
        "nominal_mbit_s": setting["background_bps"] / 1e6,
    }


def _ps_costs(path: Path) -> Any:
    from geryon.demo.predict import resolve_ps_costs

    costs_file = path.parent.parent / "bench" / "ps_costs.json"
    if not costs_file.is_file():
        return None
    costs, _ = resolve_ps_costs(costs_file)
    return costs


def measure_demo(path: Path, simulate: bool) -> dict[str, Any]:
    result = load(path)
    runs = result["runs"]  # a list: load() checked it
    ps_costs = _ps_costs(path) if simulate else None
    modes: dict[str, Any] = {}
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or not isinstance(run.get("mode"), str):
            raise BenchError(f"{path}: runs[{i}]: expected an object with a mode")
        got = measure_run(run, f"{path}: runs[{i}]")
        if got is None:
            continue
        pred = (result.get("prediction") or {}).get("modes", {}).get(run["mode"]) or {}
        got["prediction_error"] = pred.get("error")
        if simulate:
            got["simulated"] = simulate_mode(result, run["mode"], ps_costs)
        modes.setdefault(run["mode"], []).append(got)
    senders = (result.get("background") or {}).get("senders") or []
    return {
        "demo": str(path),
        "background_bits": (result.get("config") or {}).get("background_bits"),
        "sender_mbit_s": [s["mbit_s"] for s in senders if isinstance(s, Mapping) and "mbit_s" in s],
        "demo_wall_s": result.get("wall_s"),
        "modes": modes,
    }


def _stat(values: Sequence[float]) -> dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "ci95": None, "n": 0}
    return {"median": statistics.median(vals), "ci95": bootstrap_ci(vals), "n": len(vals)}


def summarize(demos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per mode: medians over the demos (each demo's mean over its repeats)."""
    names = sorted(
        {m for d in demos for m in d["modes"]},
        key=lambda m: (m not in MODE_ORDER, MODE_ORDER.index(m) if m in MODE_ORDER else 0, m),
    )
    rows = []
    for mode in names:
        per = [d["modes"][mode] for d in demos if mode in d["modes"]]
        measured = [
            statistics.mean(r["bg_mbit_s"] for r in runs if r["bg_mbit_s"] is not None) for runs in per
        ]
        sims = [
            statistics.mean(r["simulated"]["bg_mbit_s"] for r in runs)
            for runs in per
            if all(r.get("simulated") for r in runs)
        ]
        errors = [runs[0]["prediction_error"] for runs in per if runs[0].get("prediction_error") is not None]
        idle = [v for runs in per for r in runs for v in r["idle_mbit_s"]]
        m, s = _stat(measured), _stat(sims)
        rows.append(
            {
                "mode": mode,
                "switch": per[0][0]["switch"],
                "window": per[0][0]["window"],
                "demos": len(per),
                "measured": m,
                "simulated": s,
                "measured_minus_simulated": (
                    m["median"] - s["median"] if m["median"] is not None and s["median"] is not None else None
                ),
                "prediction_error": _stat(errors),
                "idle_port": _stat(idle),
            }
        )
    return rows


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def ci(stat: Mapping[str, Any]) -> str | None:
        c = stat.get("ci95")
        return f"{c[0]:.1f}-{c[1]:.1f}" if c else None

    return [
        {
            "mode": r["mode"],
            "switch": r["switch"],
            "window": r["window"],
            "n": r["demos"],
            "measured": r["measured"]["median"],
            "ci": ci(r["measured"]),
            "simulated": r["simulated"]["median"],
            "diff": r["measured_minus_simulated"],
            "error": r["prediction_error"]["median"],
            "idle": r["idle_port"]["median"],
        }
        for r in rows
    ]


COLUMNS = [
    ("mode", "mode", ""),
    ("switch", "switch", ""),
    ("window", "window", ""),
    ("n", "demos", "d"),
    ("measured", "bg Mbit/s", ".1f"),
    ("ci", "95% CI", ""),
    ("simulated", "sim Mbit/s", ".1f"),
    ("diff", "meas-sim", "+.1f"),
    ("error", "pred. error", "+.1%"),
    ("idle", "idle port", ".1f"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("demos", nargs="+", help="saved demos: demo.json, its directory, or the checkout")
    ap.add_argument("--simulate", action="store_true", help="replay each mode's prediction setting too")
    ap.add_argument("--out", default="out/bench/bg_share.json")
    args = ap.parse_args(argv)
    try:
        paths = [demo_json(d) for d in args.demos]
        demos = [measure_demo(p, args.simulate) for p in paths]
    except BenchError as e:
        print(f"bench_bg_share: {e}", file=sys.stderr)
        return 2
    rows = summarize(demos)
    print(
        "The background's payload Mbit/s per trained worker's switch port (median over demos), "
        "against the simulator's (max-min on fifo ports, capped at its nominal rate):"
    )
    print_table(table_rows(rows), COLUMNS)
    senders = [v for d in demos for v in d["sender_mbit_s"]]
    if senders:
        print(
            f"senders' own average over each whole demo: median {statistics.median(senders):.1f} Mbit/s "
            f"({min(senders):.1f}-{max(senders):.1f}, {len(senders)} senders) of "
            f"{(demos[0]['background_bits'] or 0) / 1e6:.0f} nominal"
        )
    write_json(
        args.out,
        {
            "bench": "bg_share",
            "payload_fraction": PAYLOAD_FRACTION,
            "simulated": args.simulate,
            "modes": rows,
            "demos": demos,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
