"""The paper's iteration-time model against hand-computed chains and its provable properties."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.threshold.model import (
    chain_iteration_time,
    in_order,
    iteration_time,
    overlap_coefficient,
    reverse_order,
)
from geryon.threshold.profile import synthetic

# 8000 bit/s makes 1000 bytes take exactly 1 s on the link.
BANDWIDTH = 8000.0


def approx(values: tuple[float, ...] | list[float]) -> object:
    return pytest.approx(list(values), abs=1e-12)


def test_two_layers_in_order() -> None:
    # tau_p = tau_g = [1, 2] s; forward [0.5, 0.5], backward [1, 1].
    profile = synthetic([1000, 2000], [0.5, 0.5], [1.0, 1.0])
    r = iteration_time(profile, [0, 1], BANDWIDTH)
    # pulls back to back: t_p = [1, 1 + 2]
    assert list(r.t_p) == approx([1.0, 3.0])
    # t_ff0 = 1 + 0.5 = 1.5; t_ff1 = max(1.5, 3) + 0.5 = 3.5
    assert list(r.t_ff) == approx([1.5, 3.5])
    # t_b1 = 3.5 + 1 = 4.5; t_b0 = 4.5 + 1 = 5.5
    assert list(r.t_b) == approx([5.5, 4.5])
    # t_bf1 = 4.5 + 2 = 6.5; t_bf0 = max(6.5, 5.5) + 1 = 7.5
    assert list(r.t_bf) == approx([7.5, 6.5])
    assert r.iteration_s == pytest.approx(7.5)
    # N = 2 * (1 + 2) = 6, C = 1 + 2 = 3, alpha = (6 + 3 - 7.5) / 3 = 0.5
    assert (r.comm_s, r.compute_s) == (pytest.approx(6.0), pytest.approx(3.0))
    assert r.alpha == pytest.approx(0.5)
    assert r.utilization == pytest.approx(3.0 / 7.5)


def test_two_layers_reverse_order() -> None:
    profile = synthetic([1000, 2000], [0.5, 0.5], [1.0, 1.0])
    r = iteration_time(profile, reverse_order(profile), BANDWIDTH)
    # layer 1 first: t_p1 = 2, then t_p0 = 2 + 1 = 3
    assert list(r.t_p) == approx([3.0, 2.0])
    # t_ff0 = 3 + 0.5 = 3.5; t_ff1 = max(3.5, 2) + 0.5 = 4
    assert list(r.t_ff) == approx([3.5, 4.0])
    # t_b1 = 4 + 1 = 5; t_b0 = 6
    assert list(r.t_b) == approx([6.0, 5.0])
    # t_bf1 = 5 + 2 = 7; t_bf0 = max(7, 6) + 1 = 8
    assert list(r.t_bf) == approx([8.0, 7.0])
    assert r.iteration_s == pytest.approx(8.0)
    # alpha = (6 + 3 - 8) / 3
    assert r.alpha == pytest.approx(1 / 3)
    assert r.order == (1, 0)


def test_three_layers_both_orders_and_a_tie() -> None:
    # tau = [2, 1, 3] s; forward [1, 2, 1]; backward [2, 1, 2]. N = 2 * 6 = 12, C = 4 + 5 = 9.
    profile = synthetic([2000, 1000, 3000], [1.0, 2.0, 1.0], [2.0, 1.0, 2.0])
    r = iteration_time(profile, in_order(profile), BANDWIDTH)
    # t_p = [2, 2+1, 2+1+3]
    assert list(r.t_p) == approx([2.0, 3.0, 6.0])
    # t_ff0 = 2 + 1 = 3; t_ff1 = max(3, 3) + 2 = 5; t_ff2 = max(5, 6) + 1 = 7
    assert list(r.t_ff) == approx([3.0, 5.0, 7.0])
    # t_b2 = 7 + 2 = 9; t_b1 = 9 + 1 = 10; t_b0 = 10 + 2 = 12
    assert list(r.t_b) == approx([12.0, 10.0, 9.0])
    # t_bf2 = 9 + 3 = 12; t_bf1 = max(12, 10) + 1 = 13; t_bf0 = max(13, 12) + 2 = 15
    assert list(r.t_bf) == approx([15.0, 13.0, 12.0])
    assert r.iteration_s == pytest.approx(15.0)
    assert r.alpha == pytest.approx((12 + 9 - 15) / 9)

    rev = iteration_time(profile, reverse_order(profile), BANDWIDTH)
    # t_p2 = 3, t_p1 = 3 + 1 = 4, t_p0 = 4 + 2 = 6
    assert list(rev.t_p) == approx([6.0, 4.0, 3.0])
    # t_ff0 = 6 + 1 = 7; t_ff1 = max(7, 4) + 2 = 9; t_ff2 = max(9, 3) + 1 = 10
    assert list(rev.t_ff) == approx([7.0, 9.0, 10.0])
    # t_b = [10+2+1+2, 10+2+1, 10+2] = [15, 13, 12]
    assert list(rev.t_b) == approx([15.0, 13.0, 12.0])
    # t_bf2 = 12 + 3 = 15; t_bf1 = max(15, 13) + 1 = 16; t_bf0 = max(16, 15) + 2 = 18
    assert list(rev.t_bf) == approx([18.0, 16.0, 15.0])
    assert rev.iteration_s == pytest.approx(18.0)
    assert rev.alpha == pytest.approx((12 + 9 - 18) / 9)

    # Pulling layer 1 first costs nothing here: t_p = [3, 1, 6], t_ff0 = 4, t_ff1 = max(4, 1) + 2 = 6,
    # t_ff2 = max(6, 6) + 1 = 7, the same as in order, so the same 15 s.
    assert iteration_time(profile, [1, 0, 2], BANDWIDTH).iteration_s == pytest.approx(15.0)


def test_last_layer_push_waits_for_its_backward() -> None:
    # One layer: pull 1 s, forward 2 s, backward 3 s, push 1 s. With t_bf^L = t_b^L + tau_g^L the
    # iteration is 1 + 2 + 3 + 1 = 7 s (the printed eq. 4, without tau_b^L, would give 4 s).
    profile = synthetic([1000], [2.0], [3.0])
    r = iteration_time(profile, [0], BANDWIDTH)
    assert r.iteration_s == pytest.approx(7.0)
    assert r.alpha == pytest.approx(0.0)  # nothing overlaps with one layer


def test_parameter_free_layers_and_no_communication() -> None:
    # A layer without parameters transfers nothing: it only adds compute.
    profile = synthetic([1000, 0], [1.0, 1.0], [1.0, 1.0])
    r = iteration_time(profile, [1, 0], BANDWIDTH)
    # t_p = [1, 1] (layer 1 pulls 0 bytes at t=0, then layer 0), t_ff = [2, 3], t_b = [5, 4],
    # t_bf1 = 4 + 0 = 4, t_bf0 = max(4, 5) + 1 = 6
    assert list(r.t_p) == approx([1.0, 0.0])
    assert r.iteration_s == pytest.approx(6.0)
    silent = iteration_time(synthetic([0, 0], [1.0, 2.0], [3.0, 4.0]), [0, 1], BANDWIDTH)
    assert silent.iteration_s == pytest.approx(10.0)
    assert silent.comm_s == 0.0
    assert silent.alpha == 1.0


def test_bandwidth_scales_communication() -> None:
    profile = synthetic([1000, 2000], [0.0, 0.0], [0.0, 0.0])
    # No compute: T = N = 2 * 3000 * 8 / B
    assert iteration_time(profile, [0, 1], 16000.0).iteration_s == pytest.approx(3.0)
    assert iteration_time(profile, [0, 1], 8000).iteration_s == pytest.approx(6.0)


@pytest.mark.parametrize("bandwidth", [0, -1.0, math.inf, math.nan, "10gbit", True])
def test_bad_bandwidth_names_the_argument(bandwidth: object) -> None:
    profile = synthetic([1000], [1.0], [1.0])
    with pytest.raises(ValueError, match="bandwidth_bps"):
        iteration_time(profile, [0], bandwidth)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [[0], [0, 0], [0, 2], [1, 0, 2], []])
def test_bad_order_names_the_argument(order: list[int]) -> None:
    profile = synthetic([1000, 1000], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"order: expected a permutation of the layer indices 0\.\.1"):
        iteration_time(profile, order, BANDWIDTH)


def test_mismatched_lists_are_rejected() -> None:
    with pytest.raises(ValueError, match="same length"):
        chain_iteration_time([8, 8], [1.0], [1.0, 1.0], [0, 1], BANDWIDTH)
    with pytest.raises(ValueError, match="at least one layer"):
        chain_iteration_time([], [], [], [], BANDWIDTH)


def test_overlap_coefficient_edges() -> None:
    assert overlap_coefficient(2.0, 1.0, 3.0) == 0.0  # T = N + C: nothing overlapped
    assert overlap_coefficient(2.0, 1.0, 2.0) == 1.0  # T = max(N, C): C fully hidden
    assert overlap_coefficient(0.0, 1.0, 1.0) == 1.0


chains = st.integers(min_value=1, max_value=6).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(min_value=0, max_value=5000).map(lambda b: b * 4), min_size=n, max_size=n),
        st.lists(st.floats(min_value=0, max_value=5), min_size=n, max_size=n),
        st.lists(st.floats(min_value=0, max_value=5), min_size=n, max_size=n),
        st.permutations(list(range(n))),
        st.floats(min_value=1e3, max_value=1e6),
    )
)


@settings(max_examples=200, deadline=None)
@given(chains)
def test_bounds_and_alpha_hold_for_any_chain_and_order(
    case: tuple[list[int], list[float], list[float], list[int], float],
) -> None:
    layer_bytes, forward, backward, order, bandwidth = case
    r = chain_iteration_time(layer_bytes, forward, backward, order, bandwidth)
    eps = 1e-9 * (1 + r.comm_s + r.compute_s)
    assert max(r.comm_s, r.compute_s) - eps <= r.iteration_s <= r.comm_s + r.compute_s + eps
    assert 0.0 <= r.alpha <= 1.0
    # Causality per layer: pull, forward, backward, push of a layer happen in that order.
    for layer in range(len(layer_bytes)):
        assert r.t_p[layer] <= r.t_ff[layer] + eps
        assert r.t_ff[layer] <= r.t_b[layer] + eps
        assert r.t_b[layer] <= r.t_bf[layer] + eps


@settings(max_examples=100, deadline=None)
@given(chains)
def test_in_order_is_optimal_on_a_chain(
    case: tuple[list[int], list[float], list[float], list[int], float],
) -> None:
    # Any order's last arrival among layers 0..i comes no earlier than in-order's prefix sum, so the
    # forward pass (and everything after it) can only finish later: in order beats every permutation,
    # reverse order included.
    layer_bytes, forward, backward, _, bandwidth = case
    n = len(layer_bytes)
    best = chain_iteration_time(layer_bytes, forward, backward, list(range(n)), bandwidth).iteration_s
    reverse = chain_iteration_time(layer_bytes, forward, backward, list(range(n))[::-1], bandwidth)
    assert best <= reverse.iteration_s * (1 + 1e-12)
    for order in itertools.permutations(range(n)):
        t = chain_iteration_time(layer_bytes, forward, backward, order, bandwidth).iteration_s
        assert best <= t * (1 + 1e-12)


def test_result_serializes() -> None:
    profile = synthetic([1000, 2000], [0.5, 0.5], [1.0, 1.0])
    d = iteration_time(profile, [0, 1], BANDWIDTH).to_dict()
    assert d["iteration_s"] == pytest.approx(7.5)
    assert d["order"] == [0, 1]
    assert d["t_bf"] == approx([7.5, 6.5])
