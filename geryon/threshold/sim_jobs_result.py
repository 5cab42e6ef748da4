"""What a run of several jobs on one fabric predicts (`geryon.threshold.sim_jobs`): each job's share
(`JobOutcome`), the run (`JobsResult`) and the metric Crux uses (`weighted_utilization`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobOutcome:
    """One job's share of a run."""

    name: str
    workers: int
    compute_s: float  # one iteration's GPU time (forward + backward)
    step_s: float  # steady-state iteration time, sharing the fabric
    alone_s: float  # the same, alone on its placement under the same policy
    slowdown: float  # step_s / alone_s
    utilization: float  # compute_s / step_s
    intensity: float  # compute_s / alone_s: what the bands rank by
    rank: int | None  # bands' rank (0: the most intense), None where the policy ranks no job
    fabric_classes: tuple[int, ...]  # job class c -> fabric class; () where ports have no classes (fifo)
    iterations: int  # iterations its step time is measured over (ends in the window)


@dataclass(frozen=True)
class JobsResult:
    policy: str
    queues: int
    bandwidth_bps: float
    iterations: int
    jobs: tuple[JobOutcome, ...]
    weighted_utilization: float  # sum of workers x compute / step over the sum of workers
    window_start_s: float  # the measured window: from the end of the last job's first iteration...
    window_s: float  # ... to when every job had finished `iterations` iterations in it
    events: int
    wall_s: float

    def job(self, name: str) -> JobOutcome:
        for j in self.jobs:
            if j.name == name:
                return j
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "queues": self.queues,
            "bandwidth_bps": self.bandwidth_bps,
            "iterations": self.iterations,
            "weighted_utilization": self.weighted_utilization,
            "window_start_s": self.window_start_s,
            "window_s": self.window_s,
            "events": self.events,
            "wall_s": self.wall_s,
            "jobs": [
                {
                    "name": j.name,
                    "workers": j.workers,
                    "compute_s": j.compute_s,
                    "step_s": j.step_s,
                    "alone_s": j.alone_s,
                    "slowdown": j.slowdown,
                    "utilization": j.utilization,
                    "intensity": j.intensity,
                    "rank": j.rank,
                    "fabric_classes": list(j.fabric_classes),
                    "iterations": j.iterations,
                }
                for j in self.jobs
            ],
        }


def weighted_utilization(
    workers: Sequence[int], compute_s: Sequence[float], step_s: Sequence[float]
) -> float:
    """Crux's metric: each job's GPU utilisation (compute / step, at most 1) weighted by its GPUs."""
    total = sum(workers)
    return sum(w * min(1.0, c / s) for w, c, s in zip(workers, compute_s, step_s, strict=True)) / total
