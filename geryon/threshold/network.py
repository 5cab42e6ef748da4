"""Fluid rate allocation on a star fabric: max-min fair sharing with strict priorities per port.

Every flow crosses exactly two egress ports: its sender's NIC (the "up" link) and the switch port
towards its receiver (the "down" link). At each port a flow has a level: an integer, lower served
first (strict priority), or None when that port ignores priorities (fair sharing). Flows of the same
level at a port share it max-min fairly.

The allocation is progressive filling: the flows allowed to grow raise their rates together until a
port saturates, which freezes every flow through it. A flow may grow only while, at each port where
it has a level, no unfrozen flow of a more urgent level remains, so a port serves its urgent levels
first and gives lower levels only what the urgent ones cannot use (they are bottlenecked elsewhere).
With one level per flow on both ports this is the classic level-by-level water-filling of strict
priority queues; with levels on no port it is plain max-min fairness.

Optional weights say how much of a port a flow uses per unit of its rate: a flow standing for m
identical flows (a representative) uses m times its rate there. Without weights every flow uses 1.

An optional order at the up port ranks the flows of one owner (a sending process) there: a flow with
an order may also grow only while no unfrozen flow of the same owner at that port has a smaller order.
Owners share the port as the levels say (strict priority between levels, fairly within one), so a
host whose two processes each keep one urgency order (a co-hosted worker's pushes and its PS's pulls)
serves each process's most urgent flow first without ordering one process's flows against the
other's. A flow without an order is not ranked against its owner's others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# A port counts as saturated below this fraction of its capacity left (float rounding of the fills).
SATURATED = 1e-12
_NO_LEVEL = 1 << 62  # a port where no unfrozen flow has a level: above every real level


class AllocationError(RuntimeError):
    """No flow can grow although some are unfrozen: levels that order flows in a cycle."""


def allocate(
    up: Sequence[int],
    down: Sequence[int],
    level_up: Sequence[int | None],
    level_down: Sequence[int | None],
    capacity: Sequence[float],
    weight_up: Sequence[float] | None = None,
    weight_down: Sequence[float] | None = None,
    order_up: Sequence[int | None] | None = None,
    owner_up: Sequence[int] | None = None,
) -> list[float]:
    """Rates (bytes/s) of flows i = 0..n-1 crossing ports up[i] then down[i].

    `capacity[port]` is a port's rate in bytes/s (> 0); up and down ports index the same list and a
    flow's two ports must differ. Levels, weights and the order at the up port (`order_up`, with
    `owner_up` saying whose) as in the module docstring.

    Per-port state lives in lists indexed by port (owners: small integers >= 0, one slot per port and
    owner) and every round walks the unfrozen flows two or three times (levels, orders, growth): the
    simulator calls this ~10k times per co-hosted run of ~500 flows, where dict look-ups per flow were
    most of its time. Sums and minima are taken in flow order, as before, so the rates are the same to
    the bit.
    """
    n = len(up)
    rates = [0.0] * n
    if n == 0:
        return rates
    if (order_up is None) != (owner_up is None):
        raise ValueError("order_up and owner_up: give both or neither")
    nports = len(capacity)
    residual = list(capacity)
    wu: Sequence[float] = [1] * n if weight_up is None else weight_up
    wd: Sequence[float] = [1] * n if weight_down is None else weight_down
    ordered = order_up is not None and any(o is not None for o in order_up)
    owners = 1
    if ordered:
        assert order_up is not None and owner_up is not None
        owners = max(owner_up) + 1
        if min(owner_up) < 0:
            raise ValueError("owner_up: expected integers >= 0")
        # An owner's slot at its up port, in a list of ports x owners.
        slot = [up[f] * owners + owner_up[f] for f in range(n)]
        order = order_up
    unfrozen: Sequence[int] = range(n)
    while unfrozen:
        # The most urgent unfrozen level at every port (_NO_LEVEL where none has one), and with orders
        # every owner's smallest unfrozen order at its up port.
        best = [_NO_LEVEL] * nports
        for f in unfrozen:
            lv = level_up[f]
            if lv is not None:
                p = up[f]
                if lv < best[p]:
                    best[p] = lv
            lv = level_down[f]
            if lv is not None:
                p = down[f]
                if lv < best[p]:
                    best[p] = lv
        growing: list[int] = []
        count: list[float] = [0] * nports
        ports: list[int] = []  # the ports with growing flows, in the order they were met
        if ordered:
            first = [_NO_LEVEL] * (nports * owners)
            for f in unfrozen:
                o = order[f]
                if o is not None and o < first[slot[f]]:
                    first[slot[f]] = o
            for f in unfrozen:
                u = up[f]
                lv = level_up[f]
                if lv is not None and lv != best[u]:
                    continue
                d = down[f]
                lv = level_down[f]
                if lv is not None and lv != best[d]:
                    continue
                o = order[f]
                if o is not None and o != first[slot[f]]:
                    continue
                growing.append(f)
                if not count[u]:
                    ports.append(u)
                count[u] += wu[f]
                if not count[d]:
                    ports.append(d)
                count[d] += wd[f]
        else:
            for f in unfrozen:
                u = up[f]
                lv = level_up[f]
                if lv is not None and lv != best[u]:
                    continue
                d = down[f]
                lv = level_down[f]
                if lv is not None and lv != best[d]:
                    continue
                growing.append(f)
                if not count[u]:
                    ports.append(u)
                count[u] += wu[f]
                if not count[d]:
                    ports.append(d)
                count[d] += wd[f]
        if not growing:
            raise AllocationError("no flow may grow: port levels order the flows in a cycle")
        delta = min(residual[p] / count[p] for p in ports if count[p] > 0)
        for f in growing:
            rates[f] += delta
        saturated = set()
        for p in ports:
            c = count[p]
            if c > 0:
                left = residual[p] - delta * c
                residual[p] = left
                if left <= SATURATED * capacity[p]:
                    saturated.add(p)
        if saturated:
            unfrozen = [f for f in unfrozen if up[f] not in saturated and down[f] not in saturated]
    return rates


# allocate_arrays's "no level" and "no order": above every real one (levels and orders are small).
NO_LEVEL = _NO_LEVEL


def allocate_arrays(
    up: np.ndarray,
    down: np.ndarray,
    level_up: np.ndarray,
    level_down: np.ndarray,
    capacity: np.ndarray,
    weight_up: np.ndarray,
    weight_down: np.ndarray,
    order_up: np.ndarray | None = None,
    owner_slot: np.ndarray | None = None,
) -> np.ndarray:
    """`allocate` on numpy arrays, for large flow sets (the simulator's co-hosted groups, ~500 flows).

    Levels and orders are int64 with NO_LEVEL for None; weights are float arrays (1.0 without);
    `owner_slot` is up * owners + owner (see `allocate`), given with `order_up`. Each round takes the
    same steps as `allocate` over whole arrays: per-port minima (np.minimum.at), the growing flows,
    their weights summed per port (np.bincount adds in flow order, as `allocate` does), the smallest
    residual / count, the saturated ports. The rates equal `allocate`'s to the bit where no port is
    both an up port and a down port (as in the simulator: NICs and switch ports are different ports;
    tests/threshold/test_network.py compares the two on random flow sets). About 1.3-1.8x faster than
    `allocate` at 500 flows; slower below ~100 (numpy's per-call cost).
    """
    n = len(up)
    rates = np.zeros(n)
    if n == 0:
        return rates
    nports = len(capacity)
    residual = np.array(capacity, dtype=float)
    free_up = level_up == NO_LEVEL
    free_down = level_down == NO_LEVEL
    ordered = order_up is not None and bool((order_up != NO_LEVEL).any())
    if ordered:
        assert order_up is not None and owner_slot is not None
        free_order = order_up == NO_LEVEL
        slots = int(owner_slot.max()) + 1
    unfrozen = np.ones(n, dtype=bool)
    everyone = np.arange(n)
    live = everyone
    while len(live):
        u = up[live]
        d = down[live]
        best = np.full(nports, NO_LEVEL, dtype=np.int64)
        np.minimum.at(best, u, level_up[live])
        np.minimum.at(best, d, level_down[live])
        grow = (free_up[live] | (level_up[live] == best[u])) & (
            free_down[live] | (level_down[live] == best[d])
        )
        if ordered:
            assert order_up is not None and owner_slot is not None
            s = owner_slot[live]
            first = np.full(slots, NO_LEVEL, dtype=np.int64)
            np.minimum.at(first, s, order_up[live])
            grow &= free_order[live] | (order_up[live] == first[s])
        g = live[grow]
        if not len(g):
            raise AllocationError("no flow may grow: port levels order the flows in a cycle")
        count = np.bincount(up[g], weights=weight_up[g], minlength=nports)
        count += np.bincount(down[g], weights=weight_down[g], minlength=nports)
        used = count > 0
        delta = (residual[used] / count[used]).min()
        rates[g] += delta
        residual[used] -= delta * count[used]
        saturated = used & (residual <= SATURATED * capacity)
        unfrozen[live] = ~(saturated[u] | saturated[d])
        live = everyone[unfrozen]
    return rates
