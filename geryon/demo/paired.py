"""Paired comparisons of demo modes: per-pair throughput ratios, a bootstrap 95% interval, a verdict.

    rows = compare_result(result)     # the demo's result JSON -> one row per pair of modes it ran
    row = compare("geryon", a_times, "endhost", b_times, unit="round")

Pairs are taken where the noise is shared (issue 14 item 4: 2 cores shared with other work, so a
burst of load must fall on both sides of a pair):
- `round`: modes of one paired cluster (geryon, paper, endhost) alternate round by round; round i
  of A is paired with round i of B in the same repeat (they ran seconds apart);
- `run`: any other two modes (separate clusters, which alternate run by run within a repeat);
  repeat r of A is paired with repeat r of B.

The ratio is A's throughput over B's: B's step time over A's for a round pair (same workers), A's
images/s over B's for a run pair. The point estimate is the median of the pair ratios; the interval
is a percentile bootstrap of that median (RESAMPLES resamples, seeded, so a result gives the same
interval every time it is read). The verdict names the faster mode only when the interval excludes
1; otherwise "not significant". A single pair gives no interval ("one pair: no interval").
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

RESAMPLES = 2000
SEED = 14
LEVEL = 0.95
# What the report compares (A, B): the targets (geryon against every baseline and the paper's
# design), then the paper's design against end-host scheduling.
PAIRS = (
    ("geryon", "endhost"),
    ("geryon", "paper"),
    ("geryon", "ps"),
    ("geryon", "vanilla"),
    ("paper", "endhost"),
)


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of stat(values); None for fewer than 2 values."""
    if not 0 < level < 1:
        raise ValueError(f"level: {level!r} is not in (0, 1)")
    if resamples < 1:
        raise ValueError(f"resamples: {resamples!r} must be at least 1")
    data = [float(v) for v in values]
    if len(data) < 2:
        return None
    rng = random.Random(seed)
    stats = sorted(stat(rng.choices(data, k=len(data))) for _ in range(resamples))
    tail = (1 - level) / 2
    lo = stats[math.floor(tail * resamples)]
    hi = stats[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return lo, hi


def verdict(ci: tuple[float, float] | None, a: str, b: str) -> str:
    if ci is None:
        return "one pair: no interval"
    if ci[0] > 1:
        return f"{a} faster"
    if ci[1] < 1:
        return f"{b} faster"
    return "not significant"


def compare(a: str, ratios: Sequence[float], b: str, unit: str) -> dict[str, Any]:
    """A row from pair ratios (A's throughput over B's, one per pair)."""
    values = [float(r) for r in ratios if _positive(r)]
    ci = bootstrap_ci(values)
    return {
        "a": a,
        "b": b,
        "unit": unit,
        "pairs": len(values),
        "ratio": statistics.median(values) if values else None,
        "ci": list(ci) if ci is not None else None,
        "verdict": verdict(ci, a, b) if values else "not measured",
    }


def round_ratios(a_times: Sequence[float], b_times: Sequence[float]) -> list[float]:
    """B's step time over A's, round i against round i (A's throughput over B's)."""
    return [tb / ta for ta, tb in zip(a_times, b_times, strict=False) if _positive(ta) and _positive(tb)]


def compare_result(
    result: Mapping[str, Any], pairs: Sequence[tuple[str, str]] = PAIRS
) -> list[dict[str, Any]]:
    """One row per pair of `pairs` whose both modes completed at least one run of `result`."""
    runs = [r for r in result.get("runs") or [] if isinstance(r, Mapping) and not r.get("error")]
    by: dict[tuple[Any, Any], Mapping[str, Any]] = {(r.get("mode"), r.get("repeat")): r for r in runs}
    rows = []
    for a, b in pairs:
        repeats = sorted({rep for (m, rep) in by if m == a} & {rep for (m, rep) in by if m == b}, key=str)
        if not repeats:
            continue
        ratios: list[float] = []
        unit = "round" if all(_same_cluster(by[(a, rep)], b) for rep in repeats) else "run"
        for rep in repeats:
            ra, rb = by[(a, rep)], by[(b, rep)]
            if unit == "round":
                ratios += round_ratios(ra.get("step_times") or [], rb.get("step_times") or [])
            elif _positive(ra.get("images_per_s")) and _positive(rb.get("images_per_s")):
                ratios.append(float(ra["images_per_s"]) / float(rb["images_per_s"]))
        rows.append({**compare(a, ratios, b, unit), "repeats": len(repeats)})
    return rows


def format_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Text lines: pair, unit, pairs, median ratio, 95% interval, verdict."""
    out = []
    width = max((len(f"{r['a']}/{r['b']}") for r in rows), default=0)
    for r in rows:
        ratio = f"{r['ratio']:.3f}x" if r["ratio"] is not None else "n/a"
        ci = f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ci"] else "-"
        name = f"{r['a']}/{r['b']}".ljust(width)
        out.append(f"  {name}  {ratio}  95% {ci}  {r['pairs']} {r['unit']} pairs  {r['verdict']}")
    return out


def _same_cluster(run: Mapping[str, Any], other: str) -> bool:
    paired = run.get("paired")
    return isinstance(paired, Mapping) and other in (paired.get("rotation") or [])


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
