"""Urgency functions on a consumption known by construction."""

from __future__ import annotations

import pytest

from geryon.tagger.dag import Consumption
from geryon.tagger.params import Parameter
from geryon.tagger.urgency import URGENCY_FUNCTIONS, compute_urgency, register


def _param(name: str, layer: str) -> Parameter:
    return Parameter(name=name, runtime_name=name, shape=(2,), dtype="float32", element_size=4, layer=layer)


# Three layers (kernel + bias each) consumed in order c, a, b; one parameter never consumed.
PARAMS = [
    _param("a/kernel", "a"),
    _param("a/bias", "a"),
    _param("b/kernel", "b"),
    _param("c/kernel", "c"),
    _param("c/bias", "c"),
    _param("unused/w", "unused"),
]
CONSUMPTION = Consumption(
    consumer=[10, 11, 20, 1, 2, None],
    level=[3, 4, 5, 1, 2, None],
    tic_deps=[3, 4, 5, 1, 2, None],
    order=[3, 4, 0, 1, 2, 5],
)


def test_layer_urgency_is_one_minus_l_over_L_in_consumption_order() -> None:
    u = compute_urgency("layer", PARAMS, CONSUMPTION)
    # Layers by first use: c (l=1), a (l=2), b (l=3); L = 3.
    assert u == pytest.approx([1 - 2 / 3, 1 - 2 / 3, 0.0, 1 - 1 / 3, 1 - 1 / 3, 0.0])


def test_tic_urgency_is_one_minus_m_over_n() -> None:
    u = compute_urgency("tic", PARAMS, CONSUMPTION)
    assert u == pytest.approx([1 - 3 / 6, 1 - 4 / 6, 1 - 5 / 6, 1 - 1 / 6, 1 - 2 / 6, 0.0])


def test_unknown_and_misbehaving_functions() -> None:
    with pytest.raises(ValueError, match="unknown urgency function 'nope'; allowed: layer, tac, tic"):
        compute_urgency("nope", PARAMS, CONSUMPTION)
    register("test-out-of-range", lambda params, c: [2.0] * len(params))
    try:
        with pytest.raises(ValueError, match=r"one value in \[0, 1\] per parameter"):
            compute_urgency("test-out-of-range", PARAMS, CONSUMPTION)
        with pytest.raises(ValueError, match="already registered"):
            register("test-out-of-range", lambda params, c: [0.0] * len(params))
    finally:
        del URGENCY_FUNCTIONS["test-out-of-range"]
