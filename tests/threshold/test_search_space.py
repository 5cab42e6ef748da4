"""Candidates from the tagger's urgencies and sizes, the fit and the Gaussian process, and the searchers
on the paper's iteration-time model (engineer A's geryon.threshold.model) instead of a made-up curve."""

from __future__ import annotations

import numpy as np
import pytest

from geryon.tagger.map_table import class_of
from geryon.threshold.model import iteration_time
from geryon.threshold.profile import Profile, synthetic
from geryon.threshold.search import STRATEGIES, make_searcher
from geryon.threshold.search.fit import fit_minimum
from geryon.threshold.search.gp import GaussianProcess, expected_improvement
from geryon.threshold.search.space import Space

URGENCIES = [1.0, 0.75, 0.5, 0.25]  # four layers, one parameter each
SIZES = [100, 100, 200, 600]


def test_cuts_lie_between_distinct_urgencies_and_coordinates_count_bytes() -> None:
    space = Space.from_params([*URGENCIES, 0.5], [*SIZES, 0])
    assert space.cuts == [0.375, 0.625, 0.875]
    # The coordinate of a threshold: the share of bytes it puts in the lower class (urgency <= t).
    assert [space.coord(c) for c in space.cuts] == [0.6, 0.8, 0.9]
    assert space.coord(0.0) == 0.0 and space.coord(1.0) == 1.0
    assert space.sweep_values(0.0, 1.0, 5) == [0.375, 0.625, 0.875]
    assert space.sweep_values(0.375, 1.0, 5) == [0.625, 0.875]  # strictly between the neighbours
    assert space.snap(0.7, 0.0, 1.0) == 0.375 and space.snap(0.86, 0.0, 1.0) == 0.875
    assert space.initial(2) == [0.375, 0.625]
    assert space.candidates(2, 100) == [(0.375, 0.625), (0.375, 0.875), (0.625, 0.875)]
    with pytest.raises(ValueError, match="urgencies: 4 distinct urgencies allow at most 4 classes, not 5"):
        space.initial(4)


def test_candidates_are_thinned_evenly_over_bytes() -> None:
    urgencies = [i / 100 for i in range(101)]
    space = Space.from_params(urgencies, [1] * 101)
    cuts = space.candidates(2, 50)
    assert len(cuts) <= 50
    assert len({t for pair in cuts for t in pair}) == 10  # C(10, 2) = 45 <= 50 < C(11, 2)


def test_sweep_with_urgencies_finds_a_valley_a_plain_sweep_misses() -> None:
    # CNN-like: the last layer holds 80% of the bytes; the best split puts just it low: t in [0.05, 0.1).
    urgencies = [1 - i / 20 for i in range(20)]
    sizes = [10] * 19 + [760]

    def curve(ts: tuple[float, ...]) -> float:
        low = sum(s for u, s in zip(urgencies, sizes, strict=True) if u <= ts[0])
        return 1.0 if low == 760 else 1.12

    asked = []
    informed = make_searcher("sweep", warmup=0, urgencies=urgencies, sizes=sizes, fit="min")
    while not informed.converged:
        ts = informed.next_threshold()
        asked.append(ts[0])
        informed.report(ts, curve(ts))
    assert set(asked) <= set(Space.from_params(urgencies, sizes).cuts)
    assert informed.best is not None and curve(informed.best) == 1.0

    plain = make_searcher("sweep", warmup=0, fit="min")
    while not plain.converged:
        ts = plain.next_threshold()
        plain.report(ts, curve(ts))
    assert plain.best is not None and curve(plain.best) == 1.12  # 1/6..5/6 never hit [0.05, 0.1)


def test_guided_with_urgencies_asks_the_predictor_once_per_cut() -> None:
    calls: list[tuple[float, ...]] = []

    def predictor(ts: tuple[float, ...]) -> float:
        calls.append(ts)
        return 1.0 + abs(ts[0] - 0.6)

    searcher = make_searcher("guided", predictor=predictor, urgencies=URGENCIES, sizes=SIZES)
    assert sorted(calls) == [(0.375,), (0.625,), (0.875,)]
    assert searcher.next_threshold() == (0.625,)
    three = make_searcher("guided", 3, predictor=predictor, urgencies=URGENCIES)
    assert len(calls) == 3 + 3 and three.next_threshold() in Space.from_params(URGENCIES, None).candidates(
        2, 9
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"urgencies": [0.5, 0.5]}, "urgencies: need at least 2 distinct urgencies"),
        ({"urgencies": [0.5, 1.5]}, r"urgencies\[1\]: expected an urgency in \[0, 1\], got 1.5"),
        ({"urgencies": "0.5"}, "urgencies: expected a list"),
        ({"sizes": [1, 2]}, "sizes: give urgencies too"),
        ({"urgencies": [0.1, 0.9], "sizes": [1]}, "sizes: expected 2 sizes, one per urgency, got 1"),
        ({"urgencies": [0.1, 0.9], "sizes": [1, -1]}, r"sizes\[1\]: expected a size in bytes"),
        ({"urgencies": [0.1, 0.9], "sizes": [0, 0]}, "sizes: the sizes add up to 0 bytes"),
    ],
)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bad_urgency_options(strategy: str, options: dict[str, object], message: str) -> None:
    extra = {"predictor": lambda ts: 1.0} if strategy == "guided" else {}
    with pytest.raises(ValueError, match=message):
        make_searcher(strategy, **options, **extra)  # type: ignore[arg-type]


def test_more_classes_than_cuts_and_grid_with_urgencies_are_refused() -> None:
    with pytest.raises(ValueError, match="urgencies: 2 distinct urgencies allow at most 2 classes, not 3"):
        make_searcher("sweep", 3, urgencies=[0.2, 0.8])
    with pytest.raises(ValueError, match="grid: not used with urgencies"):
        make_searcher("bayes", urgencies=[0.2, 0.8], grid=9)


# --- the searchers on the paper's model -------------------------------------------------------------
def cnn_profile(layers: int = 12) -> Profile:
    depth = np.linspace(0, 1, layers)
    sizes = [int(2 ** (12 + 6 * d)) * 4 for d in depth]
    forward = [float(2e-3 * (1.5 - d)) for d in depth]
    return synthetic(sizes, forward, [2 * f for f in forward])


def model_curve(profile: Profile, bandwidth: float):  # type: ignore[no-untyped-def]
    """One link: classes in priority order; within a class, reverse layer order (gradients arrive last
    layer first, so that is the order a FIFO PS sends the updated parameters back)."""
    urgency = {p.layer: p.urgency for p in profile.params}

    def curve(ts: tuple[float, ...]) -> float:
        order = sorted(range(profile.num_layers), key=lambda layer: (class_of(urgency[layer], ts), -layer))
        return iteration_time(profile, order, bandwidth).iteration_s

    return curve


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_searchers_on_the_paper_model_reach_the_exhaustive_optimum(strategy: str) -> None:
    profile = cnn_profile()
    bandwidth = 2 * 8 * profile.total_bytes / profile.compute_s * 0.8
    curve = model_curve(profile, bandwidth)
    optimum = min(curve((i / 400,)) for i in range(1, 400))
    fifo = curve((0.999,))
    assert fifo / optimum > 1.15  # priorities matter here: otherwise the test would prove nothing
    options: dict[str, object] = {
        "urgencies": [p.urgency for p in profile.params],
        "sizes": [p.bytes for p in profile.params],
    }
    if strategy == "guided":
        options["predictor"] = curve
    searcher = make_searcher(strategy, **options)  # type: ignore[arg-type]
    rng = np.random.default_rng(5)
    while not searcher.converged:
        ts = searcher.next_threshold()
        searcher.report(ts, curve(ts) * (1 + 0.02 * float(rng.standard_normal())))
    assert searcher.live_iterations <= 10
    assert searcher.best is not None
    assert curve(searcher.best) <= optimum * 1.02


# --- fit and GP -------------------------------------------------------------------------------------
def test_fit_minimum() -> None:
    xs = [0.1, 0.3, 0.5, 0.7, 0.9]
    assert fit_minimum(xs, [(x - 0.42) ** 2 + 1 for x in xs], "quadratic") == pytest.approx((0.42, 1.0))
    assert fit_minimum(xs, [(x - 0.42) ** 2 + 1 for x in xs], "local") == pytest.approx((0.42, 1.0))
    # Concave or monotone data: the minimum is at an end of the measured range, never outside it.
    assert fit_minimum(xs, [-((x - 0.5) ** 2) for x in xs], "quadratic")[0] in (0.1, 0.9)
    assert fit_minimum(xs, [5 - x for x in xs], "quadratic")[0] == pytest.approx(0.9)
    # A plateau with a valley: the global parabola's vertex lands on the plateau, the local one in the valley.
    plateau = [1.1, 1.1, 1.0, 1.1, 1.1]
    assert fit_minimum([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], [1.3, 1.0, 1.3, 1.3, 1.3, 1.3, 1.3], "local")[
        0
    ] == pytest.approx(0.2)
    assert fit_minimum(xs, plateau, "local") == pytest.approx((0.5, 1.0))
    assert fit_minimum(xs, [1.0, 1.2, 1.4, 1.6, 1.8], "local") == pytest.approx((0.1, 1.0))
    assert fit_minimum([0.2, 0.4], [2.0, 1.0]) == (0.4, 1.0)  # too few points to fit
    assert fit_minimum(xs, [3, 1, 2, 0.5, 4], "min") == (0.7, 0.5)
    with pytest.raises(ValueError, match="fit: expected one of quadratic, local, min"):
        fit_minimum(xs, [1, 2, 3, 4, 5], "cubic")
    assert fit_minimum(xs, [3, 1, 2, 0.5, 4])[0] == fit_minimum(xs, [3, 1, 2, 0.5, 4], "local")[0]


def test_gaussian_process_interpolates_and_expected_improvement_points_at_the_gap() -> None:
    x = np.array([[0.1], [0.3], [0.5], [0.7], [0.9]])
    y = np.sin(6 * x[:, 0]) + 2
    gp = GaussianProcess.fit(x, y)
    grid = np.linspace(0, 1, 101)[:, None]
    mean, std = gp.predict(grid)
    inside = slice(10, 91)  # between the measured ends; outside, the GP falls back to the mean
    assert np.abs(mean - (np.sin(6 * grid[:, 0]) + 2))[inside].max() < 0.15
    assert std[50] < std[0]  # a measured point is surer than the unmeasured edge
    ei = expected_improvement(mean, std, float(y.min()))
    assert (ei >= 0).all()
    assert 0.7 < grid[int(np.argmax(ei)), 0] < 1.0  # sin(6x) + 2 is lowest near x = 0.785


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_three_classes_from_urgencies_try_only_ordered_cuts(strategy: str) -> None:
    profile = cnn_profile(10)
    urgencies = [p.urgency for p in profile.params]
    sizes = [p.bytes for p in profile.params]
    cuts = set(Space.from_params(urgencies, sizes).cuts)

    def curve(ts: tuple[float, ...]) -> float:  # best: the last layer alone in the lowest class
        return 1.0 + abs(ts[0] - 0.15) + abs(ts[1] - 0.55)

    options: dict[str, object] = {"urgencies": urgencies, "sizes": sizes, "budget": 30, "warmup": 0}
    if strategy == "guided":
        options["predictor"] = curve
    searcher = make_searcher(strategy, 3, **options)  # type: ignore[arg-type]
    while not searcher.converged:
        ts = searcher.next_threshold()
        assert ts[0] < ts[1] and set(ts) <= cuts
        searcher.report(ts, curve(ts))
    assert searcher.best is not None and curve(searcher.best) <= 1.1 + 1e-9  # one cut off at most
