"""`geryon plan training`'s recommendation on the demo's shape, against a measured sweep on the testbed.

    sudo .venv/bin/python bench/bench_plan_testbed.py --profile PROFILE.json [--repeats 2] [--steps 6]

Issue 40 item 4's target: the planner's recommended settings, run on the testbed, within 3% of the
best of a measured sweep over the same settings, in paired rounds.

1. **The plan.** The user's command on the demo's shape: `geryon plan training --profile PROFILE
   --workers 2 --ps 2 --bandwidth 200mbit --background 100mbit:workers:in:lowest --barrier
   [--ps-costs F]` (the CLI, run as a subprocess; its defaults otherwise; `--barrier` because the
   demo joins every round: without it the plan predicted 331 ms against 0.66 s measured, 2026-12-05).
   Beside it the same search in process with the demo's own prediction terms
   (geryon.demo.predict.sim_setting for the geryon mode: the payload share of the link, the
   measured incast factor, gRPC's request order), printed as "demo terms".
   PROFILE is an in-cluster profile of the demo's paired modes: every `geryon demo` or
   `bench_e2e.py` run leaves one as `logs-*/r0-paired-capture-profile.json` under its output.
2. **The sweep.** For each slice size the planner searches (none, 4 MiB, 1 MiB, 256 KiB: no slicing
   runs as a slice larger than any variable) one paired cluster of the demo's shape (geryon mode:
   priority switch, urgency order inside a class), started with as many classes as the planner
   tries (4; a variant with fewer leaves the last ones empty). In it the variants alternate round
   by round (geryon.demo.variants; one settling round before each measured one, as the demo's
   modes): every 2-class cut between the model's urgencies the planner tries, the planner's best
   3- and 4-class thresholds at that slice size, and at each plan's recommended thresholds every
   chunk size the planner tries. The slice sizes' clusters alternate run by run, `--repeats` times.
3. **The confirm stage.** The best of many noisy medians is biased low (the luckiest wins), so the
   sweep's `--finalists` fastest variants and both plans' recommendations run again, fresh, with
   `--confirm` rounds each, in the same alternation (one cluster per slice size among them).
4. **The verdict**, from the confirm stage: per variant the median of its measured rounds over the
   repeats; the best; each plan's recommendation against it (median step time ratio; where both ran
   in one cluster, the round-paired ratio with a 95% bootstrap interval too).

Needs root (network namespaces). Writes JSON (default out/bench/plan_testbed.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import on_testbeds, print_table, write_json

from geryon.demo.paired import bootstrap_ci

DEMO_WORKERS, DEMO_PS, DEMO_RATE = 2, 2, "200mbit"
DEMO_BACKGROUND = "100mbit:workers:in:lowest"  # runner.background: half the link into every worker
NO_SLICING = 1 << 34  # the config's largest slice: larger than any variable, so nothing is sliced
TARGET = 0.03


def slice_name(s: int | None) -> str:
    if s is None:
        return "none"
    return f"{s >> 20}MiB" if s >= 1 << 20 else f"{s >> 10}KiB"


def variant_name(thresholds: tuple[float, ...], chunk: int | None) -> str:
    name = "t" + "-".join(f"{t:.4f}" for t in thresholds)
    return name + (f"-c{chunk >> 10}k" if chunk is not None else "")


def cli_plan(profile: Path, ps_costs: str | None) -> dict[str, Any]:
    """The user's command, as a user runs it (its JSON report)."""
    argv = [
        sys.executable,
        "-m",
        "geryon",
        "plan",
        "training",
        "--profile",
        str(profile),
        "--workers",
        str(DEMO_WORKERS),
        "--ps",
        str(DEMO_PS),
        "--bandwidth",
        DEMO_RATE,
        "--background",
        DEMO_BACKGROUND,
        "--barrier",
        "--json",
        "--quiet",
    ]
    if ps_costs:
        argv += ["--ps-costs", ps_costs]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"geryon plan training failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    report = json.loads(done.stdout)
    report["argv"] = ["geryon", *argv[3:]]  # the command as a user types it
    return report


def demo_terms_plan(profile: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """plan_training with the demo's prediction terms for the geryon mode (see the module docstring)."""
    from geryon.demo import predict
    from geryon.plan.training import plan_training

    ps_costs, _ = predict.resolve_ps_costs(None)
    incast, _ = predict.resolve_incast(None)
    # What a paired geryon run records (runner._fill_paired): urgency order in force, 2 classes used.
    first = {
        "protocol": "grpc+geryon",
        "switch": "priority",
        "partitioned": True,
        "order": "urgency",
        "ordering_available": True,
        "classes_used": 2,
        "workers": cfg["workers"],
    }
    setting = predict.sim_setting("geryon", [first], None, cfg, incast)
    knobs = predict.sim_args(setting)
    for key in ("workers", "num_ps", "bandwidth_bps"):
        knobs.pop(key)
    knobs.update(ps_costs=ps_costs, iterations=predict.ITERATIONS)
    plan = plan_training(
        profile, workers=cfg["workers"], num_ps=cfg["ps"], bandwidth_bps=setting["bandwidth_bps"], knobs=knobs
    )
    return plan.to_dict()


def sweep(plans: list[dict[str, Any]], profile: Any, classes: int) -> dict[int | None, list[dict[str, Any]]]:
    """Slice size -> its cluster's variants (module docstring, step 2), as variant JSON objects."""
    from geryon.plan.training import SLICE_CANDIDATES, TUPLES
    from geryon.threshold.joint import CHUNK_CANDIDATES, profile_space

    cuts = [tuple(ts) for ts in profile_space(profile).candidates(1, TUPLES[2])]
    out: dict[int | None, list[dict[str, Any]]] = {}
    for s in SLICE_CANDIDATES:
        settings: list[tuple[tuple[float, ...], int | None]] = [(ts, None) for ts in cuts]
        for plan in plans:
            for p in plan["explored"]:
                if p["slice_bytes"] == s and p["classes"] > 2:
                    settings.append((tuple(p["thresholds"]), None))
            rec = plan["recommended"]
            if rec["slice_bytes"] == s:
                settings.append((tuple(rec["thresholds"]), None))
                settings += [
                    (tuple(rec["thresholds"]), c) for c in CHUNK_CANDIDATES if c != rec["chunk_bytes"]
                ]
        seen: dict[str, dict[str, Any]] = {}
        for ts, chunk in settings:
            name = variant_name(ts, chunk)
            if name not in seen and len(ts) < classes:
                seen[name] = {"name": name, "mode": "geryon", "thresholds": list(ts), "chunk_bytes": chunk}
        out[s] = list(seen.values())
    return out


def recommended_key(plan: dict[str, Any]) -> tuple[str, str]:
    """(slice, variant) a plan's recommendation runs as in the sweep: the default chunk is no override."""
    from geryon.threshold.simknobs import CHUNK_BYTES

    rec = plan["recommended"]
    chunk = rec["chunk_bytes"] if rec["chunk_bytes"] != CHUNK_BYTES else None
    return slice_name(rec["slice_bytes"]), variant_name(tuple(rec["thresholds"]), chunk)


def measure(
    cfg_base: dict[str, Any], variants: dict[int | None, list[dict[str, Any]]], repeats: int, out_dir: Path
) -> list[dict[str, Any]]:
    """Every slice size's cluster, `repeats` times (A B C D A B C D); every variant's records."""
    from geryon.demo import runner
    from geryon.demo import variants as variants_mod
    from geryon.demo.config import validate
    from geryon.progress import Progress

    progress = Progress("bench_plan_testbed")
    cfg0 = validate(dict(cfg_base))
    runner.check_privileges()
    runner.native_ready(cfg0)
    records: list[dict[str, Any]] = []
    log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=out_dir))
    with runner.testbed(cfg0, progress) as tb, runner.background(tb, cfg0, progress):
        for repeat in range(repeats):
            for s, items in variants.items():
                cfg = validate({**cfg_base, "slice_bytes": s if s is not None else NO_SLICING})
                parsed = variants_mod.parse(items, cfg["classes"])
                progress.say(f"repeat {repeat + 1}/{repeats}, slices {slice_name(s)}: {len(parsed)} variants")
                started = time.monotonic()
                for rec in runner.VariantRun(tb, cfg, parsed, repeat, log_dir, progress).run_all():
                    rec["slice"] = slice_name(s)
                    records.append(rec)
                    if rec.get("error"):
                        progress.say(f"  {rec['variant']['name']}: FAILED {rec['error']}")
                progress.say(f"  done in {time.monotonic() - started:.0f} s")
    return records


def summarize(records: list[dict[str, Any]], plans: dict[str, dict[str, Any]]) -> dict[str, Any]:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if not r.get("error"):
            by.setdefault((r["slice"], r["variant"]["name"]), []).append(r)
    rows = []
    for (s, name), recs in by.items():
        times = [t for r in recs for t in r["step_times"]]
        if times:
            rows.append(
                {
                    "slice": s,
                    "variant": name,
                    "median_s": statistics.median(times),
                    "rounds": len(times),
                    "classes": sum(1 for t in recs[0]["variant"]["thresholds"] if t < 1 - 1e-6) + 1,
                    "chunk": recs[0]["variant"]["chunk_bytes"],
                }
            )
    rows.sort(key=lambda row: row["median_s"])
    if not rows:
        return {"rows": [], "best": None, "plans": {}}
    best = rows[0]
    verdicts = {}
    for label, plan in plans.items():
        key = recommended_key(plan)
        mine = next((row for row in rows if (row["slice"], row["variant"]) == key), None)
        v: dict[str, Any] = {
            "slice": key[0],
            "variant": key[1],
            "measured_s": mine and mine["median_s"],
            "predicted_s": plan["recommended"]["iteration_s"],
        }
        if mine is not None:
            v["over_best"] = mine["median_s"] / best["median_s"]
            v["met"] = v["over_best"] <= 1 + TARGET
            if mine["slice"] == best["slice"] and mine is not best:
                ratios = paired_ratios(by[key], by[(best["slice"], best["variant"])])
                ci = bootstrap_ci(ratios)
                v["paired"] = {
                    "ratio": statistics.median(ratios) if ratios else None,
                    "ci": list(ci) if ci else None,
                    "pairs": len(ratios),
                }
        verdicts[label] = v
    return {"rows": rows, "best": best, "plans": verdicts}


def finalists(
    summary: dict[str, Any],
    plans: dict[str, dict[str, Any]],
    variants: dict[int | None, list[dict[str, Any]]],
    top: int,
) -> dict[int | None, list[dict[str, Any]]]:
    """The sweep's `top` fastest variants and every plan's recommendation, by slice size: the confirm
    stage measures them again, fresh, so the best is not the luckiest of many noisy medians."""
    keep = {(r["slice"], r["variant"]) for r in summary["rows"][:top]}
    keep |= {recommended_key(plan) for plan in plans.values()}
    out = {}
    for s, items in variants.items():
        chosen = [v for v in items if (slice_name(s), v["name"]) in keep]
        if chosen:
            out[s] = chosen
    return out


def paired_ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[float]:
    """A's step time over B's, round i of a repeat against round i of the same repeat's cluster."""
    out = []
    for ra in a:
        rb = next((r for r in b if r["repeat"] == ra["repeat"]), None)
        if rb is not None:
            out += [
                x / y for x, y in zip(ra["step_times"], rb["step_times"], strict=False) if x > 0 and y > 0
            ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--profile", required=True, help="an in-cluster profile of the demo's paired modes (JSON)"
    )
    ap.add_argument(
        "--ps-costs", help="bench_ps_costs.py JSON for the CLI's plan (default: the demo's, if any)"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="alternations of the slice sizes' clusters (default 2)"
    )
    ap.add_argument(
        "--steps", type=int, default=6, help="measured rounds per variant and cluster (default 6)"
    )
    ap.add_argument(
        "--finalists", type=int, default=4, help="the sweep's fastest variants measured again (default 4)"
    )
    ap.add_argument(
        "--confirm", type=int, default=16, help="measured rounds per finalist and cluster (default 16)"
    )
    ap.add_argument("--plan-only", action="store_true", help="print the plans and the sweep, measure nothing")
    ap.add_argument("--out", default="out/bench/plan_testbed.json")
    args = ap.parse_args()
    if min(args.repeats, args.steps, args.finalists, args.confirm) < 1:
        ap.error("--repeats, --steps, --finalists and --confirm must be at least 1")
    from geryon.demo.config import validate
    from geryon.demo.defaults import DEFAULTS
    from geryon.demo.predict import DEFAULT_PS_COSTS
    from geryon.threshold.profile import Profile

    profile_path = Path(args.profile)
    try:
        profile = Profile.load(profile_path)
    except (OSError, ValueError) as e:
        ap.error(f"--profile: {e}")
    ps_costs = args.ps_costs or (str(DEFAULT_PS_COSTS) if DEFAULT_PS_COSTS.exists() else None)
    cfg_base = {**DEFAULTS, "modes": ["geryon"], "classes": 4, "steps": args.steps, "repeats": 1}
    cfg = validate(dict(cfg_base))
    plans = {"cli": cli_plan(profile_path, ps_costs), "demo terms": demo_terms_plan(profile, cfg)}
    for label, plan in plans.items():
        rec = plan["recommended"]
        print(
            f"plan ({label}): slices {slice_name(rec['slice_bytes'])}, {rec['classes']} classes, thresholds "
            f"{rec['thresholds']}, chunk {rec['chunk_bytes'] >> 10} KiB, "
            f"predicted {rec['iteration_s'] * 1e3:.1f} ms"
        )
    variants = sweep(list(plans.values()), profile, cfg["classes"])
    total = sum(len(v) for v in variants.values())
    print(
        f"sweep: {total} variants in {len(variants)} clusters x {args.repeats} repeats, "
        f"{args.steps} rounds each"
    )
    payload: dict[str, Any] = {
        "args": vars(args),
        "profile": str(profile_path),
        "plans": plans,
        "variants": {slice_name(s): v for s, v in variants.items()},
        "target": TARGET,
    }
    if args.plan_only:
        write_json(args.out, payload)
        return 0
    out_dir = Path(args.out).with_suffix("")
    out_dir.mkdir(parents=True, exist_ok=True)

    def both_stages() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        first = measure({**cfg_base, "steps": args.steps}, variants, args.repeats, out_dir)
        subset = finalists(summarize(first, plans), plans, variants, args.finalists)
        print(f"confirm: {sum(len(v) for v in subset.values())} finalists, {args.confirm} rounds each")
        return first, measure({**cfg_base, "steps": args.confirm}, subset, args.repeats, out_dir)

    sweep_records, confirm_records = on_testbeds("bench_plan_testbed", both_stages)
    payload["sweep"] = {"records": sweep_records, "summary": summarize(sweep_records, plans)}
    payload["confirm"] = {"records": confirm_records, "summary": summarize(confirm_records, plans)}
    for stage in ("sweep", "confirm"):
        summary = payload[stage]["summary"]
        print(f"\n{stage}:")
        print_table(
            summary["rows"],
            [
                ("slice", "slices", ""),
                ("variant", "variant", ""),
                ("classes", "k", "d"),
                ("median_s", "step s", ".4f"),
                ("rounds", "rounds", "d"),
            ],
        )
        for label, v in summary["plans"].items():
            over = v.get("over_best")
            paired = v.get("paired") or {}
            print(
                f"{label}: {v['slice']} {v['variant']} measured {v['measured_s']}, over best "
                f"{'-' if over is None else f'{over:.4f}'}"
                + (
                    f", paired {paired['ratio']:.4f} {paired['ci']} ({paired['pairs']})"
                    if paired.get("ratio")
                    else ""
                )
                + f": within {TARGET:.0%} {'yes' if v.get('met') else 'NO'}"
            )
    write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
