"""The paper's search (section III-C): try thresholds in turn, fit time against threshold, take the minimum.

With k > 2 classes the k-1 thresholds are swept one coordinate at a time (each within the gap its
neighbours leave, so they stay strictly increasing), starting from evenly spaced thresholds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from geryon.threshold.search.base import Planner, Searcher, Trial
from geryon.threshold.search.fit import fit_minimum
from geryon.threshold.search.options import Option, choice, integer, optional
from geryon.threshold.search.space import Space, make_space, sizes_option, urgencies_option


class SweepPlanner:
    def __init__(self, space: Space, num_classes: int, points: int, fit: str, rounds: int) -> None:
        self.space = space
        self.base = space.initial(num_classes - 1)
        self.points = points
        self.fit = fit
        self.rounds = rounds
        self.coordinate = 0
        self.round = 0
        self.queue: list[float] = []
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.estimate: float | None = None
        self.done = False
        self._fill()

    def _bounds(self) -> tuple[float, float]:
        i = self.coordinate
        low = self.base[i - 1] if i > 0 else 0.0
        high = self.base[i + 1] if i + 1 < len(self.base) else 1.0
        return low, high

    def _fill(self) -> None:
        """Candidates for the current coordinate: evenly spread strictly between its neighbours."""
        self.queue = self.space.sweep_values(*self._bounds(), self.points)
        self.xs, self.ys = [], []

    def _fitted(self) -> tuple[float, float]:
        """The fitted best threshold of the current coordinate (fit in the space's coordinate)."""
        x, y = fit_minimum(self.xs, self.ys, self.fit)
        return self.space.snap(x, *self._bounds()), y

    def _trial(self, x: float) -> Trial:
        values = list(self.base)
        values[self.coordinate] = x
        return Trial(tuple(values))

    def propose(self) -> Trial | None:
        while not self.queue and not self.done:
            self._conclude()
        return None if self.done else self._trial(self.queue.pop(0))

    def observe(self, trial: Trial, value: float) -> None:
        self.xs.append(self.space.coord(trial.thresholds[self.coordinate]))
        self.ys.append(value)

    def _conclude(self) -> None:
        """Fixes the current coordinate at the fitted minimum and moves on."""
        if self.xs:
            self.base[self.coordinate], self.estimate = self._fitted()
        self.coordinate += 1
        if self.coordinate == len(self.base):
            self.coordinate = 0
            self.round += 1
            if self.round == self.rounds:
                self.done = True
                return
        self._fill()

    def recommend(self) -> tuple[Trial, float | None] | None:
        if self.done:
            return (Trial(tuple(self.base)), self.estimate) if self.estimate is not None else None
        if self.xs:  # stopped by the budget mid-coordinate: fit what there is
            x, y = self._fitted()
            return self._trial(x), y
        if self.estimate is None:
            return None
        return Trial(tuple(self.base)), self.estimate

    def state(self) -> dict[str, Any]:
        return {
            "coordinate": self.coordinate,
            "round": self.round,
            "base": list(self.base),
            "left": len(self.queue),
        }


class SweepSearcher(Searcher):
    strategy = "sweep"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "points": Option(5, integer(3, 1000), "candidates per threshold (evenly spaced)"),
        "fit": Option(
            "local",
            choice("local", "quadratic", "min"),
            "parabola through the lowest point and its neighbours, through all points, or no fit",
        ),
        "rounds": Option(1, integer(1, 100), "passes over the thresholds (k > 2 classes)"),
        "urgencies": Option(None, optional(urgencies_option), "per-parameter urgencies: try only real cuts"),
        "sizes": Option(None, optional(sizes_option), "per-parameter bytes: spread candidates over bytes"),
    }

    def _make_planner(self) -> Planner:
        o = self.options
        return SweepPlanner(make_space(o, 0), self.num_classes, o["points"], o["fit"], o["rounds"])
