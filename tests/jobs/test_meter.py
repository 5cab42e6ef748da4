"""geryon.jobs.meter: a chief's intensity from its step times, re-registered when it moves."""

from __future__ import annotations

import pytest

from geryon.jobs.meter import IntensityMeter
from geryon.jobs.registration import Intensity, RegistrationError


class Recorder:
    def __init__(self) -> None:
        self.updates: list[Intensity] = []

    def update(self, intensity: Intensity) -> None:
        self.updates.append(intensity)


def test_registers_the_median_of_a_window_then_only_when_it_moves() -> None:
    reg = Recorder()
    meter = IntensityMeter(reg, compute_s=0.1, bytes_per_iteration=1000, window=5, min_change=0.02)
    for t in (0.2, 0.21, 0.19, 0.9, 0.2):  # one slow step: the median ignores it
        wrote = meter.step(t)
    assert wrote == Intensity(0.1, 0.2, 1000) and reg.updates == [wrote]
    for t in (0.201, 0.2, 0.199, 0.2, 0.202):  # within 2%: nothing written
        assert meter.step(t) is None
    # The job slowed by 25% (0.4 against 0.5): written at the step the window's median moves.
    writes = [meter.step(t) for t in (0.25,) * 5]
    assert writes == [None, None, Intensity(0.1, 0.25, 1000), None, None]
    assert reg.updates[-1] == Intensity(0.1, 0.25, 1000) and len(reg.updates) == 2


def test_writes_at_most_once_a_window() -> None:
    reg = Recorder()
    meter = IntensityMeter(reg, compute_s=0.1, bytes_per_iteration=0, window=3, min_change=0.0)
    for i in range(12):
        meter.step(0.2 + 0.01 * i)  # moves every step
    assert len(reg.updates) == 4  # steps 3, 6, 9, 12


def test_compute_longer_than_the_step_is_clamped_so_intensity_stays_at_most_1() -> None:
    reg = Recorder()
    meter = IntensityMeter(reg, compute_s=0.3, bytes_per_iteration=10, window=2)
    meter.step(0.2)
    wrote = meter.step(0.2)
    assert wrote is not None and wrote.compute_s == wrote.iteration_s == 0.2 and wrote.gpu == 1.0


def test_starts_from_what_is_registered() -> None:
    reg = Recorder()
    meter = IntensityMeter(reg, 0.1, 10, window=2, registered=Intensity(0.1, 0.2, 10))
    meter.step(0.2)
    assert meter.step(0.201) is None and reg.updates == []


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"compute_s": 0}, "compute_s: 0; compute per iteration must be a number > 0"),
        ({"compute_s": float("nan")}, "compute_s: nan"),
        ({"bytes_per_iteration": 1.5}, "bytes_per_iteration: 1.5 is not a whole number"),
        ({"bytes_per_iteration": -1}, "bytes_per_iteration: -1 < 0"),
        ({"window": 0}, "window: 0; give a number of steps >= 1"),
        ({"min_change": 1.0}, r"min_change: 1.0; give a fraction in \[0, 1\)"),
    ],
)
def test_bad_arguments_name_themselves(kw: dict, match: str) -> None:
    args = {"compute_s": 0.1, "bytes_per_iteration": 10, **kw}
    with pytest.raises(RegistrationError, match=match):
        IntensityMeter(Recorder(), **args)


@pytest.mark.parametrize("seconds", [0, -1.0, float("inf"), True])
def test_a_bad_step_time_is_refused(seconds: float) -> None:
    with pytest.raises(RegistrationError, match=r"seconds: .* an iteration's wall time must be a number > 0"):
        IntensityMeter(Recorder(), 0.1, 10).step(seconds)
