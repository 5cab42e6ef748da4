"""Rate allocation on the star fabric: hand-computed cases and properties of random flow sets."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.threshold.network import NO_LEVEL, AllocationError, allocate, allocate_arrays

# Ports: 0, 1 = the NICs of senders A and B; 2, 3 = the switch ports towards receivers X and Y.
CAP = [10.0, 10.0, 10.0, 10.0]


def test_fair_sharing_is_max_min():
    # A->X, A->Y, B->X: port A shared by two, port X by two; everyone gets 5.
    rates = allocate([0, 0, 1], [2, 3, 2], [None] * 3, [None] * 3, CAP)
    assert rates == pytest.approx([5.0, 5.0, 5.0])
    # A slow sender leaves the rest of the receiver's port to the other: max-min, not equal split.
    rates = allocate([0, 1], [2, 2], [None, None], [None, None], [2.0, 10.0, 10.0, 10.0])
    assert rates == pytest.approx([2.0, 8.0])


def test_strict_priority_at_both_ports():
    # Two senders into one receiver port: the urgent level takes everything it can.
    rates = allocate([0, 1], [2, 2], [1, 0], [1, 0], CAP)
    assert rates == pytest.approx([0.0, 10.0])
    # The urgent flow is held back by its own sender's port; the other level gets the remainder.
    rates = allocate([0, 1], [2, 2], [1, 0], [1, 0], [10.0, 3.0, 10.0, 10.0])
    assert rates == pytest.approx([7.0, 3.0])


def test_priority_only_at_the_sender_is_end_host_scheduling():
    # A sends an urgent flow to X and a bulk flow to Y; B's bulk flow to X shares port X fairly with
    # A's urgent one: the switch does not know A's priorities.
    rates = allocate([0, 0, 1], [2, 3, 2], [0, 1, 0], [None, None, None], CAP)
    assert rates == pytest.approx([5.0, 5.0, 5.0])
    # With priorities on the switch too, A's urgent flow wins port X and B waits.
    rates = allocate([0, 0, 1], [2, 3, 2], [0, 1, 1], [0, 1, 1], CAP)
    assert rates == pytest.approx([10.0, 0.0, 0.0])


def test_no_flows():
    assert allocate([], [], [], [], CAP) == []


flows = st.lists(
    st.tuples(
        st.integers(0, 2),  # sender port 0..2
        st.integers(3, 5),  # receiver port 3..5
        st.integers(0, 2),  # level
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    flows, st.lists(st.floats(0.5, 20.0), min_size=6, max_size=6), st.sampled_from(["fair", "prio", "host"])
)
def test_allocation_is_feasible_and_every_flow_is_bottlenecked(fl, caps, discipline):
    up = [f[0] for f in fl]
    down = [f[1] for f in fl]
    levels = [f[2] for f in fl]
    lu = [None if discipline == "fair" else lv for lv in levels]
    ld = [lv if discipline == "prio" else None for lv in levels]
    rates = allocate(up, down, lu, ld, caps)
    load = [0.0] * 6
    for u, d, r in zip(up, down, rates, strict=True):
        assert r >= 0
        load[u] += r
        load[d] += r
    for port in range(6):
        assert load[port] <= caps[port] * (1 + 1e-9)
    saturated = {port for port in range(6) if math.isclose(load[port], caps[port], rel_tol=1e-9)}
    for i in range(len(fl)):
        # Work conservation: no flow could grow without some port on its path being full.
        assert up[i] in saturated or down[i] in saturated
    if discipline == "fair":
        # Max-min: each flow has a full port on which no other flow gets more than it.
        for i in range(len(fl)):
            assert any(
                p in saturated
                and all(
                    rates[k] <= rates[i] * (1 + 1e-9) + 1e-12 for k in range(len(fl)) if p in (up[k], down[k])
                )
                for p in (up[i], down[i])
            )
    if discipline == "prio":
        # Strict priority: a flow gets bandwidth at a port it shares with a more urgent flow only if
        # that flow is held back by its other port.
        for i in range(len(fl)):
            for k in range(len(fl)):
                if levels[k] < levels[i] and rates[i] > 1e-9:
                    for p in {up[i], down[i]} & {up[k], down[k]}:
                        others = {up[k], down[k]} - {p}
                        assert others and others <= saturated


def test_levels_that_order_flows_in_a_cycle_are_refused():
    # Each flow is the more urgent one at one port and the less urgent at the other: no order exists.
    with pytest.raises(AllocationError, match="cycle"):
        allocate([0, 0], [2, 2], [0, 1], [1, 0], CAP)


def test_an_order_ranks_one_owners_flows_at_its_port_only():
    # Sender port A carries two owners (a co-hosted PS, owner 0, and worker, owner 1), one level: owner
    # 0's flows to X (order 0) and Y (order 5), owner 1's flow to Y (order 1). Each owner sends its
    # smallest order first and the owners share A fairly: 5 and 5; owner 0's order-5 flow waits.
    rates = allocate([0, 0, 0], [2, 3, 3], [0, 0, 0], [0, 0, 0], CAP, order_up=[0, 5, 1], owner_up=[0, 0, 1])
    assert rates == pytest.approx([5.0, 0.0, 5.0])
    # One owner for all three: one order over the port (order 0 first, alone at 10).
    rates = allocate([0, 0, 0], [2, 3, 3], [0, 0, 0], [0, 0, 0], CAP, order_up=[0, 5, 1], owner_up=[0, 0, 0])
    assert rates == pytest.approx([10.0, 0.0, 0.0])
    # An owner's first flow held back at its receiver's port (X: 2) lets its next one grow once it is
    # frozen: order 0 and owner 1's flow fill to 2 each, then order 5 and owner 1's share A's 6 left.
    rates = allocate(
        [0, 0, 0],
        [2, 3, 3],
        [0, 0, 0],
        [0, 0, 0],
        [10.0, 10.0, 2.0, 10.0],
        order_up=[0, 5, 1],
        owner_up=[0, 0, 1],
    )
    assert rates == pytest.approx([2.0, 3.0, 5.0])
    # Levels stay strict between owners: owner 1's level-1 flow waits for owner 0's level 0.
    rates = allocate([0, 0], [2, 3], [0, 1], [0, 1], CAP, order_up=[3, 0], owner_up=[0, 1])
    assert rates == pytest.approx([10.0, 0.0])


def test_orders_need_owners():
    with pytest.raises(ValueError, match="order_up and owner_up"):
        allocate([0], [2], [0], [0], CAP, order_up=[0])
    with pytest.raises(ValueError, match="owner_up: expected integers >= 0"):
        allocate([0], [2], [0], [0], CAP, order_up=[0], owner_up=[-1])


@settings(max_examples=150, deadline=None)
@given(flows, st.lists(st.floats(0.5, 20.0), min_size=6, max_size=6), st.integers(0, 2**32 - 1))
def test_one_owner_per_port_with_orders_is_the_same_as_orders_for_levels(fl, caps, seed):
    # A port with one owner and orders consistent with the levels (a lower order never has a higher
    # level) serves exactly as if the orders were its levels: the simulator's per-process order equals
    # its per-NIC one where a host runs one task, to the bit.
    up = [f[0] for f in fl]
    down = [f[1] for f in fl]
    cls = [f[2] for f in fl]
    rng = random.Random(seed)
    order = [c * 100 + rng.randint(0, 50) for c in cls]
    by_level = allocate(up, down, order, cls, caps)
    by_owner = allocate(up, down, cls, cls, caps, order_up=order, owner_up=[0] * len(fl))
    assert by_owner == by_level


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # sender port 0, 2, 4, 6 (NICs)
            st.integers(0, 3),  # receiver port 1, 3, 5, 7 (switch ports)
            st.one_of(st.none(), st.integers(0, 3)),  # level at the NIC
            st.one_of(st.none(), st.integers(0, 3)),  # level at the switch port
            st.one_of(st.none(), st.integers(0, 9)),  # order in its owner at the NIC
            st.integers(0, 1),  # owner
            st.sampled_from([1.0, 0.5, 3.0, 17.0]),  # weights
            st.sampled_from([1.0, 2.0, 0.25]),
        ),
        min_size=1,
        max_size=16,
    ),
    st.lists(st.floats(0.5, 20.0), min_size=8, max_size=8),
    st.booleans(),
)
def test_allocate_arrays_equals_allocate_to_the_bit(fl, caps, ordered):
    # NICs and switch ports apart, as in the simulator (allocate_arrays sums a port's weights per side).
    up = [2 * f[0] for f in fl]
    down = [2 * f[1] + 1 for f in fl]
    lu = [f[2] for f in fl]
    ld = [f[3] for f in fl]
    order = [f[4] for f in fl] if ordered else None
    owner = [f[5] for f in fl] if ordered else None
    wu = [f[6] for f in fl]
    wd = [f[7] for f in fl]
    try:
        expected = allocate(up, down, lu, ld, caps, wu, wd, order, owner)
    except AllocationError:
        with pytest.raises(AllocationError):
            allocate_arrays(*arrays(up, down, lu, ld, caps, wu, wd, order, owner))
        return
    got = allocate_arrays(*arrays(up, down, lu, ld, caps, wu, wd, order, owner))
    assert got.tolist() == expected


def arrays(up, down, lu, ld, caps, wu, wd, order, owner):
    def levels(values):
        return np.array([NO_LEVEL if v is None else v for v in values], dtype=np.int64)

    return (
        np.array(up),
        np.array(down),
        levels(lu),
        levels(ld),
        np.array(caps),
        np.array(wu),
        np.array(wd),
        None if order is None else levels(order),
        None if owner is None else np.array([2 * u + o for u, o in zip(up, owner, strict=True)]),
    )
