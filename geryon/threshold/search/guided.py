"""Simulator-guided search: rank a fine grid with a predictor, measure only the most promising few live.

The predictor (the cluster simulator, in practice) is cheap next to a training iteration but not
exact, so it only shortlists; the live measurements decide, except that a candidate must beat the
predictor's favourite by `margin` to replace it: with 5% timing noise and two samples each, smaller
live differences are mostly noise, while a predictor that is really wrong loses by more.

Neighbouring grid points often give the same class assignment (no parameter's urgency lies between
them) and so the same prediction: each run of equal predictions counts once, represented by its
middle point, so the shortlist holds `top` different assignments, not one assignment `top` times.
(Given the urgencies, the candidates are the cuts between them and this never happens.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, ClassVar

from geryon.threshold.search.base import Planner, Searcher, Trial
from geryon.threshold.search.candidates import default_points, sorted_grid
from geryon.threshold.search.options import Option, chunk_sizes, integer, number, optional, slice_sizes
from geryon.threshold.search.space import make_space, sizes_option, urgencies_option


def shortlist(trials: Sequence[Trial], predicted: Sequence[float], top: int) -> list[Trial]:
    """The `top` best distinct predictions, best first, each as the middle of its run of equal values."""
    groups: dict[float, list[int]] = {}
    for i, value in enumerate(predicted):
        groups.setdefault(float(f"{value:.12g}"), []).append(i)
    ranked = sorted(groups.items(), key=lambda kv: (kv[0], kv[1][0]))
    return [trials[members[len(members) // 2]] for _, members in ranked[:top]]


class GuidedPlanner:
    def __init__(self, candidates: list[Trial], predicted: list[float], margin: float) -> None:
        self.candidates = candidates
        self.margin = margin
        self.predicted = {t: p for t, p in zip(candidates, predicted, strict=True)}
        self.queue = list(candidates)
        self.measured: dict[Trial, float] = {}

    def propose(self) -> Trial | None:
        return self.queue.pop(0) if self.queue else None

    def observe(self, trial: Trial, value: float) -> None:
        self.measured[trial] = value

    def recommend(self) -> tuple[Trial, float | None] | None:
        if not self.measured:
            # Nothing measured (tiny budget): trust the predictor's first choice.
            return self.candidates[0], None
        trial = min(self.measured, key=lambda t: (self.measured[t], self.candidates.index(t)))
        favourite = self.candidates[0]
        if favourite in self.measured and self.measured[trial] >= self.measured[favourite] * (
            1 - self.margin
        ):
            # Within the margin the live difference is likely noise: keep the predictor's choice.
            trial = favourite
        return trial, self.measured[trial]

    def state(self) -> dict[str, Any]:
        return {
            "left": len(self.queue),
            "measured": len(self.measured),
            "best_measured": min(self.measured.values()) if self.measured else None,
            "median_error": statistics.median(self.measured[t] / self.predicted[t] - 1 for t in self.measured)
            if self.measured
            else None,
        }


class GuidedSearcher(Searcher):
    strategy = "guided"
    needs_predictor = True
    OPTIONS: ClassVar[dict[str, Option]] = {
        "top": Option(3, integer(1, 1000), "shortlisted candidates measured live"),
        "grid": Option(None, optional(integer(1, 10_000)), "grid points per threshold (default: 39 for one)"),
        "repeats": Option(2, integer(1), "measured iterations per candidate (their median counts)"),
        "margin": Option(
            0.02,
            number(0.0, 1.0),
            "another candidate replaces the predictor's favourite only if measured faster by this fraction",
        ),
        "slice_sizes": Option(
            None, optional(slice_sizes), "slice sizes in bytes to rank jointly; predictor(thresholds, slice)"
        ),
        "chunk_sizes": Option(
            None,
            optional(chunk_sizes),
            "chunk sizes in bytes to rank jointly; predictor(thresholds, chunk_bytes=...)",
        ),
        "candidates": Option(
            None,
            optional(integer(1, 100_000)),
            "at most this many threshold tuples, thinned evenly (default 500; with urgencies, the cuts)",
        ),
        "urgencies": Option(None, optional(urgencies_option), "per-parameter urgencies: rank only real cuts"),
        "sizes": Option(None, optional(sizes_option), "per-parameter bytes (with urgencies)"),
    }

    def _make_planner(self) -> Planner:
        dims = self.num_classes - 1
        grid = candidate_grid(self.options, dims, 39, self.options["candidates"] or 500)
        sizes: Sequence[int | None] = self.options["slice_sizes"] or (None,)
        chunks: Sequence[int | None] = self.options["chunk_sizes"] or (None,)
        trials = [Trial(ts, s, c) for c in chunks for s in sizes for ts in grid]
        predicted = self._predictions(trials)
        by_trial = dict(zip(trials, predicted, strict=True))
        chosen = shortlist(trials, predicted, self.options["top"])
        return GuidedPlanner(chosen, [by_trial[t] for t in chosen], self.options["margin"])


def candidate_grid(options: dict[str, Any], dims: int, one_dim: int, most: int) -> list[tuple[float, ...]]:
    """Threshold tuples to rank: the cuts between urgencies when known, else a grid of `grid` points."""
    space = make_space(options, 1)  # checks urgencies and sizes together
    if not space.continuous:
        if options.get("grid") is not None:
            raise ValueError("grid: not used with urgencies (the candidates are the cuts between urgencies)")
        return space.candidates(dims, most)
    points = options["grid"] or default_points(dims, one_dim, most)
    return sorted_grid(dims, points)
