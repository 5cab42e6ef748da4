"""The searchers on curves with a known optimum: accuracy, noise, budget, warm-up, drift, k = 3, bad input."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np
import pytest

from geryon.threshold.search import STRATEGIES, Searcher, make_searcher

Curve = Callable[[tuple[float, ...]], float]


def bowl(center: float, depth: float = 1.0) -> Curve:
    """Convex: 1 s at `center`, rising by `depth` s per unit squared."""
    return lambda ts: 1.0 + depth * (ts[0] - center) ** 2


def steps(levels: list[float]) -> Curve:
    """Piecewise constant like a real profile: one level per band of thresholds between urgencies."""
    n = len(levels)
    return lambda ts: levels[min(int(ts[0] * n), n - 1)]


def searcher_for(strategy: str, curve: Curve, num_classes: int = 2, **options: object) -> Searcher:
    if strategy == "guided":
        options["predictor"] = curve
    return make_searcher(strategy, num_classes, **options)  # type: ignore[arg-type]


def drive(searcher: Searcher, curve: Curve, *, noise: float = 0.0, seed: int = 0, limit: int = 200) -> int:
    """Runs iterations until convergence (at most `limit`); returns how many it took."""
    rng = np.random.default_rng(seed)
    for n in range(limit):
        if searcher.converged:
            return n
        ts = searcher.next_threshold()
        searcher.report(ts, curve(ts) * (1.0 + noise * float(rng.standard_normal())))
    return limit


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("center", [0.3, 0.62])
def test_finds_the_optimum_of_a_convex_curve(strategy: str, center: float) -> None:
    curve = bowl(center, depth=2.0)
    searcher = searcher_for(strategy, curve, warmup=0)  # no cost of switching here: every iteration counts
    used = drive(searcher, curve)
    assert searcher.converged
    assert used <= 10  # the default budget
    assert searcher.best is not None
    assert abs(searcher.best[0] - center) < 0.06
    assert curve(searcher.best) < 1.0 + 0.01


def test_sweep_quadratic_fit_lands_between_candidates() -> None:
    # A parabola is fitted exactly: the vertex, not the nearest of the 5 candidates (1/6 apart).
    searcher = make_searcher("sweep", warmup=0)
    drive(searcher, bowl(0.45))
    assert searcher.best == pytest.approx((0.45,), abs=1e-9)
    assert searcher.best_time == pytest.approx(1.0)
    minimum = make_searcher("sweep", warmup=0, fit="min")
    drive(minimum, bowl(0.45))
    assert minimum.best == pytest.approx((0.5,))  # the closest candidate


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_noisy_curve_within_two_percent_over_seeds(strategy: str) -> None:
    """5% multiplicative noise, 21 seeds: the median gap to the optimum stays under 2%."""
    curve = bowl(0.45, depth=1.5)
    gaps = []
    for seed in range(21):
        searcher = searcher_for(strategy, curve)
        drive(searcher, curve, noise=0.05, seed=seed)
        assert searcher.converged and searcher.live_iterations <= 10
        assert searcher.best is not None
        gaps.append(curve(searcher.best) - 1.0)
    assert statistics.median(gaps) < 0.02


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_piecewise_constant_curve(strategy: str) -> None:
    # Twelve bands like twelve layers: best when the first four are urgent (band 4 of 12, t in [1/3, 5/12)).
    levels = [1.30, 1.22, 1.15, 1.08, 1.00, 1.03, 1.07, 1.12, 1.18, 1.22, 1.26, 1.30]
    curve = steps(levels)
    searcher = searcher_for(strategy, curve, budget=16)
    drive(searcher, curve)
    assert searcher.best is not None
    assert curve(searcher.best) <= 1.03


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("budget", [1, 3, 4, 7])
def test_budget_is_never_exceeded(strategy: str, budget: int) -> None:
    curve = bowl(0.5)
    searcher = searcher_for(strategy, curve, budget=budget)
    used = drive(searcher, curve)
    assert searcher.converged
    assert used <= budget
    assert searcher.live_iterations == used
    assert searcher.best is not None  # even a budget of 1 (all warm-up) ends with a setting


def test_warmup_iterations_after_a_change_are_discarded() -> None:
    """The first iteration after each change costs 3x (new flows); with warmup=1 the search never sees it."""
    curve = bowl(0.3, depth=2.0)
    last: list[tuple[float, ...] | None] = [None]

    def with_switch_cost(ts: tuple[float, ...]) -> float:
        cost = 3.0 if ts != last[0] else 1.0
        last[0] = ts
        return curve(ts) * cost

    asked = []
    searcher = make_searcher("sweep", warmup=1, repeats=2, budget=15)
    while not searcher.converged:
        ts = searcher.next_threshold()
        asked.append(ts)
        searcher.report(ts, with_switch_cost(ts))
    # Each of the 5 candidates ran 1 warm-up + 2 measured iterations.
    assert len(asked) == 15
    assert [asked[i] for i in range(0, 15, 3)] == [asked[i + 1] for i in range(0, 15, 3)]
    assert searcher.best == pytest.approx((0.3,), abs=1e-9)  # the 3x never reached the fit
    assert searcher.best_time == pytest.approx(1.0)

    last[0] = None
    blind = make_searcher("sweep", warmup=0, repeats=1)
    drive(blind, with_switch_cost)
    assert blind.best_time == pytest.approx(3.0)  # every measurement was a first one: all inflated


def test_reports_for_other_thresholds_count_but_are_not_attributed() -> None:
    searcher = make_searcher("sweep", warmup=0, budget=10)
    first = searcher.next_threshold()
    searcher.report((0.99,), 100.0)  # the loop ran something else: costs budget, not a measurement
    assert searcher.live_iterations == 1
    assert searcher.next_threshold() == first
    drive(searcher, bowl(0.5))
    assert searcher.best is not None and searcher.best_time is not None
    assert searcher.best_time < 2.0  # the 100 s never entered the fit


def test_drift_retunes_and_finds_the_new_optimum() -> None:
    curve = bowl(0.3, depth=2.0)
    searcher = make_searcher("sweep", warmup=0, drift=0.10, drift_window=5)
    drive(searcher, curve)
    first_best = searcher.best
    assert first_best == pytest.approx((0.3,), abs=1e-6)

    # Steady within 5%: no re-tune however long it runs.
    rng = np.random.default_rng(3)
    for _ in range(40):
        ts = searcher.next_threshold()
        searcher.report(ts, curve(ts) * (1 + 0.02 * float(rng.uniform(-1, 1))))
    assert searcher.converged and searcher.epoch == 0

    # The cluster changes (another job shares the links): everything 30% slower, optimum moves.
    moved = lambda ts: 1.3 * bowl(0.7, depth=2.0)(ts)  # noqa: E731
    slow = 0
    while not searcher.epoch and slow < 5:
        ts = searcher.next_threshold()
        assert ts == first_best
        searcher.report(ts, moved(ts))
        slow += 1
    assert searcher.epoch == 1 and not searcher.converged
    assert slow == 3  # the window median moves once 3 of its 5 iterations are slow
    assert searcher.best == first_best  # kept until the new search decides
    drive(searcher, moved)
    assert searcher.best == pytest.approx((0.7,), abs=1e-6)


def test_drift_none_never_retunes() -> None:
    searcher = make_searcher("sweep", warmup=0, drift=None, drift_window=3)
    drive(searcher, bowl(0.3))
    for _ in range(20):
        searcher.report(searcher.next_threshold(), 50.0)
    assert searcher.converged and searcher.epoch == 0


def test_drift_after_a_faster_period_also_retunes() -> None:
    searcher = make_searcher("sweep", warmup=0, drift_window=4)
    drive(searcher, bowl(0.3))
    for _ in range(4):
        searcher.report(searcher.next_threshold(), 1.0)
    for _ in range(3):
        searcher.report(searcher.next_threshold(), 0.8)  # -20%: a job left, a better split may exist
    assert searcher.epoch == 1


def bowl2(a: float, b: float) -> Curve:
    return lambda ts: 1.0 + 2.0 * (ts[0] - a) ** 2 + 2.0 * (ts[1] - b) ** 2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_three_classes_search_two_sorted_thresholds(strategy: str) -> None:
    curve = bowl2(0.2, 0.6)
    searcher = searcher_for(strategy, curve, num_classes=3, budget=40)
    asked = []
    while not searcher.converged:
        ts = searcher.next_threshold()
        assert len(ts) == 2 and 0 < ts[0] < ts[1] < 1
        asked.append(ts)
        searcher.report(ts, curve(ts))
    assert len(asked) <= 40
    assert searcher.best is not None
    assert curve(searcher.best) < 1.01


def test_four_classes_sweep_keeps_thresholds_ordered() -> None:
    searcher = make_searcher("sweep", 4, budget=60, warmup=0, rounds=2)
    target = (0.15, 0.35, 0.8)

    def curve(ts: tuple[float, ...]) -> float:
        return 1.0 + sum((t - c) ** 2 for t, c in zip(ts, target, strict=True))

    while not searcher.converged:
        ts = searcher.next_threshold()
        assert len(ts) == 3 and 0 < ts[0] < ts[1] < ts[2] < 1
        searcher.report(ts, curve(ts))
    assert searcher.best is not None and curve(searcher.best) < 1.005


def test_bayes_joint_over_slice_size() -> None:
    sizes = (256 * 1024, 512 * 1024, 1024 * 1024, 4 * 1024 * 1024)

    def curve(ts: tuple[float, ...], slice_bytes: int) -> float:
        return 1.0 + 2.0 * (ts[0] - 0.4) ** 2 + 0.1 * abs(np.log2(slice_bytes / (1024 * 1024)))

    searcher = make_searcher("bayes", budget=30, warmup=0, slice_sizes=sizes)
    while not searcher.converged:
        trial = searcher.next_trial()
        assert trial.slice_bytes in sizes
        searcher.report(trial.thresholds, curve(trial.thresholds, trial.slice_bytes), trial.slice_bytes)
    assert searcher.best_slice_bytes == 1024 * 1024
    assert searcher.best is not None and abs(searcher.best[0] - 0.4) < 0.1


def test_guided_joint_over_slice_size_calls_the_predictor_with_the_size() -> None:
    calls = []

    def predictor(ts: tuple[float, ...], slice_bytes: int) -> float:
        calls.append(slice_bytes)
        return 1.0 + (ts[0] - 0.5) ** 2 + (0.0 if slice_bytes == 2048 else 0.2)

    searcher = make_searcher("guided", predictor=predictor, slice_sizes=[1024, 2048], grid=9)
    assert sorted(set(calls)) == [1024, 2048] and len(calls) == 18
    trial = searcher.next_trial()
    assert trial == type(trial)((0.5,), 2048)


def test_guided_measures_distinct_assignments_only() -> None:
    # 4 bands: grid points inside one band predict the same time; the shortlist takes one per band.
    curve = steps([1.3, 1.0, 1.1, 1.2])
    searcher = make_searcher("guided", predictor=curve, top=3, warmup=0, repeats=1)
    asked = []
    while not searcher.converged:
        ts = searcher.next_threshold()
        asked.append(ts)
        searcher.report(ts, curve(ts))
    assert [curve(ts) for ts in asked] == [1.0, 1.1, 1.2]
    assert asked[0][0] == pytest.approx(0.375)  # the middle of band [0.25, 0.5)


def test_guided_trusts_measurements_over_predictions() -> None:
    predicted = bowl(0.3, depth=2.0)
    real = bowl(0.5, depth=2.0)  # the simulator is off: the real optimum is elsewhere
    searcher = make_searcher("guided", predictor=predicted, top=5, grid=9, warmup=0, repeats=1)
    drive(searcher, real)
    # The grid's 5 best predictions are 0.1..0.5; the live measurements pick 0.5.
    assert searcher.best == pytest.approx((0.5,))


# --- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "grid"}, "strategy: expected one of sweep, guided, bayes"),
        ({"num_classes": 1}, r"num_classes: expected an integer in \[2, 8\]"),
        ({"num_classes": 9}, r"num_classes: expected an integer in \[2, 8\]"),
        ({"budget": 0}, "budget: expected an integer >= 1, got 0"),
        ({"budget": 2.5}, "budget: expected an integer >= 1"),
        ({"warmup": -1}, "warmup: expected an integer >= 0"),
        ({"repeats": 0}, "repeats: expected an integer >= 1"),
        ({"drift": 0}, r"drift: expected a number in \(0.0, 10.0\]"),
        ({"drift": "10%"}, "drift: expected a number"),
        ({"drift_window": 1}, "drift_window: expected an integer >= 2"),
        ({"points": 2}, r"points: expected an integer in \[3, 1000\]"),
        ({"fit": "cubic"}, "fit: expected one of local, quadratic, min, got 'cubic'"),
        ({"speed": 3}, "speed: unknown option.*'sweep'.*allowed: budget, chunk_sizes, drift"),
        ({"strategy": "bayes", "init": 1}, r"init: expected an integer in \[2, 100\]"),
        ({"strategy": "bayes", "slice_sizes": []}, "slice_sizes: give at least one"),
        ({"strategy": "bayes", "slice_sizes": [1024, 0]}, r"slice_sizes\[1\]: expected a size in bytes"),
        ({"strategy": "bayes", "slice_sizes": "1MiB"}, "slice_sizes: expected a list"),
        ({"strategy": "bayes", "grid": 200, "num_classes": 5}, "grid: 200 points make .* at most 100000"),
        ({"strategy": "guided"}, "predictor: the 'guided' strategy needs a predictor"),
        ({"strategy": "guided", "predictor": 3.0}, "predictor: expected a callable"),
        ({"strategy": "sweep", "predictor": abs}, "predictor: the 'sweep' strategy does not use one"),
        ({"strategy": "guided", "predictor": lambda ts: float("nan")}, r"predictor: returned nan"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, object], message: str) -> None:
    kwargs = dict(kwargs)
    strategy = str(kwargs.pop("strategy", "sweep"))
    num_classes = kwargs.pop("num_classes", 2)
    with pytest.raises(ValueError, match=message):
        make_searcher(strategy, num_classes, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("thresholds", "time", "message"),
    [
        ((0.2, 0.4), 1.0, r"thresholds: expected 1 threshold\(s\) for 2 classes, got 2"),
        ((1.5,), 1.0, r"thresholds\[0\]: 1.5 is not a number in \[0, 1\]"),
        ((), 1.0, "thresholds: give at least one"),
        ((0.5,), 0.0, "iteration_time: expected seconds > 0, got 0.0"),
        ((0.5,), float("inf"), "iteration_time: expected seconds > 0"),
        ((0.5,), "1s", "iteration_time: expected seconds > 0"),
    ],
)
def test_bad_reports_are_named_and_change_nothing(thresholds: tuple, time: object, message: str) -> None:
    searcher = make_searcher("sweep")
    before = searcher.next_threshold()
    with pytest.raises(ValueError, match=message):
        searcher.report(thresholds, time)  # type: ignore[arg-type]
    assert searcher.iterations == 0 and searcher.next_threshold() == before


def test_slice_size_in_reports_must_match_the_search() -> None:
    plain = make_searcher("sweep")
    with pytest.raises(ValueError, match="slice_bytes: this search does not search slice sizes"):
        plain.report(plain.next_threshold(), 1.0, 1024)
    joint = make_searcher("bayes", slice_sizes=[1024, 4096])
    with pytest.raises(ValueError, match="slice_bytes: this search is joint over slice sizes"):
        joint.report(joint.next_threshold(), 1.0)
    assert plain.iterations == joint.iterations == 0
