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
"""

from __future__ import annotations

from collections.abc import Sequence

# A port counts as saturated below this fraction of its capacity left (float rounding of the fills).
SATURATED = 1e-12


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
) -> list[float]:
    """Rates (bytes/s) of flows i = 0..n-1 crossing ports up[i] then down[i].

    `capacity[port]` is a port's rate in bytes/s (> 0); up and down ports index the same list and a
    flow's two ports must differ. Levels as in the module docstring.
    """
    n = len(up)
    rates = [0.0] * n
    if n == 0:
        return rates
    residual: dict[int, float] = {}
    for f in range(n):
        residual[up[f]] = capacity[up[f]]
        residual[down[f]] = capacity[down[f]]
    unfrozen = list(range(n))
    while unfrozen:
        # The most urgent unfrozen level at every priority port.
        best: dict[int, int] = {}
        for f in unfrozen:
            lu = level_up[f]
            if lu is not None:
                port = up[f]
                b = best.get(port)
                if b is None or lu < b:
                    best[port] = lu
            ld = level_down[f]
            if ld is not None:
                port = down[f]
                b = best.get(port)
                if b is None or ld < b:
                    best[port] = ld
        growing: list[int] = []
        count: dict[int, float] = {}
        for f in unfrozen:
            lu = level_up[f]
            ld = level_down[f]
            if (lu is None or lu == best[up[f]]) and (ld is None or ld == best[down[f]]):
                growing.append(f)
                wu = 1 if weight_up is None else weight_up[f]
                wd = 1 if weight_down is None else weight_down[f]
                count[up[f]] = count.get(up[f], 0) + wu
                count[down[f]] = count.get(down[f], 0) + wd
        if not growing:
            raise AllocationError("no flow may grow: port levels order the flows in a cycle")
        delta = min(residual[port] / c for port, c in count.items() if c > 0)
        for f in growing:
            rates[f] += delta
        saturated = set()
        for port, c in count.items():
            left = residual[port] - delta * c
            residual[port] = left
            if left <= SATURATED * capacity[port]:
                saturated.add(port)
        unfrozen = [f for f in unfrozen if up[f] not in saturated and down[f] not in saturated]
    return rates
