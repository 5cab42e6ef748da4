"""allocate_events gives network.allocate's rates, on random stars with priorities and weights."""

from __future__ import annotations

import random

import pytest

from geryon.threshold.fill import allocate_events
from geryon.threshold.network import AllocationError, allocate


def random_case(rng: random.Random):
    hosts = rng.randint(2, 9)
    ports = 2 * hosts
    cap = [rng.choice([1.0, 2.5, 10.0, rng.uniform(0.5, 20.0)]) for _ in range(ports)]
    n = rng.randint(1, 60)
    up, down, lu, ld, wu, wd = [], [], [], [], [], []
    style = rng.choice(["none", "up", "both", "mixed"])
    for _ in range(n):
        a, b = rng.sample(range(hosts), 2)
        up.append(2 * a)
        down.append(2 * b + 1)
        level = rng.randint(0, 5)
        lu.append(None if style == "none" or (style == "mixed" and rng.random() < 0.3) else level)
        ld.append(level if style in ("both", "mixed") and rng.random() < 0.8 else None)
        wu.append(float(rng.choice([1, 1, 2, 7])))
        wd.append(float(rng.choice([1, 3, 1])))
    weighted = rng.random() < 0.5
    return up, down, lu, ld, cap, (wu if weighted else None), (wd if weighted else None)


@pytest.mark.parametrize("seed", range(300))
def test_same_rates_as_network_allocate(seed):
    case = random_case(random.Random(seed))
    try:
        expected = allocate(*case)
    except AllocationError:
        with pytest.raises(AllocationError):
            allocate_events(*case)
        return
    assert allocate_events(*case) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_levels_in_order_and_fair_sharing():
    # The examples of tests/threshold/test_network.py.
    cap = [10.0] * 4
    assert allocate_events([0, 0, 1], [2, 3, 2], [None] * 3, [None] * 3, cap) == pytest.approx([5, 5, 5])
    assert allocate_events([0, 1], [2, 2], [1, 0], [1, 0], cap) == pytest.approx([0, 10])
    assert allocate_events([0, 0, 1], [2, 3, 2], [0, 1, 0], [None] * 3, cap) == pytest.approx([5, 5, 5])
    assert allocate_events([], [], [], [], cap) == []
