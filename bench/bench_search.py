"""Threshold search benchmark: live iterations used and the gap to the exhaustive-sweep optimum.

    .venv/bin/python bench/bench_search.py [--profiles 24] [--repeats 3] [--noise 0.05] [--out FILE]
                                           [--noise-from DEMO_JSON ...] [--search-repeats 1,3]

Ground truth is the cluster simulator (`geryon.threshold.simulator.simulate`, mode "network") on
randomized CNN-like synthetic profiles: 6-24 layers whose parameter sizes grow with depth and whose
compute shrinks with depth (jittered at random), 2-8 workers, 2-4 PSes, 1 MiB slices, and a
bandwidth that makes communication 0.3-1.5x compute. Profiles where no threshold is 3% better than
the worst (priorities cannot matter there, so every searcher would trivially score 0%) are skipped
and counted. The optimum is the best of a noise-free sweep over a fine grid of thresholds.

Each strategy then runs online against the simulator with `--noise` multiplicative normal noise on
every measured iteration, `--repeats` noise seeds per profile, default options (budget 10 live
iterations, 1 warm-up iteration after every change). Rows "+urg" pass the profile's urgencies and
parameter sizes. "guided~" gets a deliberately wrong predictor: the simulator on the profile with
compute and bandwidth each off by a random factor in [0.7, 1.3], as a real profile would be.

`--noise-from demo.json ...` replaces the normal noise with the testbed's own: every measured step
of every mode in those demo runs (`geryon demo`'s out/demo/demo.json), divided by the median of its
run, resampled at random (heavy tails included: a 1.6x step among 0.8 s ones is what the testbed
gives). `--search-repeats 1,3` runs every strategy once per value: measured iterations per
candidate (their median counts), with the budget grown to match (5 x (1 + repeats): the sweep's 5
candidates, each with one warm-up iteration); rows get " r3" and so on.

Prints a table and writes JSON (default out/bench/search.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from geryon.threshold.profile import Profile, synthetic
from geryon.threshold.search import make_searcher
from geryon.threshold.simulator import simulate

SLICE_BYTES = 1024 * 1024
MIN_SPREAD = 0.03

# name -> (strategy, uses urgencies, predictor kind)
CONFIGS: dict[str, tuple[str, bool, str | None]] = {
    "sweep": ("sweep", False, None),
    "sweep+urg": ("sweep", True, None),
    "bayes": ("bayes", False, None),
    "bayes+urg": ("bayes", True, None),
    "guided": ("guided", False, "exact"),
    "guided+urg": ("guided", True, "exact"),
    "guided~+urg": ("guided", True, "perturbed"),
}


def random_case(rng: np.random.Generator) -> dict[str, Any]:
    layers = int(rng.integers(6, 25))
    depth = np.linspace(0.0, 1.0, layers)
    sizes = [int(2 ** (rng.uniform(12, 16) + 6 * d)) * 4 for d in depth]
    forward = [float(f) for f in rng.uniform(0.5, 1.5, layers) * 2e-3 * (1.5 - depth)]
    backward = [float(f * rng.uniform(1.5, 2.5)) for f in forward]
    workers = int(rng.integers(2, 9))
    num_ps = int(rng.integers(2, 5))
    profile = synthetic(sizes, forward, backward, model=f"cnn{layers}")
    # Pull + push of every byte, W workers' share of P PS links: comm/compute in [0.3, 1.5].
    bandwidth = 2 * 8 * sum(sizes) * workers / num_ps / profile.compute_s * float(rng.uniform(0.3, 1.5))
    return {"profile": profile, "workers": workers, "num_ps": num_ps, "bandwidth_bps": bandwidth}


def simulator(case: dict[str, Any], profile: Profile | None = None, bandwidth: float | None = None) -> Any:
    cache: dict[tuple[float, ...], float] = {}

    def run(ts: tuple[float, ...]) -> float:
        if ts not in cache:
            cache[ts] = simulate(
                profile or case["profile"],
                workers=case["workers"],
                num_ps=case["num_ps"],
                bandwidth_bps=bandwidth or case["bandwidth_bps"],
                mode="network",
                thresholds=ts,
                slice_bytes=SLICE_BYTES,
            ).iteration_s
        return cache[ts]

    return run


def perturbed(case: dict[str, Any], rng: np.random.Generator) -> Callable[[tuple[float, ...]], float]:
    profile: Profile = case["profile"].scaled(float(rng.uniform(0.7, 1.3)))
    return simulator(case, profile, case["bandwidth_bps"] * float(rng.uniform(0.7, 1.3)))


def empirical_noise(paths: list[str]) -> list[float]:
    """Every measured step of every run in these demo.json files over its run's median step."""
    ratios: list[float] = []
    for path in paths:
        try:
            demo = json.loads(Path(path).read_text())
            runs = demo["runs"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"--noise-from {path}: not a demo.json with runs ({e})") from None
        for run in runs:
            steps = [float(t) for t in (run.get("step_times") or []) if isinstance(t, (int, float)) and t > 0]
            if len(steps) >= 5:
                mid = statistics.median(steps)
                ratios.extend(t / mid for t in steps)
    if len(ratios) < 20:
        raise ValueError(f"--noise-from: {len(ratios)} measured steps in all, need at least 20")
    return ratios


def search_once(
    config: str,
    case: dict[str, Any],
    truth: Callable[[tuple[float, ...]], float],
    noise: float,
    seed: int,
    empirical: list[float] | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    strategy, with_urgencies, predictor_kind = CONFIGS[config]
    rng = np.random.default_rng(seed)
    options: dict[str, Any] = {}
    if repeats > 1:
        options["repeats"] = repeats
        options["budget"] = 5 * (1 + repeats)
    profile: Profile = case["profile"]
    if with_urgencies:
        options["urgencies"] = [p.urgency for p in profile.params]
        options["sizes"] = [p.bytes for p in profile.params]
    if predictor_kind == "exact":
        options["predictor"] = truth
    elif predictor_kind == "perturbed":
        options["predictor"] = perturbed(case, np.random.default_rng(seed + 7919))
    # The searcher's own time (its construction includes the guided strategy's ranking), without the
    # live iterations it asks for.
    start = time.perf_counter()
    searcher = make_searcher(strategy, 2, **options)
    own = time.perf_counter() - start
    for _ in range(400):  # bounded; the budget ends every search well before
        if searcher.converged:
            break
        start = time.perf_counter()
        ts = searcher.next_threshold()
        own += time.perf_counter() - start
        if empirical is not None:
            measured = truth(ts) * empirical[int(rng.integers(len(empirical)))]
        else:
            measured = truth(ts) * max(0.05, 1.0 + noise * float(rng.standard_normal()))
        start = time.perf_counter()
        searcher.report(ts, measured)
        own += time.perf_counter() - start
    assert searcher.best is not None
    return {
        "live": searcher.live_iterations,
        "best": list(searcher.best),
        "best_s": truth(searcher.best),
        "searcher_s": own,
    }


def distribution(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(np.ceil(0.9 * len(ordered))) - 1)]
    mean = statistics.fmean(ordered)
    return {"median": statistics.median(ordered), "mean": mean, "p90": p90, "max": ordered[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", type=int, default=24, help="priority-sensitive profiles (>= 20 asked)")
    ap.add_argument("--repeats", type=int, default=3, help="noise seeds per profile and strategy")
    ap.add_argument("--noise", type=float, default=0.05, help="multiplicative timing noise (std dev)")
    ap.add_argument("--grid", type=int, default=199, help="thresholds in the exhaustive noise-free sweep")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--noise-from", nargs="+", metavar="DEMO_JSON", help="the testbed's step noise instead")
    ap.add_argument("--search-repeats", default="1", help="measured iterations per candidate (e.g. 1,3)")
    ap.add_argument("--out", default="out/bench/search.json")
    args = ap.parse_args()
    if args.profiles < 1 or args.repeats < 1 or args.grid < 1:
        ap.error("--profiles, --repeats and --grid must be >= 1")
    if not 0 <= args.noise < 1:
        ap.error("--noise must be in [0, 1)")
    try:
        search_repeats = [int(v) for v in args.search_repeats.split(",")]
    except ValueError:
        search_repeats = []
    if not search_repeats or any(not 1 <= r <= 20 for r in search_repeats):
        ap.error(f"--search-repeats {args.search_repeats!r}: expected integers in 1..20, comma-separated")
    try:
        empirical = empirical_noise(args.noise_from) if args.noise_from else None
    except ValueError as e:
        ap.error(str(e))
    noise_label = (
        f"the testbed's ({len(empirical)} steps from {len(args.noise_from)} demo runs)"
        if empirical is not None
        else f"{args.noise:.0%}"
    )
    variants = [(c, r) for c in args.configs for r in search_repeats]

    def label(config: str, r: int) -> str:
        return config if r == 1 else f"{config} r{r}"

    rng = np.random.default_rng(args.seed)
    grid = [(i / (args.grid + 1),) for i in range(1, args.grid + 1)]
    cases: list[dict[str, Any]] = []
    skipped = 0
    tries = 0
    start = time.perf_counter()
    while len(cases) < args.profiles and tries < 20 * args.profiles:
        tries += 1
        case = random_case(rng)
        truth = simulator(case)
        times = [truth(ts) for ts in grid]
        best, worst = min(times), max(times)
        if worst / best - 1 < MIN_SPREAD:
            skipped += 1
            continue
        case.update(truth=truth, optimum_s=best, worst_s=worst, optimum=grid[int(np.argmin(times))])
        cases.append(case)
        print(
            f"profile {len(cases)}/{args.profiles}: {case['profile'].num_layers} layers, "
            f"{case['workers']} workers, {case['num_ps']} PSes, worst/best {worst / best:.3f}",
            file=sys.stderr,
            flush=True,
        )
    sweep_s = time.perf_counter() - start

    runs: dict[str, list[dict[str, Any]]] = {label(c, k): [] for c, k in variants}
    for n, case in enumerate(cases, 1):
        for config, k in variants:
            for r in range(args.repeats):
                # The same seed for every variant: each meets the same noise draws, in its own order.
                out = search_once(config, case, case["truth"], args.noise, 1000 * n + r, empirical, k)
                out["gap"] = out["best_s"] / case["optimum_s"] - 1
                out["profile"] = n
                runs[label(config, k)].append(out)
        print(f"searched profile {n}/{len(cases)}", file=sys.stderr, flush=True)

    summary = {}
    for config, rows in runs.items():
        gaps = [r["gap"] for r in rows]
        lives = [float(r["live"]) for r in rows]
        summary[config] = {
            "runs": len(rows),
            "gap": distribution(gaps),
            "live": distribution(lives),
            "within_2pct": sum(g <= 0.02 for g in gaps) / len(gaps),
            "searcher_s": statistics.median(r["searcher_s"] for r in rows),
        }

    spreads = [c["worst_s"] / c["optimum_s"] - 1 for c in cases]
    print(
        f"{len(cases)} priority-sensitive profiles ({skipped} flat ones skipped), {args.repeats} noise "
        f"seeds each, noise {noise_label}; worst threshold vs optimum: "
        f"median +{statistics.median(spreads):.1%}, max +{max(spreads):.1%}"
    )
    print(
        f"{'strategy':<15} {'gap med':>8} {'gap mean':>8} {'gap p90':>8} {'gap max':>8} {'<=2%':>6} "
        f"{'live med':>8} {'live max':>8} {'searcher ms':>11}"
    )
    for config, s in summary.items():
        print(
            f"{config:<15} {s['gap']['median']:>8.2%} {s['gap']['mean']:>8.2%} {s['gap']['p90']:>8.2%} "
            f"{s['gap']['max']:>8.2%} "
            f"{s['within_2pct']:>6.0%} {s['live']['median']:>8.0f} {s['live']['max']:>8.0f} "
            f"{s['searcher_s'] * 1e3:>11.1f}"
        )
    print(
        "gap: simulated time of the chosen threshold vs the exhaustive optimum; live: iterations used, "
        "warm-up included;\nsearcher ms: median time in the searcher per search, guided with its ranking "
        "(the exact predictor reuses\nthe bench's cache of simulator runs; guided~ pays for its own); "
        f"exhaustive sweeps: {sweep_s:.1f} s for {tries} profiles x {args.grid} thresholds"
    )

    result = {
        "benchmark": "search",
        "settings": {
            "profiles": len(cases),
            "skipped_flat": skipped,
            "repeats": args.repeats,
            "noise": args.noise,
            "noise_from": args.noise_from,
            "empirical_steps": None if empirical is None else len(empirical),
            "search_repeats": search_repeats,
            "grid": args.grid,
            "seed": args.seed,
            "slice_bytes": SLICE_BYTES,
            "min_spread": MIN_SPREAD,
            "mode": "network",
        },
        "summary": summary,
        "profiles": [
            {
                "layers": c["profile"].num_layers,
                "workers": c["workers"],
                "num_ps": c["num_ps"],
                "bandwidth_bps": c["bandwidth_bps"],
                "optimum": list(c["optimum"]),
                "optimum_s": c["optimum_s"],
                "worst_s": c["worst_s"],
            }
            for c in cases
        ],
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
