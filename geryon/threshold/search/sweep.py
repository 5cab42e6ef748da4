"""The paper's search (section III-C): try thresholds in turn, fit time against threshold, take the minimum.

With k > 2 classes the k-1 thresholds are swept one coordinate at a time (each within the gap its
neighbours leave, so they stay strictly increasing), starting from evenly spaced thresholds.

Joint over chunk sizes (`chunk_sizes`), the chunk size is one more coordinate, swept after the
thresholds in each round (starting from the middle size): up to `points` of the sizes, evenly spread
over their list, and the fastest measured one kept (a discrete axis: no fit).
"""

from __future__ import annotations

from typing import Any, ClassVar

from geryon.threshold.search.base import Planner, Searcher, Trial
from geryon.threshold.search.fit import fit_minimum
from geryon.threshold.search.options import Option, choice, chunk_sizes, integer, optional
from geryon.threshold.search.space import Space, make_space, sizes_option, urgencies_option


class SweepPlanner:
    def __init__(
        self,
        space: Space,
        num_classes: int,
        points: int,
        fit: str,
        rounds: int,
        chunks: tuple[int, ...] | None = None,
    ) -> None:
        self.space = space
        self.base = space.initial(num_classes - 1)
        self.chunks = chunks
        self.chunk = None if chunks is None else chunks[(len(chunks) - 1) // 2]
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

    def _on_chunk(self) -> bool:
        return self.coordinate == len(self.base)

    def _fill(self) -> None:
        """Candidates for the current coordinate: evenly spread strictly between its neighbours."""
        if self._on_chunk():
            assert self.chunks is not None
            n = len(self.chunks)
            picks = sorted({round(i * (n - 1) / (self.points - 1)) for i in range(self.points)})
            self.queue = (
                [float(self.chunks[i]) for i in picks] if n > self.points else list(map(float, self.chunks))
            )
        else:
            self.queue = self.space.sweep_values(*self._bounds(), self.points)
        self.xs, self.ys = [], []

    def _fitted(self) -> tuple[float, float]:
        """The fitted best threshold of the current coordinate (fit in the space's coordinate)."""
        if self._on_chunk():
            k = min(range(len(self.ys)), key=lambda i: (self.ys[i], self.xs[i]))
            return self.xs[k], self.ys[k]
        x, y = fit_minimum(self.xs, self.ys, self.fit)
        return self.space.snap(x, *self._bounds()), y

    def _trial(self, x: float) -> Trial:
        if self._on_chunk():
            return Trial(tuple(self.base), None, int(x))
        values = list(self.base)
        values[self.coordinate] = x
        return Trial(tuple(values), None, self.chunk)

    def _base_trial(self) -> Trial:
        return Trial(tuple(self.base), None, self.chunk)

    def propose(self) -> Trial | None:
        while not self.queue and not self.done:
            self._conclude()
        return None if self.done else self._trial(self.queue.pop(0))

    def observe(self, trial: Trial, value: float) -> None:
        if self._on_chunk():
            assert trial.chunk_bytes is not None
            self.xs.append(float(trial.chunk_bytes))
        else:
            self.xs.append(self.space.coord(trial.thresholds[self.coordinate]))
        self.ys.append(value)

    def _conclude(self) -> None:
        """Fixes the current coordinate at the fitted minimum and moves on."""
        if self.xs:
            if self._on_chunk():
                x, self.estimate = self._fitted()
                self.chunk = int(x)
            else:
                self.base[self.coordinate], self.estimate = self._fitted()
        self.coordinate += 1
        if self.coordinate == len(self.base) + (self.chunks is not None):
            self.coordinate = 0
            self.round += 1
            if self.round == self.rounds:
                self.done = True
                return
        self._fill()

    def recommend(self) -> tuple[Trial, float | None] | None:
        if self.done:
            return (self._base_trial(), self.estimate) if self.estimate is not None else None
        if self.xs:  # stopped by the budget mid-coordinate: fit what there is
            x, y = self._fitted()
            return self._trial(x), y
        if self.estimate is None:
            return None
        return self._base_trial(), self.estimate

    def state(self) -> dict[str, Any]:
        return {
            "coordinate": self.coordinate,
            "round": self.round,
            "base": list(self.base),
            "left": len(self.queue),
            **({} if self.chunks is None else {"chunk": self.chunk}),
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
        "chunk_sizes": Option(
            None, optional(chunk_sizes), "chunk sizes in bytes to sweep after the thresholds (a coordinate)"
        ),
        "urgencies": Option(None, optional(urgencies_option), "per-parameter urgencies: try only real cuts"),
        "sizes": Option(None, optional(sizes_option), "per-parameter bytes: spread candidates over bytes"),
    }

    def _make_planner(self) -> Planner:
        o = self.options
        return SweepPlanner(
            make_space(o, 0), self.num_classes, o["points"], o["fit"], o["rounds"], o["chunk_sizes"]
        )
