"""Candidate thresholds: grids of k-1 strictly increasing thresholds inside (0, 1).

Thresholds 0 and 1 are left out: at either end every parameter is in one class, which is plain FIFO
and never better than some split.
"""

from __future__ import annotations

import math
from itertools import combinations

MAX_CANDIDATES = 100_000


def interior(points: int) -> list[float]:
    """`points` evenly spaced values strictly inside (0, 1)."""
    return [i / (points + 1) for i in range(1, points + 1)]


def sorted_grid(dims: int, points: int, option: str = "grid") -> list[tuple[float, ...]]:
    """Every strictly increasing `dims`-tuple from `interior(points)`: the simplex of sorted thresholds."""
    count = math.comb(points, dims)
    if count == 0:
        raise ValueError(f"{option}: {points} grid points cannot hold {dims} strictly increasing thresholds")
    if count > MAX_CANDIDATES:
        raise ValueError(
            f"{option}: {points} points make {count} candidates for {dims} thresholds; "
            f"at most {MAX_CANDIDATES} are allowed"
        )
    return list(combinations(interior(points), dims))


def default_points(dims: int, one_dim: int, most: int) -> int:
    """Grid points per axis: `one_dim` for one threshold, else the most that keep <= `most` candidates."""
    if dims == 1:
        return one_dim
    points = dims
    while math.comb(points + 1, dims) <= most:
        points += 1
    return points
