"""A chief's measurement of its job's GPU intensity while it trains, kept registered (issue 39 item 1).

    meter = IntensityMeter(registration, compute_s=profile.compute_s, bytes_per_iteration=2 * model_bytes)
    for step in range(steps):
        started = time.perf_counter()
        train_one_step()
        meter.step(time.perf_counter() - started)   # re-registers when the intensity moved

What each term rests on:
- `iteration_s`: the median of the last `window` step times the loop reports: the chief sees every
  iteration's wall time (a round of its workers), and a median over a window is robust to the odd slow
  step (a checkpoint, a GC pause).
- `compute_s`: the job's compute per iteration, given, because a training loop sees its iteration time
  but not how much of it its workers computed. It comes from the job's in-cluster trace
  (geryon.threshold.incluster: `geryon simulate --profile TRACE` reads one; Profile.compute_s) or from
  single-worker training without the network (geryon.demo.local). Clamped to the iteration time: a
  profile measured on a quieter machine can exceed a fast step, and an intensity above 1 is refused.
- `bytes`: per iteration, given: a worker pulls and pushes every parameter once per step, so twice the
  model's parameter bytes (geryon.tagger's plan) is what it moves.

Writes stay few: the meter re-registers only once a whole window has passed since its last write and
the intensity moved by more than `min_change` (relative) from what is registered; the controller's
hysteresis (geryon.jobs.bands, rule 4) then decides whether the move changes any band.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Protocol

from geryon.jobs.registration import Intensity, RegistrationError


class Registration(Protocol):
    """What the meter needs of geryon.jobs.chief.JobRegistration."""

    def update(self, intensity: Intensity) -> None: ...


class IntensityMeter:
    def __init__(
        self,
        registration: Registration,
        compute_s: float,
        bytes_per_iteration: int,
        window: int = 20,
        min_change: float = 0.02,
        registered: Intensity | None = None,
    ) -> None:
        compute_s = _positive(compute_s, "compute_s", "compute per iteration")
        if isinstance(bytes_per_iteration, bool) or not isinstance(bytes_per_iteration, int):
            raise RegistrationError(f"bytes_per_iteration: {bytes_per_iteration!r} is not a whole number")
        if bytes_per_iteration < 0:
            raise RegistrationError(f"bytes_per_iteration: {bytes_per_iteration} < 0")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise RegistrationError(f"window: {window!r}; give a number of steps >= 1")
        if not (isinstance(min_change, int | float) and 0 <= min_change < 1):
            raise RegistrationError(f"min_change: {min_change!r}; give a fraction in [0, 1)")
        self.registration = registration
        self.compute_s = compute_s
        self.bytes = bytes_per_iteration
        self.window = window
        self.min_change = float(min_change)
        self.registered = registered  # what etcd holds for the job (None: nothing the meter wrote)
        self._times: deque[float] = deque(maxlen=window)
        self._since_write = 0

    def step(self, seconds: float) -> Intensity | None:
        """One iteration's wall time; returns the intensity it registered, or None when it wrote nothing."""
        self._times.append(_positive(seconds, "seconds", "an iteration's wall time"))
        self._since_write += 1
        if len(self._times) < self.window or self._since_write < self.window:
            return None
        measured = self.current()
        assert measured is not None
        if self.registered is not None and not self._moved(self.registered, measured):
            return None
        self.registration.update(measured)
        self.registered = measured
        self._since_write = 0
        return measured

    def current(self) -> Intensity | None:
        """The intensity of the last window (None before a whole window)."""
        if len(self._times) < self.window:
            return None
        iteration = statistics.median(self._times)
        return Intensity(min(self.compute_s, iteration), iteration, self.bytes)

    def _moved(self, old: Intensity, new: Intensity) -> bool:
        return abs(new.gpu - old.gpu) > self.min_change * old.gpu


def _positive(value: float, what: str, meaning: str) -> float:
    """A finite number of seconds > 0 (not a bool); RegistrationError naming `what` otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise RegistrationError(f"{what}: {value!r}; {meaning} must be a number > 0")
    return float(value)
