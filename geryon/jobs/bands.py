"""Sharing the fabric's k queues out among jobs: each job's band, a map of its classes to fabric classes.

Pure and deterministic. Fabric class 0 is the highest priority, as a job's class 0 is its most urgent
(geryon.tagger.map_table).

The policy. Crux (SIGCOMM 2024) gives jobs network priorities by GPU intensity (compute per iteration
over iteration time: the more a job's GPUs compute per second of iteration, the more GPU time a stalled
transfer wastes) and compresses those priorities into the few queues a switch has. What follows is
Geryon's own rule in that spirit, not Crux's algorithm:

1. Rank: jobs by GPU intensity, highest first; equal intensities (to 1e-9) by job id.
2. Slots: every (job, class) pair, ordered urgency level first, then rank: every job's class 0 (most
   intense job first), then every job's class 1, ... So with 2 jobs of 2 classes and 4 queues: the
   most intense job's urgent tensors on 0, the other's urgent on 1, then the two bulks on 2 and 3.
   Urgency inside a job keeps Geryon's order; across jobs, urgent beats bulk, then intensity decides.
3. Compression: S slots onto k queues. S <= k: slot i on queue i (a single job keeps today's classes,
   class c on queue c). S > k: slot i on queue floor(i * k / S), k contiguous groups whose sizes differ
   by at most one. The order is kept: no slot sits above one before it, so a job's band never inverts
   its classes (two of them may share a queue), and a more intense job is never below a less intense
   one at the same urgency level.
4. Hysteresis (`margin`, the controller's --hysteresis, default HYSTERESIS): given the ranks of the
   previous generation, a job passes one ranked above it only when its intensity is more than
   `margin` (relative) above the other's. Jobs of nearly equal intensity then keep their order while
   their measurements wander, instead of swapping bands (and every task's marks) back and forth. A
   job new to the cluster goes above the first job less intense than it (its intensity alone decides
   where). margin 0: no hysteresis (the ranking of rule 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from geryon.tagger.map_table import MAX_CLASSES

TIE = 1e-9  # intensities closer than this rank as equal (then by job id)
# The controller's default margin: a job passes another only with a 5% higher intensity. A chief's
# intensity over a window of steps moves by a few percent on a shared machine (the demo's step times
# spread 3-9% over repeats, bench/README.md), so less would still flap.
HYSTERESIS = 0.05


@dataclass(frozen=True)
class Demand:
    """What bands need of a job: its id, its number of classes, its GPU intensity in (0, 1]."""

    job: str
    classes: int
    intensity: float


@dataclass(frozen=True)
class Band:
    job: str
    rank: int  # 0: the most intense job
    classes: tuple[int, ...]  # job class c -> fabric class classes[c]

    def mapping(self) -> dict[int, int]:
        return dict(enumerate(self.classes))


def rank(
    demands: Sequence[Demand], previous: Mapping[str, int] | None = None, margin: float = 0.0
) -> list[Demand]:
    """Most intense first; ties (within TIE) by job id; with `previous` ranks and a `margin`, rule 4's
    hysteresis (module docstring)."""
    ordered = _by_intensity(demands)
    if not previous or margin <= 0:
        return ordered
    # The jobs ranked before, by insertion from the intensity order (deterministic whatever the input
    # order): a job moves up past each one it was ranked above and whose intensity leads its own by at
    # most the margin. Then each new job, most intense first, above the first job less intense than it.
    out: list[Demand] = []
    for d in ordered:
        if d.job in previous:
            i = len(out)
            while i > 0 and _stays_above(d, out[i - 1], previous, margin):
                i -= 1
            out.insert(i, d)
    for d in ordered:
        if d.job not in previous:
            i = next((k for k, o in enumerate(out) if _by_intensity([o, d])[0] is d), len(out))
            out.insert(i, d)
    return out


def _stays_above(d: Demand, other: Demand, previous: Mapping[str, int], margin: float) -> bool:
    if previous[d.job] >= previous[other.job]:
        return False
    return other.intensity <= d.intensity * (1 + margin)


def _by_intensity(demands: Sequence[Demand]) -> list[Demand]:
    ordered = sorted(demands, key=lambda d: (-d.intensity, d.job))
    # Sorting by a rounded key would make TIE a grid; instead fix ties pairwise after the sort.
    out: list[Demand] = []
    for d in ordered:
        i = len(out)
        while i > 0 and abs(out[i - 1].intensity - d.intensity) <= TIE and out[i - 1].job > d.job:
            i -= 1
        out.insert(i, d)
    return out


def compute_bands(
    demands: Sequence[Demand],
    queues: int,
    previous: Mapping[str, int] | None = None,
    margin: float = 0.0,
) -> dict[str, Band]:
    """Every job's band on a fabric of `queues` classes (1..8); `previous` (job -> its rank in the last
    generation) and `margin` as in rule 4. Raises ValueError naming what is wrong."""
    if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= MAX_CLASSES:
        raise ValueError(f"queues: {queues!r}; the fabric's classes are 1 to {MAX_CLASSES}")
    check_margin(margin)
    seen = set()
    for d in demands:
        if d.job in seen:
            raise ValueError(f"job {d.job!r}: listed twice")
        seen.add(d.job)
        if not 1 <= d.classes <= MAX_CLASSES:
            raise ValueError(f"job {d.job!r}: classes {d.classes}; 1 to {MAX_CLASSES}")
        if not math.isfinite(d.intensity) or not 0 < d.intensity <= 1:
            raise ValueError(f"job {d.job!r}: intensity {d.intensity!r}; must be in (0, 1]")
    ranked = rank(demands, previous, margin)
    slots = sorted(
        ((c, r) for r, d in enumerate(ranked) for c in range(d.classes)),
    )
    total = len(slots)
    queue_of = {slot: (i if total <= queues else i * queues // total) for i, slot in enumerate(slots)}
    return {
        d.job: Band(job=d.job, rank=r, classes=tuple(queue_of[(c, r)] for c in range(d.classes)))
        for r, d in enumerate(ranked)
    }


def check_margin(margin: float, what: str = "margin") -> float:
    """A hysteresis margin: a finite fraction in [0, 1)."""
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < 1:
        raise ValueError(f"{what}: expected a fraction in [0, 1) (0.05: 5% above), got {margin!r}")
    return float(margin)


def describe(bands: Mapping[str, Band]) -> list[str]:
    """One line a job, by rank: 'rank 0 jobA: class 0 -> 0, class 1 -> 2'."""
    return [
        f"rank {b.rank} {b.job}: " + ", ".join(f"class {c} -> {q}" for c, q in enumerate(b.classes))
        for b in sorted(bands.values(), key=lambda b: b.rank)
    ]
