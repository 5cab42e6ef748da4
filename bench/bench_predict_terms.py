"""Where the demo's predicted step times fall short, from saved `make demo` outputs (nothing is rerun).

    .venv/bin/python bench/bench_predict_terms.py [DEMO_DIR ...] [--ps-costs FILE] [--incast FILE]
                                                  [--out out/bench/predict_terms.json]

DEMO_DIR (default out/demo) holds a demo's demo.json and its logs-*/ with the in-cluster capture's
trace (r<k>-<mode>-capture-trace/.../*.xplane.pb). Two tables per directory:

1. The captured mode's step on worker 0, split by `geryon.demo.stepdecomp` (medians over the steps
   the trace holds whole), beside the same split of the simulator's steady iteration of that mode:
   when the last pull arrived, when compute started and ended, compute busy time, the tail (last op to
   step end: the last pushes and the PSes' updates) and the idle gap to the next step.
2. Every mode's measured median step against the prediction, rebuilt from the saved result and its
   in-cluster profile under cumulative variants (error = (measured - predicted) / measured):
   - `before`: gRPC modes with fair interleaving (`inflight=None`), links at the full frame rate:
     `geryon.demo.predict` before this change, equal to the prediction a result saved then (no PS
     costs are passed: the runs here had none calibrated; `saved_predicted_s` in the JSON);
   - `order`: gRPC modes with one transfer at a time per connection in a random order per
     iteration (`inflight=1`, the mean over predict.ORDER_SEEDS seeds); what the trace shows: a
     step's first layer op starts at 60-100% of its pull phase, where fair interleaving lets the
     small conv tensors arrive first (forward at 3 ms);
   - `payload`: plus links at their TCP payload rate (predict.PAYLOAD_FRACTION, 95.6%: the testbed's
     measured goodput), as `geryon.demo.predict` now does;
   - `+gap`: plus the trace's median idle gap between worker 0's steps (the round's join and
     dispatch, and waiting for the slower worker), for modes with the capture's worker count;
   - `+tail`: plus the trace's median tail less the simulated tail of the captured mode (pushes and
     PS updates the simulator, without calibrated PS costs, takes as free or faster), same modes.
   `+gap` and `+tail` come from the captured mode's unmeasured trace rounds, not from any measured
   step median, but for that mode itself the validation is then not independent (same cluster).
   - `+ps` (only with `--ps-costs FILE`, a bench_ps_costs.py JSON): `payload` with those PS costs
     (and the file's `step_fixed_s`, when it has one), what `geryon.demo.predict` predicts with that
     calibration; nothing from the trace. Table 1 then has a `simulated +ps` row too.
   - `+incast` (only with `--incast FILE`, a bench_incast.py JSON): the prediction as
     `geryon.demo.predict` now makes it (`+ps` with `--ps-costs`, else `payload`) with the measured
     port efficiency where >= 2 hosts send to a switch port (simknobs.Incast, by the run's switch
     mode); nothing from the trace or the measured steps. Table 1 then has a `simulated +incast` row.
     Every mode takes the file's one-class value here (`geryon.demo.predict` before issue 15's
     per-class patterns).
   - `+per-class` (only when the `--incast` file has bench_incast's per-class patterns): `+incast`
     with geryon and paper taking the per-class value (one connection per class per worker-PS pair,
     predict.incast_key), as `geryon.demo.predict` now predicts; the other modes as `+incast`.

Writes JSON with every number (default out/bench/predict_terms.json).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.demo import predict as P
from geryon.demo.report import summarize as summarize_result
from geryon.demo.result_file import DemoResultError, load_result
from geryon.demo.stepdecomp import LAYER_OP, PULL, STEP, UPDATE_DONE, Event, decompose, read_events, summarize
from geryon.threshold.profile import Profile
from geryon.threshold.simulator import SimResult, simulate

VARIANTS = ("before", "order", "payload", "+gap", "+tail")
WITH_PS = "+ps"
WITH_INCAST = "+incast"
WITH_PER_CLASS = "+per-class"


def find_trace(demo_dir: Path, mode: str) -> Path | None:
    found = sorted(demo_dir.glob(f"logs-*/r*-{mode}-capture-trace/**/*.xplane.pb"))
    return found[-1] if found else None


def sim_parts(sim: SimResult, worker: str = "worker0") -> dict[str, Any]:
    """The simulated steady iterations of `worker`, split like a trace (stepdecomp.summarize)."""
    assert sim.spans is not None
    ends = sim.iteration_ends
    events = [Event(STEP, a, b, "iteration") for a, b in itertools.pairwise(ends)]
    for s in sim.spans:
        if s.host == worker and s.category in ("forward", "backward"):
            events.append(Event(LAYER_OP, s.start_s, s.end_s, s.name))
        elif s.category == "pull" and s.track.startswith(f"to {worker}"):
            events.append(Event(PULL, s.start_s, s.end_s, s.name))
    # A PS is "done" with this worker when its last push of the iteration arrived (PS costs, when
    # calibrated, are inside the iteration's end, not here).
    for a, b in itertools.pairwise(ends):
        done: dict[str, float] = {}
        for s in sim.spans:
            if s.host == worker and s.category == "push" and a + 1e-9 < s.end_s <= b + 1e-9:
                ps = s.track.split()[1]  # "to ps0" or "to ps0 class 1"
                done[ps] = max(done.get(ps, a), s.end_s)
        events += [Event(UPDATE_DONE, t, t, ps) for ps, t in done.items()]
    return summarize(decompose(events))


def variant(setting: dict[str, Any], inflight: float | None, payload: bool) -> dict[str, Any]:
    """`setting` (predict.sim_setting's, as predict now runs it) with gRPC's `inflight` replaced (the
    geryon modes keep None) and, unless `payload`, the links at their full frame rate."""
    out = dict(setting)
    if out.get("inflight") is not None:
        out["inflight"] = inflight
    if not payload:
        out["bandwidth_bps"] = setting["bandwidth_bps"] / P.PAYLOAD_FRACTION
    return out


def analyse(demo_dir: Path, ps_costs: str | None = None, incast_file: str | None = None) -> dict[str, Any]:
    result = load_result(demo_dir / "demo.json")
    config = P._config(result)
    incluster = result.get("incluster") or {}
    if not isinstance(incluster.get("profile"), dict):
        raise SystemExit(f"{demo_dir}: the result has no in-cluster profile ({incluster.get('error')})")
    profile = Profile.from_dict(incluster["profile"], where=f"{demo_dir}: incluster.profile")
    cap_mode = incluster.get("mode") or "ps"
    summary = summarize_result(result)
    runs = [r for r in result.get("runs") or [] if isinstance(r, dict)]

    incast, incast_info = P.resolve_incast(incast_file) if incast_file else ({}, {})
    # +incast: the one-class values only, so every mode takes its switch's (the prediction before).
    one_class = {k: v for k, v in incast.items() if not k.endswith(P.PER_CLASS_KEY)}
    per_class = one_class != incast

    def setting(mode: str, with_incast: bool = False, classes: bool = False) -> dict[str, Any]:
        return P.sim_setting(
            mode,
            [r for r in runs if r.get("mode") == mode],
            summary["modes"][mode]["thresholds"],
            config,
            (incast if classes else one_class) if with_incast else None,
        )

    trace = find_trace(demo_dir, cap_mode)
    measured = summarize(decompose(read_events(trace))) if trace is not None else {"steps": 0}
    cap_setting = setting(cap_mode)
    simulated = {
        name: sim_parts(
            simulate(
                profile,
                iterations=P.ITERATIONS,
                trace=True,
                **P.sim_args(variant(cap_setting, inflight, pay)),
            )
        )
        for name, inflight, pay in (
            ("before", None, False),
            ("order", P.GRPC_INFLIGHT, False),
            ("payload", P.GRPC_INFLIGHT, True),
        )
    }
    costs, ps_info = P.resolve_ps_costs(ps_costs) if ps_costs else (None, {})
    if costs is not None:
        simulated[WITH_PS] = sim_parts(
            simulate(profile, iterations=P.ITERATIONS, trace=True, ps_costs=costs, **P.sim_args(cap_setting))
        )
    if incast:
        simulated[WITH_INCAST] = sim_parts(
            simulate(
                profile,
                iterations=P.ITERATIONS,
                trace=True,
                ps_costs=costs,
                **P.sim_args(setting(cap_mode, with_incast=True)),
            )
        )
    by_workers: dict[int, float] = ps_info.get("step_fixed_by_workers") or {}
    gap = measured.get("gap_s") or 0.0
    tail_extra = max(0.0, (measured.get("tail_s") or 0.0) - (simulated["payload"].get("tail_s") or 0.0))
    modes: dict[str, Any] = {}
    for mode, m in summary["modes"].items():
        s = setting(mode)
        same_shape = s["workers"] == cap_setting["workers"]
        before = P.simulate_setting(profile, variant(s, None, False))[0]
        order = P.simulate_setting(profile, variant(s, P.GRPC_INFLIGHT, False))[0]
        payload = P.simulate_setting(profile, s)[0]
        pred = {
            "before": before,
            "order": order,
            "payload": payload,
            "+gap": payload + (gap if same_shape else 0.0),
            "+tail": payload + ((gap + tail_extra) if same_shape else 0.0),
        }
        fixed = by_workers.get(s["workers"], ps_info.get("step_fixed_s") or 0.0)
        if costs is not None:
            pred[WITH_PS] = P.simulate_setting(profile, s, costs)[0] + fixed
        if incast:
            pred[WITH_INCAST] = P.simulate_setting(profile, setting(mode, with_incast=True), costs)[0] + fixed
        if per_class:
            with_classes = setting(mode, with_incast=True, classes=True)
            pred[WITH_PER_CLASS] = P.simulate_setting(profile, with_classes, costs)[0] + fixed
        meas = m["median_step_s"]
        modes[mode] = {
            "measured_s": meas,
            "predicted_s": pred,
            "error": {k: P.relative_error(meas, v) for k, v in pred.items()},
            "saved_predicted_s": ((result.get("prediction") or {}).get("modes") or {})
            .get(mode, {})
            .get("predicted_s"),
            "terms_apply": same_shape,
        }
    return {
        "dir": str(demo_dir),
        "captured_mode": cap_mode,
        "trace": str(trace) if trace else None,
        "profile_compute_s": profile.compute_s,
        "measured_parts": measured,
        "simulated_parts": simulated,
        "gap_s": gap,
        "tail_extra_s": tail_extra,
        "ps_costs": ps_info or None,
        "incast": incast_info or None,
        "per_class": per_class,
        "modes": modes,
    }


PART_COLUMNS = [
    ("what", "worker 0 step", ""),
    ("steps", "steps", "d"),
    ("step_s", "step s", ".3f"),
    ("last_pull_s", "last pull", ".3f"),
    ("first_op_s", "compute from", ".3f"),
    ("last_op_s", "compute to", ".3f"),
    ("busy_s", "busy", ".3f"),
    ("tail_s", "tail", ".3f"),
    ("first_update_s", "1st PS done", ".3f"),
    ("last_update_s", "last PS done", ".3f"),
    ("gap_s", "gap", ".3f"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", default=["out/demo"], help="demo output directories")
    ap.add_argument("--ps-costs", metavar="FILE", help="add the +ps variant: a bench_ps_costs.py JSON")
    ap.add_argument("--incast", metavar="FILE", help="add the +incast variant: a bench_incast.py JSON")
    ap.add_argument("--out", default="out/bench/predict_terms.json")
    args = ap.parse_args(argv)
    variants = VARIANTS + ((WITH_PS,) if args.ps_costs else ()) + ((WITH_INCAST,) if args.incast else ())
    reports = []
    for d in args.dirs:
        try:
            rep = analyse(Path(d), args.ps_costs, args.incast)
        except DemoResultError as e:
            print(f"{ap.prog}: error: {e}", file=sys.stderr)
            return 2
        reports.append(rep)
        if rep["per_class"] and WITH_PER_CLASS not in variants:
            variants += (WITH_PER_CLASS,)
        print(
            f"\n{d}: {rep['captured_mode']} mode's trace "
            f"({rep['measured_parts'].get('steps', 0)} whole steps), "
            f"profile compute {rep['profile_compute_s']:.3f} s"
        )
        rows = [{"what": "measured (trace)", **rep["measured_parts"]}]
        rows += [{"what": f"simulated {k}", **v} for k, v in rep["simulated_parts"].items()]
        print_table(rows, PART_COLUMNS)
        print()
        mrows = []
        for mode, m in rep["modes"].items():
            row: dict[str, Any] = {"mode": mode, "measured": m["measured_s"]}
            for v in variants:
                row[v] = m["predicted_s"][v]
                row[f"e{v}"] = 100 * m["error"][v] if m["error"][v] is not None else None
            mrows.append(row)
        cols = [("mode", "mode", ""), ("measured", "measured s", ".3f")]
        for v in variants:
            cols += [(v, f"{v} s", ".3f"), (f"e{v}", "err %", "+.1f")]
        print_table(mrows, cols)
    if args.incast:
        # The change incast makes to today's prediction, per mode, one column per run.
        base = WITH_PS if args.ps_costs else "payload"
        steps = (base, WITH_INCAST) + ((WITH_PER_CLASS,) if WITH_PER_CLASS in variants else ())
        print(f"\nerror {' -> '.join(steps)}, % (measured - predicted) / measured:")
        brows = []
        for mode in reports[0]["modes"]:
            row = {"mode": mode}
            for i, r in enumerate(reports):
                e = r["modes"].get(mode, {}).get("error", {})
                if all(e.get(v) is not None for v in steps):
                    row[f"r{i}"] = " -> ".join(f"{100 * e[v]:+.1f}" for v in steps)
            brows.append(row)
        print_table(
            brows, [("mode", "mode", "")] + [(f"r{i}", f"run {i + 1}", "") for i in range(len(reports))]
        )
    # Across runs: the median absolute error per variant.
    summary = {}
    for v in variants:
        errs = [abs(m["error"][v]) for r in reports for m in r["modes"].values() if m["error"][v] is not None]
        summary[v] = {
            "median_abs_error": statistics.median(errs) if errs else None,
            "max_abs_error": max(errs) if errs else None,
            "within_10pct": sum(e <= 0.10 for e in errs),
            "of": len(errs),
        }
    print("\nall runs:")
    print_table(
        [{"variant": k, **v} for k, v in summary.items()],
        [
            ("variant", "variant", ""),
            ("median_abs_error", "median |err|", ".3f"),
            ("max_abs_error", "max |err|", ".3f"),
            ("within_10pct", "within 10%", "d"),
            ("of", "of", "d"),
        ],
    )
    write_json(
        args.out,
        {
            "bench": "predict_terms",
            "order_seeds": P.ORDER_SEEDS,
            "ps_costs": args.ps_costs,
            "incast": args.incast,
            "runs": reports,
            "summary": summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
