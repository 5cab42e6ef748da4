"""Rate allocation on the star fabric: hand-computed cases and properties of random flow sets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.threshold.network import AllocationError, allocate

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
