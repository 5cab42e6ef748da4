"""The fluid rates of a replay's connections (`Rates`): the event heap, when each transfer finishes at
its rate, and the re-allocation of a group's rates (`network.allocate`) when its flows or their levels
change, with end-host's quiet gaps and the allocation memo of end-host and co-hosted hybrid."""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from geryon.threshold.network import NO_LEVEL, allocate
from geryon.threshold.sim_cluster import Cluster
from geryon.threshold.sim_flows import Flow, FlowArrays

# Event kinds on the heap: a flow's finish (void once its version moved on), a GPU op's end, an
# end-host gap's end, a PS's update done, a transfer's per-message work done.
FLOW_DONE, COMPUTE_DONE, RESUME, UPDATED, READY, POSTED = 0, 1, 2, 3, 4, 5
# _quiet_rate's headroom: a port this close to full counts as full (the allocation's own SATURATED is 1e-12).
_QUIET_MARGIN = 1e-9
# Allocations of at least this many flows run on numpy arrays (network.allocate_arrays): faster above it,
# slower below (numpy's cost per call); the rates are the same to the bit either way.
_ARRAY_FLOWS = 128


def _by_fid(flow: Flow) -> int:
    return flow.fid


class Rates(Cluster):
    """A cluster's connections with their rates, re-allocated as they come, go and change levels."""

    quiet_gaps = True  # False: re-allocate at every end-host gap (the old path, for the equality tests)
    # end-host, hybrid: reuse the allocation of a set of flows and levels seen before (see _settle_memo);
    # False: allocate at every settle (the old path, for the equality tests).
    memo_allocations = True
    MEMO_MAX = 16384  # allocations kept (about 11 KB each at 1024 x 64); the memo restarts when full

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Cluster's arguments
        super().__init__(*args, **kwargs)
        # end-host's gaps skip re-allocations only on the representative path with more workers than
        # PSes: with every worker (or co-hosted) every PS port carries many connections, and with as many
        # PSes as workers the worker's own port is full, so the check would cost without paying.
        # (Not under incast: a flow's coming or going then changes its ports' capacity.)
        self.track_ports = (
            self.gap > 0
            and self.symmetric
            and not self.colocate
            and self.workers > self.num_ps
            and self.knobs.incast.ideal
        )
        # Allocation groups: flows that share no port are allocated apart. Pulls and pushes do not
        # meet on separate hosts (PS NIC -> worker port, worker NIC -> PS port); colocated, they do.
        self.active: tuple[dict[Flow, None], dict[Flow, None]] = ({}, {})
        self.dirty = [False, False]
        # The active flows through each port (filled as flows come and go; see _quiet_rate).
        self.port_flows: dict[int, dict[Flow, None]] = {}
        # ... and the rate they use on it, refreshed by every re-allocation of its group.
        self.port_used: dict[int, float] = {}
        self.group_ports: tuple[set[int], set[int]] = (set(), set())
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.heap_limit = 4096  # _compact when the heap grows past this
        self.seq = 0
        # end-host's and hybrid's allocation memo (see _settle_memo): each group's active flows as one
        # code per flow (0: not active, else its levels' number in memo_codes), and the flows changed since.
        self.memo: dict[tuple[int, bytes], array[float]] | None = None
        # hybrid only co-hosted (its ~450-flow groups are where allocations cost): the memo advances a
        # connection's bytes only when its rate changes, which rounds differently from advancing all at
        # every settle, and a chunk switch a rounding apart can change hybrid's schedule (VGG-19, V100,
        # 64 x 8 separate hosts, 40 Gbit/s, threshold 0.25: 1036.2 ms with the memo, 1050.1 without).
        # Without it separate-host hybrid runs are the same to the bit as before the memo.
        if self.memo_allocations and self.policy.uses_memo(self.colocate):
            self.memo = {}
        n_flows = len(self.flow_list)
        self.memo_state = (array("I", bytes(4 * n_flows)), array("I", bytes(4 * n_flows)))
        # Large co-hosted groups allocate on numpy arrays (network.allocate_arrays) at a memo miss.
        self.flow_arrays: FlowArrays | None = None
        # (Not under incast: its capacities depend on the active flows; the list path computes them.)
        if self.memo is not None and n_flows >= _ARRAY_FLOWS and self.knobs.incast.ideal:
            self.flow_arrays = FlowArrays(self.flow_list, self.capacity, self.weighted)
        self.memo_codes: dict[tuple[int | None, int | None, int | None], int] = {}
        self.touched: list[Flow] = []
        self.memo_rates = [array("d", bytes(8 * n_flows)), array("d", bytes(8 * n_flows))]

    def _at(self, t: float, kind: int, what: Any, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, what, version))

    def _allocate(self, flows: list[Flow]) -> list[float]:
        """The rates `network.allocate` gives these flows, in their order (weighted where grouped)."""
        return allocate(
            [f.up for f in flows],
            [f.down for f in flows],
            [f.level_up for f in flows],
            [f.level_down for f in flows],
            self._capacity_with(flows),
            [f.wu for f in flows] if self.weighted else None,
            [f.wd for f in flows] if self.weighted else None,
            [f.order_up for f in flows] if self.process_order else None,
            [f.side for f in flows] if self.process_order else None,
        )

    def _capacity_with(self, flows: Sequence[Flow]) -> list[float]:
        """Port capacities while `flows` are active: every port's rate, less what incast costs at a
        switch port that >= 2 hosts send to (simknobs.Incast). On the representative path a worker's
        flow into a PS port stands for every worker's, and a PS's flow to the worker for one to every
        worker, so with W >= 2 those ports have W senders and those NICs W destinations."""
        incast = self.knobs.incast
        if incast.ideal:
            return self.capacity
        W, P = self.sim_workers, self.num_ps
        stands_for = self.workers if self.symmetric else 1

        def is_ps(port: int) -> bool:
            return W <= port // 2 < W + P

        senders: dict[int, set[int]] = {}  # switch port -> the NICs sending to it
        targets: dict[int, set[int]] = {}  # NIC -> the switch ports it sends to
        for f in flows:
            if not f.bg:  # paced background: not a sender the bench measured (simknobs.Incast)
                senders.setdefault(f.down, set()).add(f.up)
                targets.setdefault(f.up, set()).add(f.down)
        capacity = list(self.capacity)
        for port, ups in senders.items():
            count = sum(stands_for if is_ps(port) else 1 for _ in ups)
            if count < 2:
                continue
            shared = any(len(targets[u]) * (stands_for if is_ps(u) else 1) >= 2 for u in ups)
            capacity[port] *= incast.shared if shared else incast.alone
        return capacity

    def _advance(self, flow: Flow, t: float) -> None:
        dt = t - flow.last_t
        if dt > 0 and flow.rate > 0:
            moved = flow.rate * dt
            if flow.shared:
                flow.served += moved / len(flow.members)
            else:
                flow.remaining -= moved
            self.link_moved[flow.up] += moved * flow.wu
            self.link_moved[flow.down] += moved * flow.wd
        flow.last_t = t

    def _join(self, flow: Flow) -> None:
        self.active[flow.group][flow] = None
        if self.memo is not None:
            self.touched.append(flow)
        if self.track_ports:  # only _quiet_rate reads port_flows
            pf = self.port_flows
            pf.setdefault(flow.up, {})[flow] = None
            pf.setdefault(flow.down, {})[flow] = None
            self.group_ports[flow.group].update((flow.up, flow.down))

    def _leave(self, flow: Flow) -> None:
        del self.active[flow.group][flow]
        if self.memo is not None:
            self.touched.append(flow)
        if self.track_ports:
            del self.port_flows[flow.up][flow]
            del self.port_flows[flow.down][flow]

    def _quiet_rate(self, flow: Flow, level_up: int | None, level_down: int | None) -> float | None:
        """end-host's gap: the flow's rate if it can join (or leave) the allocation without changing
        any other flow's rate, else None (then the group is re-allocated). Exact, not an approximation.

        Progressive filling freezes a flow when one of its ports saturates. Say the flow is alone on
        port a and its other port b stays below capacity with it: then a is its bottleneck (its rate is
        a's capacity) and b limits no one, so its coming or going moves no other flow's limit. The one
        other way it acts on others is priority at b: flows of a less urgent level there wait until it
        is frozen; that timing changes nothing for a flow alone on its own other port (b never fills,
        so it ends at that port's capacity whenever it starts), so each such flow must be alone there.
        In a symmetric cluster with more workers than PSes every PS port is one representative
        flow's, which is the common case: each end-host transfer then costs one allocation, not two."""
        if not self.quiet_gaps or not self.track_ports or self.fast or self.dirty[flow.group]:
            return None  # fast: weighted ports; dirty: the rates are about to change anyway
        pf = self.port_flows
        up, down = flow.up, flow.down
        on_up = pf.setdefault(up, {})
        on_down = pf.setdefault(down, {})
        alone_up = len(on_up) == (flow in on_up)
        alone_down = len(on_down) == (flow in on_down)
        cap = self.capacity
        if alone_up and alone_down:
            return min(cap[up], cap[down])
        if alone_up:
            a, b, level = up, down, level_down
        elif alone_down:
            a, b, level = down, up, level_up
        else:
            return None
        rate = cap[a]
        # The others' use of b, plus this flow at its rate (the same whether it joins or leaves).
        used = self.port_used.get(b, 0.0) + (0.0 if flow in pf[b] else rate)
        if used > cap[b] * (1 - _QUIET_MARGIN):
            return None
        if level is not None:
            for g in pf[b]:
                if g is flow:
                    continue
                g_level, g_other = (g.level_up, g.down) if g.up == b else (g.level_down, g.up)
                if g_level is not None and g_level > level and len(pf[g_other]) != 1:
                    return None
        return rate

    def _schedule(self, flow: Flow, t: float) -> None:
        flow.version += 1
        if flow.shared:
            left = flow.members[0][0] - flow.served
            share = len(flow.members)
        else:
            left = flow.remaining
            share = 1
        if left <= 0:
            self._at(t, FLOW_DONE, flow, flow.version)
        elif flow.rate > 0:
            self._at(t + left * share / flow.rate, FLOW_DONE, flow, flow.version)
        if len(self.heap) > self.heap_limit:
            self._compact()

    def _compact(self) -> None:
        """Drops the finishes that later rate changes made void (they would be popped and skipped).
        end-host's gaps change many rates per transfer, so without this the heap fills with them and
        every push and pop pays for its depth. Pop order is (time, sequence), unique, so it is unchanged."""
        heap = self.heap
        heap[:] = [e for e in heap if e[2] != FLOW_DONE or e[4] == e[3].version]
        heapq.heapify(heap)
        self.heap_limit = max(4096, 4 * len(heap))

    def _settle(self, t: float) -> None:
        """Re-allocates the rates of a group whose set of flows (or their levels) changed."""
        if self.memo is not None:
            self._settle_memo(t)
            return
        for group in (0, 1):
            if not self.dirty[group]:
                continue
            self.dirty[group] = False
            flows = list(self.active[group])
            for flow in flows:
                self._advance(flow, t)
            rates = self._allocate(flows)
            if self.track_ports:
                used = self.port_used
                for port in self.group_ports[group]:
                    used[port] = 0.0
                for flow, rate in zip(flows, rates, strict=True):
                    used[flow.up] += rate
                    used[flow.down] += rate
            for flow, rate in zip(flows, rates, strict=True):
                if flow.bg:
                    flow.rate = rate
                    continue
                if rate != flow.rate or flow.stale:
                    flow.rate = rate
                    flow.stale = False
                    self._schedule(flow, t)
                if rate > 0 and flow.waiting:
                    for key in flow.waiting:
                        flow.starts[key] = t
                    flow.waiting.clear()

    def _settle_memo(self, t: float) -> None:
        """_settle for end-host and hybrid: an allocation is a function of its flows' ports, weights
        (fixed per flow), levels, orders and the capacities (fixed per run), so the rates of a set of
        active flows and levels seen before are taken from the memo instead of filling again. end-host's
        per-transfer gap takes each connection out of the allocation and back: about 15k re-allocations
        per iteration at 1024 x 64 co-hosted, most of them of a state seen before. Exact: the flows are
        allocated in flow order (fid), so a memo hit returns what allocating again returns, to the bit.

        Only the flows whose rate changes (or whose transfer or levels did) are touched: the group's
        rates are kept in one array per group (by fid) and compared with the new ones at once. A flow
        is advanced only when its rate changes (its bytes move linearly until then)."""
        memo = self.memo
        assert memo is not None
        active = self.active
        codes = self.memo_codes
        touched = self.touched
        self.touched = []
        arrays = self.flow_arrays
        for flow in touched:
            group = flow.group
            fid = flow.fid
            if flow in active[group]:
                levels = (flow.level_up, flow.level_down, flow.order_up)
                code = codes.get(levels)
                if code is None:
                    code = codes[levels] = len(codes) + 1
                self.memo_state[group][fid] = code
                if arrays is not None:
                    lu, ld, order = levels
                    arrays.level_up[fid] = NO_LEVEL if lu is None else lu
                    arrays.level_down[fid] = NO_LEVEL if ld is None else ld
                    arrays.order_up[fid] = NO_LEVEL if order is None else order
            else:
                self.memo_state[group][fid] = 0
            self.memo_rates[group][fid] = flow.rate  # set outside a settle (gap, idle, join)
        flow_list = self.flow_list
        heap = self.heap
        link_moved = self.link_moved
        for group in (0, 1):
            if not self.dirty[group]:
                continue
            self.dirty[group] = False
            key = (group, self.memo_state[group].tobytes())
            rates = memo.get(key)
            if rates is None:
                if arrays is not None and len(active[group]) >= _ARRAY_FLOWS:
                    # The active flows in fid order: those with a code (codes are 0 when inactive).
                    fids = np.flatnonzero(np.frombuffer(self.memo_state[group], dtype=np.uint32))
                    full = np.zeros(len(flow_list))
                    full[fids] = arrays.allocate(fids, self.process_order)
                    rates = array("d", full.tobytes())
                else:
                    flows = sorted(active[group], key=_by_fid)
                    got = self._allocate(flows)
                    rates = array("d", bytes(8 * len(flow_list)))
                    for flow, rate in zip(flows, got, strict=True):
                        rates[flow.fid] = rate
                if len(memo) >= self.MEMO_MAX:
                    memo.clear()
                memo[key] = rates
            old = self.memo_rates[group]
            changed = np.flatnonzero(np.frombuffer(old) != np.frombuffer(rates)).tolist()
            self.memo_rates[group] = array("d", rates)
            # Changed rates, and flows a transfer or level change left without a scheduled finish.
            todo = set(changed)
            todo.update(f.fid for f in touched if f.group == group and f.stale and f in active[group])
            if self.track_ports:
                used = self.port_used
                for port in self.group_ports[group]:
                    used[port] = 0.0
                for flow in active[group]:
                    rate = rates[flow.fid]
                    used[flow.up] += rate
                    used[flow.down] += rate
            seq = self.seq
            push = heapq.heappush
            trace = self.trace
            for fid in sorted(todo):
                flow = flow_list[fid]
                rate = rates[fid]
                # _advance at its old rate up to now, then _schedule at the new one, inlined: this loop
                # runs ~2M times at 1024 x 64 co-hosted end-host. Its flows are serial (one head each),
                # so the arithmetic is _advance's and _schedule's with share 1, to the bit.
                old_rate = flow.rate
                if old_rate > 0:
                    dt = t - flow.last_t
                    if dt > 0:
                        moved = old_rate * dt
                        flow.remaining -= moved
                        link_moved[flow.up] += moved * flow.wu
                        link_moved[flow.down] += moved * flow.wd
                flow.last_t = t
                flow.rate = rate
                if flow.bg:
                    continue
                flow.stale = False
                version = flow.version + 1
                flow.version = version
                left = flow.remaining
                if left <= 0:
                    seq += 1
                    push(heap, (t, seq, FLOW_DONE, flow, version))
                elif rate > 0:
                    seq += 1
                    push(heap, (t + left / rate, seq, FLOW_DONE, flow, version))
                if trace and rate > 0 and flow.waiting:
                    for key_ in flow.waiting:
                        flow.starts[key_] = t
                    flow.waiting.clear()
            self.seq = seq
            if len(heap) > self.heap_limit:
                self._compact()
