"""Bayesian optimization (ByteScheduler's tuner, paper 004): a Gaussian process over the candidates and
expected improvement, optionally joint over thresholds and slice size.

The candidates are a grid of sorted thresholds (times the slice sizes, on a log scale, when given);
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
from geryon.threshold.search.options import Option, integer, number, optional, slice_sizes
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


class BayesPlanner:
    def __init__(
        self, trials: list[Trial], x: np.ndarray, dims: int, init: int, stop: float, xi: float
    ) -> None:
        self.trials = trials
        self.index = {t: i for i, t in enumerate(trials)}
        self.x = x
        self.initial = spread(x, dims, init)
        self.stop = stop
        self.xi = xi
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
        j = int(np.argmax(ei))
        self.last_ei = float(ei[j])
        if ei[j] < self.stop * incumbent or j in self.seen:
            return None
        return self.trials[j]

    def observe(self, trial: Trial, value: float) -> None:
        self.seen.append(self.index[trial])
        self.ys.append(value)

    def recommend(self) -> tuple[Trial, float | None] | None:
        if not self.seen:
            return None
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
        "urgencies": Option(None, optional(urgencies_option), "per-parameter urgencies: try only real cuts"),
        "sizes": Option(None, optional(sizes_option), "per-parameter bytes: the model sees bytes per class"),
    }

    def _make_planner(self) -> Planner:
        dims = self.num_classes - 1
        grid = candidate_grid(self.options, dims, 99, 2000)
        space = make_space(self.options, 1)
        sizes: Sequence[int | None] = self.options["slice_sizes"] or (None,)
        trials = [Trial(ts, s) for s in sizes for ts in grid]
        rows = [space.coords(t.thresholds) for t in trials]
        if self.options["slice_sizes"] is not None:
            low, high = math.log(sizes[0] or 1), math.log(sizes[-1] or 1)
            span = (high - low) or 1.0
            rows = [
                [*r, (math.log(t.slice_bytes or 1) - low) / span] for r, t in zip(rows, trials, strict=True)
            ]
        x = np.asarray(rows, dtype=float)
        o = self.options
        return BayesPlanner(trials, x, dims, o["init"], o["stop"], o["xi"])
