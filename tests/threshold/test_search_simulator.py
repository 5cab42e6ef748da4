"""The searchers against the real cluster simulator (engineer B's), as `geryon simulate --threshold auto`
and bench/bench_search.py use them: noise-free, each lands on the exhaustive sweep's optimum."""

from __future__ import annotations

import numpy as np
import pytest

from geryon.threshold.profile import Profile, synthetic
from geryon.threshold.search import STRATEGIES, make_searcher
from geryon.threshold.simulator import simulate


def vgg_like() -> Profile:
    # Parameters grow with depth (the last layers are the big fully connected ones), compute shrinks.
    depth = np.linspace(0, 1, 12)
    sizes = [int(2 ** (13 + 6 * d)) * 4 for d in depth]
    forward = [float(2e-3 * (1.5 - d)) for d in depth]
    return synthetic(sizes, forward, [2 * f for f in forward], model="vgg-like")


def test_every_strategy_reaches_the_simulators_optimum() -> None:
    profile = vgg_like()
    workers, num_ps = 4, 2
    bandwidth = 2 * 8 * profile.total_bytes * workers / num_ps / profile.compute_s * 0.8
    cache: dict[tuple[float, ...], float] = {}

    def truth(ts: tuple[float, ...]) -> float:
        if ts not in cache:
            cache[ts] = simulate(
                profile,
                workers=workers,
                num_ps=num_ps,
                bandwidth_bps=bandwidth,
                mode="network",
                thresholds=ts,
            ).iteration_s
        return cache[ts]

    grid = [truth((i / 200,)) for i in range(1, 200)]
    optimum, worst = min(grid), max(grid)
    if worst / optimum < 1.03:
        pytest.fail(
            f"the profile is not priority-sensitive in this simulator (worst/best {worst / optimum:.3f})"
        )
    urgencies = {"urgencies": [p.urgency for p in profile.params], "sizes": [p.bytes for p in profile.params]}
    for strategy in STRATEGIES:
        options: dict[str, object] = dict(urgencies)
        if strategy == "guided":
            options["predictor"] = truth
        searcher = make_searcher(strategy, **options)  # type: ignore[arg-type]
        while not searcher.converged:
            ts = searcher.next_threshold()
            searcher.report(ts, truth(ts))
        assert searcher.live_iterations <= 10
        assert searcher.best is not None
        assert truth(searcher.best) <= optimum * 1.02, strategy
