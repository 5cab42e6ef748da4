"""Progressive filling by events: `geryon.threshold.network.allocate`'s allocation, faster on many flows.

`network.allocate` re-reads every unfrozen flow in every round (a round ends when a port saturates):
rounds x flows, about 2 ms for the ~450 connections of a 1024-host co-hosted cluster. This one
visits a flow when it starts growing and when it freezes; a round touches only the ports with growing
flows and each port's priority levels as they run out. Same rules (see network.py's docstring): a flow
grows while, at each port where it has a level, it holds the most urgent level among that port's
unfrozen flows; a saturated port freezes every unfrozen flow through it. A growing flow's rate is the
sum of the rounds' increments since it started, added in the same order as network.allocate adds
them; a port's growing weight is kept by additions and removals instead of re-summed, so results
agree with network.allocate to float rounding (tests/threshold/test_fill.py: 1e-9 relative).
"""

from __future__ import annotations

from collections.abc import Sequence

from geryon.threshold.network import SATURATED, AllocationError


def allocate_events(
    up: Sequence[int],
    down: Sequence[int],
    level_up: Sequence[int | None],
    level_down: Sequence[int | None],
    capacity: Sequence[float],
    weight_up: Sequence[float] | None = None,
    weight_down: Sequence[float] | None = None,
) -> list[float]:
    """Rates of flows i = 0..n-1 crossing ports up[i] then down[i]; arguments as network.allocate's."""
    n = len(up)
    rates = [0.0] * n
    if n == 0:
        return rates
    wu = [1.0] * n if weight_up is None else weight_up
    wd = [1.0] * n if weight_down is None else weight_down
    residual: dict[int, float] = {}
    through: dict[int, list[int]] = {}  # every flow through each port
    # Priority ports: flows per level, unfrozen flows per level, and the most urgent level left.
    at_level: dict[int, dict[int, list[int]]] = {}
    left_at: dict[int, dict[int, int]] = {}
    for f in range(n):
        for port, level in ((up[f], level_up[f]), (down[f], level_down[f])):
            if port not in residual:
                residual[port] = capacity[port]
                through[port] = []
            through[port].append(f)
            if level is not None:
                at_level.setdefault(port, {}).setdefault(level, []).append(f)
                counts = left_at.setdefault(port, {})
                counts[level] = counts.get(level, 0) + 1
    levels = {port: sorted(by) for port, by in at_level.items()}
    pos = dict.fromkeys(levels, 0)  # index of the most urgent level with unfrozen flows
    best = {port: lv[0] for port, lv in levels.items()}

    frozen = [False] * n
    cohort = [-1] * n  # the round a growing flow started in; -1: not growing
    acc: list[float] = []  # per round: the increments since that round, summed in order
    count: dict[int, float] = {}  # growing weight per port
    n_growing: dict[int, int] = {}
    unfrozen = n

    def may_grow(f: int) -> bool:
        lu, ld = level_up[f], level_down[f]
        return (lu is None or lu == best.get(up[f])) and (ld is None or ld == best.get(down[f]))

    def start(f: int, r: int) -> None:
        cohort[f] = r
        for port, w in ((up[f], wu[f]), (down[f], wd[f])):
            count[port] = count.get(port, 0) + w
            n_growing[port] = n_growing.get(port, 0) + 1

    for f in range(n):
        if may_grow(f):
            start(f, 0)
    r = 0
    while unfrozen:
        if not count:
            raise AllocationError("no flow may grow: port levels order the flows in a cycle")
        acc.append(0.0)
        delta = min(residual[port] / c for port, c in count.items() if c > 0)
        for k in range(r + 1):
            acc[k] += delta
        saturated = []
        for port, c in count.items():
            left = residual[port] - delta * c
            residual[port] = left
            if left <= SATURATED * capacity[port]:
                saturated.append(port)
        exhausted: set[int] = set()
        for port in saturated:
            for f in through[port]:
                if frozen[f]:
                    continue
                frozen[f] = True
                unfrozen -= 1
                k = cohort[f]
                if k >= 0:
                    rates[f] = acc[k]
                    for p, w in ((up[f], wu[f]), (down[f], wd[f])):
                        left_n = n_growing[p] - 1
                        if left_n:
                            n_growing[p] = left_n
                            count[p] -= w
                        else:
                            del n_growing[p]
                            del count[p]
                for p, level in ((up[f], level_up[f]), (down[f], level_down[f])):
                    if level is not None:
                        counts = left_at[p]
                        counts[level] -= 1
                        if not counts[level] and level == best.get(p):
                            exhausted.add(p)
        r += 1
        for p in exhausted:
            lv, counts = levels[p], left_at[p]
            i = pos[p]
            while i < len(lv) and not counts[lv[i]]:
                i += 1
            pos[p] = i
            if i == len(lv):
                del best[p]
                continue
            best[p] = lv[i]
            for f in at_level[p][lv[i]]:
                if not frozen[f] and cohort[f] < 0 and may_grow(f):
                    start(f, r)
    return rates
