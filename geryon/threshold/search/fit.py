"""Fitting iteration time against one threshold, for the paper's sweep (section III-C).

The paper fits measured iteration time against the threshold and takes the fitted minimum. We fit a
least-squares quadratic: the curve is U-shaped (too low a threshold puts almost everything in the
urgent class, which then behaves like FIFO; too high leaves urgent parameters queued behind bulk
ones), a parabola is the simplest convex model of that, and least squares averages the noise of all
points, so one measurement per candidate is enough. A piecewise fit would need more points than a
budget of about ten iterations allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def fit_minimum(xs: Sequence[float], ys: Sequence[float], method: str = "quadratic") -> tuple[float, float]:
    """(x, predicted y) at the minimum; x stays within the measured range.

    "quadratic": vertex of the least-squares parabola when it opens upwards; otherwise (a line or a
    concave fit: the minimum lies at an end) the measured x where the fit is lowest.
    "min": the measured x with the lowest y (no fit). Fewer than three distinct xs fall back to "min".
    """
    if not xs or len(xs) != len(ys):
        raise ValueError("fit_minimum: need as many ys as xs, at least one")
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if method == "min" or len(np.unique(x)) < 3:
        i = int(np.argmin(y))
        return float(x[i]), float(y[i])
    if method != "quadratic":
        raise ValueError(f"fit: expected one of quadratic, min, got {method!r}")
    # Centre and scale x so the fit is well conditioned whatever the range.
    mid, half = (x.max() + x.min()) / 2, (x.max() - x.min()) / 2
    u = (x - mid) / half
    a, b, c = np.polyfit(u, y, 2)
    if a > 0:
        best_u = float(np.clip(-b / (2 * a), -1.0, 1.0))
        return float(mid + best_u * half), float(np.polyval([a, b, c], best_u))
    fitted = np.polyval([a, b, c], u)
    i = int(np.argmin(fitted))
    return float(x[i]), float(fitted[i])
