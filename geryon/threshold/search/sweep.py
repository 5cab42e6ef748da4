"""The paper's search (section III-C): try thresholds in turn, fit time against threshold, take the minimum.

With k > 2 classes the k-1 thresholds are swept one coordinate at a time (each within the gap its
neighbours leave, so they stay strictly increasing), starting from evenly spaced thresholds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from geryon.tagger.map_table import default_thresholds
from geryon.threshold.search.base import Planner, Searcher, Trial
from geryon.threshold.search.candidates import interior
from geryon.threshold.search.fit import fit_minimum
from geryon.threshold.search.options import Option, choice, integer


class SweepPlanner:
    def __init__(self, num_classes: int, points: int, fit: str, rounds: int) -> None:
        self.base = list(default_thresholds(num_classes))
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

    def _fill(self) -> None:
        """Candidates for the current coordinate: evenly spaced strictly between its neighbours."""
        i = self.coordinate
        low = self.base[i - 1] if i > 0 else 0.0
        high = self.base[i + 1] if i + 1 < len(self.base) else 1.0
        self.queue = [low + (high - low) * u for u in interior(self.points)]
        self.xs, self.ys = [], []

    def _trial(self, x: float) -> Trial:
        values = list(self.base)
        values[self.coordinate] = x
        return Trial(tuple(values))

    def propose(self) -> Trial | None:
        while not self.queue and not self.done:
            self._conclude()
        return None if self.done else self._trial(self.queue.pop(0))

    def observe(self, trial: Trial, value: float) -> None:
        self.xs.append(trial.thresholds[self.coordinate])
        self.ys.append(value)

    def _conclude(self) -> None:
        """Fixes the current coordinate at the fitted minimum and moves on."""
        if self.xs:
            self.base[self.coordinate], self.estimate = fit_minimum(self.xs, self.ys, self.fit)
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
            x, y = fit_minimum(self.xs, self.ys, self.fit)
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
        "fit": Option("quadratic", choice("quadratic", "min"), "quadratic fit, or the measured minimum"),
        "rounds": Option(1, integer(1, 100), "passes over the thresholds (k > 2 classes)"),
    }

    def _make_planner(self) -> Planner:
        o = self.options
        return SweepPlanner(self.num_classes, o["points"], o["fit"], o["rounds"])
