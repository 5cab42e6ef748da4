"""The joint search's objective: iteration time of a (thresholds, chunk size) pair, by the simulator.

Issue 40 item 3 (ByteScheduler, paper 004 Sec. 4.3, tunes its partition and credit sizes together):
the chunk size inside a class is set at run time like the threshold (the strategy's
`set_chunk_bytes`), so the two are searched together. The objective simulates the "hybrid" mode
(the only one whose `takes_chunk` is set, geryon.threshold.sim_modes.HYBRID: one connection per
class, urgency order inside it, chunked preemption) through the simulator's public `simulate`; other
knobs stay at their defaults unless given. Results are memoized: a searcher that proposes a pair
twice, or a sweep that covers a searcher's trials, simulates it once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from geryon.threshold.profile import Profile
from geryon.threshold.search.base import Trial
from geryon.threshold.search.space import Space

# Chunk sizes the joint search chooses from by default: 16 KiB .. 4 MiB, a factor 4 apart (the
# default 4 MiB slice caps a transfer, so larger chunks never preempt anything; 256 KiB, the
# data plane's default, is the middle one).
CHUNK_CANDIDATES: tuple[int, ...] = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
MODE = "hybrid"


@dataclass
class Objective:
    """Callable (thresholds, chunk_bytes) -> simulated iteration seconds of one cluster setting."""

    profile: Profile
    workers: int
    num_ps: int
    bandwidth_bps: float
    knobs: dict[str, Any] = field(default_factory=dict)
    simulate: Callable[..., Any] | None = None  # default: geryon.threshold.simulator.simulate
    cache: dict[tuple[tuple[float, ...], int], float] = field(default_factory=dict)

    def __call__(self, thresholds: Sequence[float], chunk_bytes: int) -> float:
        key = (tuple(float(t) for t in thresholds), int(chunk_bytes))
        if key not in self.cache:
            sim: Callable[..., Any]
            if self.simulate is None:
                from geryon.threshold.simulator import simulate as sim
            else:
                sim = self.simulate
            result = sim(
                self.profile,
                workers=self.workers,
                num_ps=self.num_ps,
                bandwidth_bps=self.bandwidth_bps,
                mode=MODE,
                thresholds=key[0],
                chunk_bytes=key[1],
                **self.knobs,
            )
            self.cache[key] = float(result.iteration_s)
        return self.cache[key]

    @property
    def evaluations(self) -> int:
        return len(self.cache)


def profile_space(profile: Profile) -> Space:
    """The thresholds worth trying for `profile`: the cuts between its parameters' urgencies."""
    return Space.from_params([p.urgency for p in profile.params], [p.bytes for p in profile.params])


def joint_grid(
    profile: Profile, chunks: Sequence[int] = CHUNK_CANDIDATES, *, dims: int = 1, candidates: int = 12
) -> list[Trial]:
    """The discrete grid the searchers choose from: threshold tuples (the cuts between urgencies,
    thinned evenly in bytes to at most `candidates`, as the searchers' `candidates` option does) times
    the chunk sizes."""
    tuples = profile_space(profile).candidates(dims, candidates)
    return [Trial(ts, None, int(c)) for c in sorted(chunks) for ts in tuples]


def exhaustive(
    objective: Callable[[Sequence[float], int], float], grid: Sequence[Trial]
) -> tuple[Trial, float]:
    """The best grid point and its time (ties: the first in grid order)."""
    best: tuple[Trial, float] | None = None
    for trial in grid:
        assert trial.chunk_bytes is not None
        value = objective(trial.thresholds, trial.chunk_bytes)
        if best is None or value < best[1]:
            best = (trial, value)
    if best is None:
        raise ValueError("grid: no candidates")
    return best


def drive(searcher: Any, measure: Callable[[Sequence[float], int], float], limit: int = 1000) -> int:
    """Runs a chunk-joint searcher against `measure` until it converges; returns the iterations used."""
    for n in range(limit):
        if searcher.converged:
            return n
        trial = searcher.next_trial()
        searcher.report(
            trial.thresholds, measure(trial.thresholds, trial.chunk_bytes), chunk_bytes=trial.chunk_bytes
        )
    return limit
