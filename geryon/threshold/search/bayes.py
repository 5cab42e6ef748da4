"""Bayesian optimization (ByteScheduler's tuner, paper 004): a Gaussian process over the candidates and
expected improvement, optionally joint over thresholds, slice size and chunk size.

The candidates are a grid of sorted thresholds (times the slice sizes and the chunk sizes, each on a
log scale, when given);
EI is maximized over that finite set, so the search is deterministic and resumable by replay. The
first `init` points are spread out greedily (each as far as possible from the points already chosen
and from the edges of the threshold range, where everything is in one class). The search stops
when the best expected improvement falls below `stop` of the best estimated time, or when EI's
choice is a point already measured (the model expects nothing better elsewhere), or at the budget.
The recommendation is the measured point with the lowest posterior mean, which averages noise
instead of trusting the single luckiest measurement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from geryon.threshold.search.base import Planner, Searcher, Trial
from geryon.threshold.search.gp import GaussianProcess, expected_improvement
from geryon.threshold.search.guided import candidate_grid
from geryon.threshold.search.options import (
    Option,
    choice,
    chunk_sizes,
    integer,
    number,
    optional,
    slice_sizes,
)
from geryon.threshold.search.space import make_space, sizes_option, urgencies_option


def spread(x: np.ndarray, dims: int, count: int) -> list[int]:
    """Greedy maximin: indices of `count` rows of `x` far from each other and from the threshold edges.

    The first `dims` columns are sorted thresholds in (0, 1); their edge distance is the smallest gap
    to 0, to 1 or to a neighbour. Further columns (the slice size) have no edge to avoid.
    """
    t = x[:, :dims]
    gaps = np.concatenate([t[:, :1], np.diff(t, axis=1), 1.0 - t[:, -1:]], axis=1)
    nearest = gaps.min(axis=1)
    chosen: list[int] = []
    for _ in range(min(count, len(x))):
        i = int(np.argmax(np.where(np.isin(np.arange(len(x)), chosen), -np.inf, nearest)))
        chosen.append(i)
        nearest = np.minimum(nearest, np.sqrt(((x - x[i]) ** 2).sum(axis=1)))
    return chosen


def random_design(count: int, size: int, seed: int) -> list[int]:
    """ByteScheduler's initial design: `count` points drawn uniformly at random (here: from the grid)."""
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.permutation(size)[: min(count, size)]]


class BayesPlanner:
    def __init__(
        self,
        trials: list[Trial],
        x: np.ndarray,
        dims: int,
        init: int,
        stop: float,
        xi: float,
        *,
        design: str = "spread",
        seed: int = 0,
        until: str = "converged",
        pick: str = "mean",
    ) -> None:
        self.trials = trials
        self.index = {t: i for i, t in enumerate(trials)}
        self.x = x
        self.initial = spread(x, dims, init) if design == "spread" else random_design(init, len(x), seed)
        self.stop = stop
        self.xi = xi
        self.until = until
        self.pick = pick
        self.seen: list[int] = []
        self.ys: list[float] = []
        self.last_ei: float | None = None

    def _model(self) -> GaussianProcess:
        return GaussianProcess.fit(self.x[self.seen], np.asarray(self.ys))

    def propose(self) -> Trial | None:
        for i in self.initial:
            if i not in self.seen:
                return self.trials[i]
        gp = self._model()
        mean, std = gp.predict(self.x)
        incumbent = float(mean[self.seen].min())
        ei = expected_improvement(mean, std, incumbent, self.xi * incumbent)
        if self.until == "budget":
            # Run to the budget (ByteScheduler's tuner): the best EI among points not measured yet.
            ei = np.where(np.isin(np.arange(len(ei)), self.seen), -np.inf, ei)
            if not np.isfinite(ei).any():
                return None
        j = int(np.argmax(ei))
        self.last_ei = float(ei[j])
        if self.until == "budget":
            return self.trials[j]
        if ei[j] < self.stop * incumbent or j in self.seen:
            return None
        return self.trials[j]

    def observe(self, trial: Trial, value: float) -> None:
        self.seen.append(self.index[trial])
        self.ys.append(value)

    def recommend(self) -> tuple[Trial, float | None] | None:
        if not self.seen:
            return None
        if self.pick == "measured":  # the fastest measurement (bayes_opt's `max`, as ByteScheduler takes)
            k = int(np.argmin(self.ys))
            return self.trials[self.seen[k]], float(self.ys[k])
        gp = self._model()
        mean, _ = gp.predict(self.x[self.seen])
        k = int(np.argmin(mean))
        return self.trials[self.seen[k]], float(mean[k])

    def state(self) -> dict[str, Any]:
        return {"measured": len(self.seen), "last_ei": self.last_ei}


class BayesSearcher(Searcher):
    strategy = "bayes"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "init": Option(3, integer(2, 100), "spread-out points measured before the model steers"),
        "grid": Option(None, optional(integer(1, 10_000)), "grid points per threshold (default: 99 for one)"),
        "stop": Option(0.002, number(0.0, 1.0), "stop when expected improvement < this fraction of the best"),
        "xi": Option(0.0, number(0.0, 1.0), "exploration margin of EI, as a fraction of the best time"),
        "slice_sizes": Option(None, optional(slice_sizes), "slice sizes in bytes to search jointly"),
        "chunk_sizes": Option(
            None, optional(chunk_sizes), "chunk sizes in bytes (hybrid's preemption unit) to search jointly"
        ),
        "candidates": Option(
            None,
            optional(integer(1, 100_000)),
            "at most this many threshold tuples, thinned evenly (default 2000; with urgencies, the cuts)",
        ),
        "design": Option("spread", choice("spread", "random"), "initial points: maximin spread or random"),
        "seed": Option(0, integer(0), "seed of the random initial design"),
        "until": Option(
            "converged",
            choice("converged", "budget"),
            "stop when EI says so, or measure new points until the budget (ByteScheduler's tuner)",
        ),
        "pick": Option(
            "mean",
            choice("mean", "measured"),
            "recommend the lowest posterior mean among the measured points, or the fastest measurement",
        ),
        "urgencies": Option(None, optional(urgencies_option), "per-parameter urgencies: try only real cuts"),
        "sizes": Option(None, optional(sizes_option), "per-parameter bytes: the model sees bytes per class"),
    }

    def _make_planner(self) -> Planner:
        dims = self.num_classes - 1
        o = self.options
        grid = candidate_grid(o, dims, 99, o["candidates"] or 2000)
        space = make_space(o, 1)
        sizes: Sequence[int | None] = o["slice_sizes"] or (None,)
        chunks: Sequence[int | None] = o["chunk_sizes"] or (None,)
        trials = [Trial(ts, s, c) for c in chunks for s in sizes for ts in grid]
        rows = [space.coords(t.thresholds) for t in trials]
        if o["slice_sizes"] is not None:
            rows = [[*r, v] for r, v in zip(rows, log_axis([t.slice_bytes for t in trials]), strict=True)]
        if o["chunk_sizes"] is not None:
            rows = [[*r, v] for r, v in zip(rows, log_axis([t.chunk_bytes for t in trials]), strict=True)]
        x = np.asarray(rows, dtype=float)
        return BayesPlanner(
            trials,
            x,
            dims,
            o["init"],
            o["stop"],
            o["xi"],
            design=o["design"],
            seed=o["seed"],
            until=o["until"],
            pick=o["pick"],
        )


def log_axis(values: Sequence[int | None]) -> list[float]:
    """Sizes on a log scale, 0 at the smallest and 1 at the largest (all 0 when there is one size)."""
    logs = [math.log(v or 1) for v in values]
    low, high = min(logs), max(logs)
    span = (high - low) or 1.0
    return [(v - low) / span for v in logs]


class ByteSchedulerSearcher(BayesSearcher):
    """ByteScheduler's auto-tuner (paper 004 Sec. 4.3 and its bytescheduler/common/search.py) as a setting
    of the Bayesian search: a Gaussian process (Matern 5/2, bayes_opt's default kernel) with expected
    improvement and exploration `xi` 0.1 ("we use the default value 0.1", Sec. 4.3; read here as 10% of
    the best time, ours being relative), 10 initial points drawn at random, then EI's choice among the
    points not yet measured until 15 trials (its `max_num_steps`; "BO typically runs within 10 trials",
    Sec. 6.3), and the fastest measurement as the answer (bayes_opt's `max`). Its first measurement is
    dropped as inaccurate, which the warm-up iteration does here: the default budget of 30 is 15 trials
    of one warm-up and one measured iteration each.
    """

    strategy = "bytescheduler"
    OPTIONS: ClassVar[dict[str, Option]] = {
        **BayesSearcher.OPTIONS,
        "budget": Option(30, integer(1), "live iterations one search may use, warm-up included"),
        "init": Option(10, integer(2, 100), "random points measured before the model steers"),
        "xi": Option(0.1, number(0.0, 1.0), "exploration margin of EI, as a fraction of the best time"),
        "stop": Option(0.0, number(0.0, 1.0), "unused with until=budget"),
        "design": Option("random", choice("spread", "random"), "initial points: random (ByteScheduler's)"),
        "until": Option("budget", choice("converged", "budget"), "measure new points until the budget"),
        "pick": Option("measured", choice("mean", "measured"), "recommend the fastest measurement"),
    }
