"""Where thresholds may go, and the coordinate the fits and the Gaussian process see for each one.

Without knowledge of the model, a threshold is any number in (0, 1) and its own coordinate. Given
the parameters' urgencies (and sizes) from the tagger, only the cuts between distinct urgencies
change anything, so the candidates are those cuts, and a threshold's coordinate is the share of
bytes it sends to the lower class(es). That axis spreads out what matters: in CNNs the few least
urgent layers (the fully connected ones) hold most of the bytes, so the thresholds worth trying
crowd into a narrow band of urgency but spread evenly over bytes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import combinations, pairwise
from typing import Any

import numpy as np

from geryon.threshold.search.candidates import MAX_CANDIDATES, interior


class Space:
    def __init__(
        self, cuts: Sequence[float], weights: tuple[Sequence[float], Sequence[float]] | None
    ) -> None:
        self.cuts = list(cuts)
        self.continuous = weights is None
        if weights is not None:
            urgencies, sizes = weights
            order = np.argsort(urgencies, kind="stable")
            self._u = [float(urgencies[i]) for i in order]
            cumulative = np.cumsum([float(sizes[i]) for i in order])
            self._cum = [float(c / cumulative[-1]) for c in cumulative]

    @classmethod
    def uniform(cls, points: int) -> Space:
        return cls(interior(points), None)

    @classmethod
    def from_params(cls, urgencies: Sequence[float], sizes: Sequence[float] | None) -> Space:
        distinct = sorted(set(urgencies))
        cuts = [(a + b) / 2 for a, b in pairwise(distinct)]
        weights = sizes if sizes is not None else [1.0] * len(urgencies)
        return cls(cuts, (urgencies, weights))

    def coord(self, t: float) -> float:
        """Uniform: t. From parameters: the share of bytes with urgency <= t (the lower class's share)."""
        if self.continuous:
            return t
        i = bisect.bisect_right(self._u, t)
        return self._cum[i - 1] if i else 0.0

    def coords(self, thresholds: Sequence[float]) -> list[float]:
        return [self.coord(t) for t in thresholds]

    def _between(self, low: float, high: float) -> list[float]:
        return [c for c in self.cuts if low < c < high]

    def sweep_values(self, low: float, high: float, points: int) -> list[float]:
        """About `points` thresholds strictly between `low` and `high`, evenly spread in coordinate."""
        if self.continuous:
            return [low + (high - low) * u for u in interior(points)]
        eligible = self._between(low, high)
        if len(eligible) <= points:
            return eligible
        lo, hi = self.coord(low) if low > 0 else 0.0, self.coord(high) if high < 1 else 1.0
        out: list[float] = []
        for u in interior(points):
            cut = self._nearest(eligible, lo + (hi - lo) * u)
            if cut is not None and cut not in out:
                out.append(cut)
        while len(out) < points:  # targets that met the same cut: add the cut farthest from the chosen
            rest = [c for c in eligible if c not in out]
            out.append(max(rest, key=lambda c: (min(abs(self.coord(c) - self.coord(o)) for o in out), -c)))
        return sorted(out)

    def snap(self, x: float, low: float, high: float) -> float:
        """The threshold strictly between `low` and `high` whose coordinate is nearest `x`."""
        if self.continuous:
            return x
        cut = self._nearest(self._between(low, high), x)
        assert cut is not None
        return cut

    def _nearest(self, cuts: Sequence[float], x: float) -> float | None:
        if not cuts:
            return None
        return min(cuts, key=lambda c: (abs(self.coord(c) - x), c))

    def initial(self, dims: int) -> list[float]:
        """Starting thresholds for a coordinate-wise sweep: spread evenly over the coordinate."""
        if self.continuous:
            return [i / (dims + 1) for i in range(1, dims + 1)]
        if len(self.cuts) < dims:
            raise ValueError(
                f"urgencies: {len(self.cuts) + 1} distinct urgencies allow at most {len(self.cuts) + 1} "
                f"classes, not {dims + 1}"
            )
        chosen: list[int] = []
        for i in range(1, dims + 1):
            first = chosen[-1] + 1 if chosen else 0
            last = len(self.cuts) - (dims - i) - 1
            window = range(first, last + 1)
            chosen.append(min(window, key=lambda j: (abs(self.coord(self.cuts[j]) - i / (dims + 1)), j)))
        return [self.cuts[j] for j in chosen]

    def candidates(self, dims: int, most: int) -> list[tuple[float, ...]]:
        """Sorted `dims`-tuples of thresholds; cuts are thinned (evenly in coordinate) to <= `most`."""
        cuts = self.cuts
        if math.comb(len(cuts), dims) > most:
            keep = dims
            while math.comb(keep + 1, dims) <= most:
                keep += 1
            cuts = sorted({self._nearest(cuts, u) for u in interior(keep)} - {None})  # type: ignore[arg-type]
        if math.comb(len(cuts), dims) == 0:
            raise ValueError(
                f"urgencies: {len(cuts) + 1} distinct urgencies allow at most {len(cuts) + 1} "
                f"classes, not {dims + 1}"
            )
        if math.comb(len(cuts), dims) > MAX_CANDIDATES:
            raise ValueError(f"grid: {math.comb(len(cuts), dims)} candidates; at most {MAX_CANDIDATES}")
        return list(combinations(cuts, dims))


def urgencies_option(name: str, value: Any) -> tuple[float, ...]:
    """Check for the `urgencies` option: the tagger's per-parameter urgencies, numbers in [0, 1]."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a list of per-parameter urgencies in [0, 1], got {value!r}")
    values = tuple(value)
    for i, u in enumerate(values):
        if isinstance(u, bool) or not isinstance(u, int | float) or not math.isfinite(u) or not 0 <= u <= 1:
            raise ValueError(f"{name}[{i}]: expected an urgency in [0, 1], got {u!r}")
    if len(set(values)) < 2:
        raise ValueError(f"{name}: need at least 2 distinct urgencies to split parameters into classes")
    return tuple(float(u) for u in values)


def sizes_option(name: str, value: Any) -> tuple[int, ...]:
    """Check for the `sizes` option: bytes per parameter, in the order of `urgencies`."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a list of per-parameter sizes in bytes, got {value!r}")
    values = tuple(value)
    for i, s in enumerate(values):
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"{name}[{i}]: expected a size in bytes (integer >= 0), got {s!r}")
    if not sum(values):
        raise ValueError(f"{name}: the sizes add up to 0 bytes")
    return values


def make_space(options: dict[str, Any], grid_points: int) -> Space:
    """The space the options describe: cuts between urgencies when given, else a uniform grid."""
    urgencies, sizes = options.get("urgencies"), options.get("sizes")
    if sizes is not None and urgencies is None:
        raise ValueError("sizes: give urgencies too (sizes weigh the parameters that urgencies place)")
    if urgencies is None:
        return Space.uniform(grid_points)
    if sizes is not None and len(sizes) != len(urgencies):
        raise ValueError(f"sizes: expected {len(urgencies)} sizes, one per urgency, got {len(sizes)}")
    return Space.from_params(urgencies, sizes)
