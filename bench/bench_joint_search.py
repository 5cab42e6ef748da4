"""Joint (threshold, chunk size) search benchmark (issue 40 item 3): each searcher's answer after at most
15 trials against the best pair of an exhaustive sweep.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_joint_search.py [--models alexnet vgg16 ...]
        [--shapes 4x2 8x4] [--comm 0.7 1.4 2.8] [--seeds 3] [--noise 0] [--trials 15]
        [--candidates 12] [--out out/bench/joint_search.json]

Settings: the tagger zoo's models (geryon.tagger.models.BUILTIN_MODELS, timed from FLOPs on a V100,
batch 32) x cluster shapes (workers x PSes) x bandwidths. A bandwidth is given as the ratio of
communication to compute (`--comm`): pull and push of every byte over W workers' share of P PS links,
over the model's compute, so the settings span compute-bound to communication-bound the same way for
every model. Mode hybrid (the simulator's only mode with chunked preemption inside a class), 2 classes,
4 MiB slices, every other knob at its default (push order "whole", the data plane's).

The grid is what the searchers choose from: the cuts between the model's urgencies, thinned evenly in
bytes to `--candidates`, times the chunk sizes 16 KiB .. 4 MiB (geryon.threshold.joint). The sweep
simulates all of it (noise-free); its best is the reference. Each searcher then runs with budget
`--trials`, no warm-up and one iteration per candidate, so a trial is one measured iteration (with
`--noise`, multiplied by 1 + noise x N(0, 1)); its answer is scored by its noise-free time:

- sweep: the paper's (Sec. III-C), 5 thresholds (all cuts, not only the grid's) then 5 chunk sizes.
- bayes: Geryon's GP + EI over the grid (maximin initial points, stops when EI is small).
- bytescheduler: ByteScheduler's tuner setting (paper 004 Sec. 4.3): 10 random points, EI with
  xi 0.1 until the budget, the fastest measurement; seeded per run.
- guided~: ranks the grid with a wrong simulator (compute and bandwidth each off by a factor drawn
  from [0.7, 1.3] per seed, as a real profile would be), measures its best 3.

"within 2%": the answer's time <= 1.02 x the sweep's best. A setting counts as "flat" when the grid's
worst point is within 2% of its best (every answer then passes trivially); shares are given over all
settings and over the non-flat ones. "chunk %" is how much the chunk size alone moves the time at the
sweep's best thresholds (worst chunk over best). Prints a table and writes JSON (default
out/bench/joint_search.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import print_table, write_json

from geryon.threshold.joint import CHUNK_CANDIDATES, Objective, drive, exhaustive, joint_grid
from geryon.threshold.profile import Profile
from geryon.threshold.search import make_searcher

MODELS = ("alexnet", "vgg16", "vgg19", "resnet50", "inceptionv3", "mobilenetv2")
SLICE_BYTES = 4 << 20
WITHIN = 0.02
SEARCHERS = ("sweep", "bayes", "bytescheduler", "guided~")


def bandwidth_for(profile: Profile, workers: int, num_ps: int, comm: float) -> float:
    """Link rate at which pull + push of every byte over a worker's share of the PS links takes
    `comm` x the compute time."""
    total = sum(p.bytes for p in profile.params)
    return 2 * 8 * total * workers / num_ps / profile.compute_s / comm


def run_searcher(
    name: str,
    truth: Objective,
    profile: Profile,
    trials: int,
    candidates: int,
    seed: int,
    noise: float,
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "budget": trials,
        "warmup": 0,
        "repeats": 1,
        "chunk_sizes": list(CHUNK_CANDIDATES),
        "urgencies": [p.urgency for p in profile.params],
        "sizes": [p.bytes for p in profile.params],
    }
    if name in ("bayes", "bytescheduler", "guided~"):
        options["candidates"] = candidates
    if name == "bytescheduler":
        options["seed"] = seed
    strategy = name.rstrip("~")
    if name == "guided~":
        rng = np.random.default_rng(10_000 + seed)
        wrong = Objective(
            profile.scaled(float(rng.uniform(0.7, 1.3))),
            truth.workers,
            truth.num_ps,
            truth.bandwidth_bps * float(rng.uniform(0.7, 1.3)),
            truth.knobs,
        )
        options["predictor"] = lambda ts, chunk_bytes: wrong(ts, chunk_bytes)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    searcher = make_searcher(strategy, 2, **options)

    def measure(ts: Any, chunk: int) -> float:
        return truth(ts, chunk) * max(0.05, 1.0 + noise * float(rng.standard_normal()))

    used = drive(searcher, measure)
    assert searcher.best is not None and searcher.best_chunk_bytes is not None
    best = truth(searcher.best, searcher.best_chunk_bytes)
    return {
        "trials": used,
        "thresholds": list(searcher.best),
        "chunk_bytes": searcher.best_chunk_bytes,
        "best_s": best,
        "wall_s": time.perf_counter() - start,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--shapes", nargs="+", default=["4x2", "8x4"], help="WORKERSxPS")
    ap.add_argument("--comm", nargs="+", type=float, default=[0.7, 1.4, 2.8], help="comm/compute ratios")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--candidates", type=int, default=12, help="threshold candidates of the grid")
    ap.add_argument("--searchers", nargs="+", default=list(SEARCHERS), choices=SEARCHERS)
    ap.add_argument("--out", default="out/bench/joint_search.json")
    args = ap.parse_args()
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        ap.error(f"--shapes {args.shapes}: expected WORKERSxPS, e.g. 8x4")
    if args.seeds < 1 or args.trials < 1 or args.candidates < 1 or any(c <= 0 for c in args.comm):
        ap.error("--seeds, --trials, --candidates and --comm must be > 0")
    if not 0 <= args.noise < 1:
        ap.error("--noise must be in [0, 1)")

    from geryon.threshold.profiles import profile_from_model

    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for model in args.models:
        profile = profile_from_model(model, batch_size=32, device="v100")
        grid = joint_grid(profile, CHUNK_CANDIDATES, candidates=args.candidates)
        for workers, num_ps in shapes:
            for comm in args.comm:
                bandwidth = bandwidth_for(profile, workers, num_ps, comm)
                truth = Objective(profile, workers, num_ps, bandwidth, {"slice_bytes": SLICE_BYTES})
                t0 = time.perf_counter()
                best_trial, best_s = exhaustive(truth, grid)
                worst_s = max(truth(t.thresholds, t.chunk_bytes or 0) for t in grid)
                at_best = [truth(best_trial.thresholds, c) for c in CHUNK_CANDIDATES]
                sweep_wall = time.perf_counter() - t0
                row: dict[str, Any] = {
                    "setting": f"{model} {workers}x{num_ps} c{comm:g}",
                    "model": model,
                    "workers": workers,
                    "num_ps": num_ps,
                    "bandwidth_bps": bandwidth,
                    "comm": comm,
                    "grid": len(grid),
                    "best_s": best_s,
                    "best": best_trial.to_json(),
                    "spread": worst_s / best_s - 1,
                    # How much the chunk size alone matters: its worst over its best at the best thresholds.
                    "chunk_spread": max(at_best) / min(at_best) - 1,
                    "flat": worst_s <= best_s * (1 + WITHIN),
                    "sweep_wall_s": sweep_wall,
                    "runs": {},
                }
                for name in args.searchers:
                    runs = [
                        run_searcher(name, truth, profile, args.trials, args.candidates, seed, args.noise)
                        for seed in range(args.seeds)
                    ]
                    for r in runs:
                        r["gap"] = r["best_s"] / best_s - 1
                        r["within"] = r["gap"] <= WITHIN + 1e-12
                    row["runs"][name] = runs
                rows.append(row)
                print(
                    f"{row['setting']}: best {best_s * 1e3:.1f} ms, spread {row['spread']:.1%}, "
                    + ", ".join(
                        f"{n} {statistics.fmean(r['within'] for r in row['runs'][n]):.0%}"
                        for n in args.searchers
                    ),
                    flush=True,
                )
    wall = time.perf_counter() - started

    table = []
    for row in rows:
        line: dict[str, Any] = {
            "setting": row["setting"],
            "best": row["best_s"] * 1e3,
            "spread": row["spread"] * 100,
            "chunk": row["chunk_spread"] * 100,
        }
        for name in args.searchers:
            runs = row["runs"][name]
            line[name] = max(r["gap"] for r in runs) * 100
            line[name + "_ok"] = f"{sum(r['within'] for r in runs)}/{len(runs)}"
        table.append(line)
    columns = [
        ("setting", "setting", "s"),
        ("best", "sweep ms", ".1f"),
        ("spread", "spread %", ".1f"),
        ("chunk", "chunk %", ".1f"),
    ]
    for name in args.searchers:
        columns += [(name, f"{name} worst gap %", ".2f"), (name + "_ok", "ok", "s")]
    print_table(table, columns)

    summary: dict[str, Any] = {}
    live = [r for r in rows if not r["flat"]]
    chunky = sum(r["chunk_spread"] > WITHIN for r in rows)
    for name in args.searchers:
        every = [x["within"] for r in rows for x in r["runs"][name]]
        sharp = [x["within"] for r in live for x in r["runs"][name]]
        summary[name] = {
            "share_within": statistics.fmean(every),
            "share_within_nonflat": statistics.fmean(sharp) if sharp else None,
            "trials_max": max(x["trials"] for r in rows for x in r["runs"][name]),
            "trials_mean": statistics.fmean(x["trials"] for r in rows for x in r["runs"][name]),
            "gap_max": max(x["gap"] for r in rows for x in r["runs"][name]),
        }
    print(
        f"\n{len(rows)} settings ({len(live)} not flat), {args.seeds} seeds, "
        f"<= {args.trials} trials, {wall:.0f} s; the chunk size alone moves the best by > 2% in {chunky}"
    )
    for name, s in summary.items():
        nonflat = "-" if s["share_within_nonflat"] is None else f"{s['share_within_nonflat']:.0%}"
        print(
            f"  {name:14s} within 2%: {s['share_within']:.0%} of runs (non-flat settings: {nonflat}); "
            f"trials mean {s['trials_mean']:.1f}, max {s['trials_max']}; worst gap {s['gap_max']:.1%}"
        )
    write_json(
        args.out,
        {
            "bench": "joint_search",
            "args": vars(args),
            "chunk_candidates": list(CHUNK_CANDIDATES),
            "within": WITHIN,
            "wall_s": wall,
            "settings": rows,
            "summary": summary,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
