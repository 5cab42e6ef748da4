"""The replay itself (`Replay`): BSP iterations of compute, pulls and pushes over a cluster's
connections, each connection picking, preempting or pausing its transfers as the mode's policy says."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from typing import Any

from geryon.threshold.model import overlap_coefficient
from geryon.threshold.sim_bound import lower_bound
from geryon.threshold.sim_flows import PULL, PUSH, Flow
from geryon.threshold.sim_rates import COMPUTE_DONE, POSTED, READY, RESUME, UPDATED, Rates
from geryon.threshold.sim_result import SimResult
from geryon.threshold.trace import Span


class Replay(Rates):
    """Simulates a cluster's BSP iterations; `run()`, then `result()`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Cluster's arguments
        super().__init__(*args, **kwargs)
        self.events = 0
        self.spans: list[Span] = []
        # How connections pick and preempt their transfers (policy, hybrid's push order, TF's window).
        self.by_urgency = self.policy.by_urgency
        self.ready_seq = 0
        self.preempt = self.policy.preempts
        self.chunk = float(self.knobs.chunk_bytes) if self.policy.takes_chunk else None
        # hybrid with push_order="arrival": push connections send in ready order and never preempt.
        self.push_arrival = self.policy.takes_chunk and self.knobs.push_order == "arrival"
        self.push_whole = self.policy.takes_chunk and self.knobs.push_order == "whole"
        self.inflight = self.knobs.inflight if self.shared else None
        self.rng = random.Random(self.knobs.seed)
        # tf-verbs: a channel posts one tensor per ACK round trip, each at its flow's post_free or later.
        self.ack = self.knobs.verbs_ack_s if self.verbs else 0.0
        self.post_free: dict[int, float] = {}  # flow fid -> when its next request may be posted
        # end-host per sender: each sender's pending transfers (rank, shard, iteration, flow) and
        # the senders sending or in their gap.
        self.sender_q: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        self.sender_busy: set[tuple[int, int]] = set()
        self.saved: dict[tuple[int, int, int, int, int], float] = {}  # preempted transfers' bytes left
        self.ps_free = [0.0] * self.num_ps  # when each PS's serial update work is done

        # BSP state.
        n, W, L = len(self.s_bytes), self.sim_workers, self.L
        live, s_ps, s_layer, per_class = self.live, self.s_ps, self.s_layer, self.per_class
        iterations, colocate, barrier = self.iterations, self.colocate, self.barrier
        # Colocated pulls share links with pushes, so without the barrier the last iteration's pushes
        # meet the next iteration's pulls: those run too (no compute follows) to time it as in steady state.
        self.pull_rounds = iterations + (1 if colocate and not barrier else 0)
        # What each worker waits for per layer, and each shard's PS per iteration: one arrival per
        # transfer (a copy at home or a flow: one per worker and shard), where a group's stand-in gets a
        # shard both from its own PS (at home) and from the others of its group (one weighted flow).
        if self.groups is None:
            self.agg_need = [W] * n
            per_layer_all = [len(shards) for shards in self.layer_shards]
            self.pending = [per_layer_all * self.pull_rounds for _ in range(W)]
        else:
            need = [[0] * W for _ in range(n)]
            for j in live:
                ps = s_ps[j]
                for wk in range(W):
                    remote = (PULL, ps, wk, self.s_cls[j] if per_class else 0) in self.flows
                    need[j][wk] = self.is_local[ps][wk] + remote
            self.agg_need = [sum(row) for row in need]
            per_layer = [[0] * L for _ in range(W)]
            for j in live:
                for wk in range(W):
                    per_layer[wk][s_layer[j]] += need[j][wk]
            self.pending = [per_layer[wk] * self.pull_rounds for wk in range(W)]
        self.op = [0] * W  # next GPU op: iteration * 2L + position (forward 0..L-1, then backward L-1..0)
        # A dataflow forward pass (after_mask): position k is the k-th forward a worker runs, the layer
        # picked when the GPU frees (_pick); these are the layers done this iteration and the one running.
        self.fwd_done = [0] * W
        self.running = [0] * W
        self.busy = [False] * W
        self.op_start = [0.0] * W
        self.agg = [[0] * n for _ in range(iterations)]
        self.agg_left = [len(live)] * iterations
        self.bwd_left = [W] * iterations
        self.iteration_end = [0.0] * iterations

    def run(self) -> None:
        self._start()
        self._settle(0.0)
        heap = self.heap
        dirty = self.dirty
        t = 0.0
        while heap:
            t, _, kind, what, version = heapq.heappop(heap)
            self._handle(t, kind, what, version)
            # Everything that happens at t first, then one re-allocation per group.
            if (dirty[0] or dirty[1]) and (not heap or heap[0][0] != t):
                self._settle(t)
        self._finish(t)

    # run() in three steps, so that sim_jobs can drive several replays off one clock and one allocation.
    def _start(self) -> None:
        """Time 0: background flows on, the first pulls out, every worker's first op tried (no settle)."""
        for flow in self.bg_flows:
            self._join(flow)
            self.dirty[flow.group] = True
        self._release_pulls(self.by_rank, 0, 0.0)
        for wk in range(self.sim_workers):
            self._try_start(wk, 0.0)

    def _handle(self, t: float, kind: int, what: Any, version: int) -> None:
        """One event popped off the heap at time t."""
        if kind == COMPUTE_DONE:
            self._compute_done(what, t)
            self.events += 1
        elif kind == RESUME:
            if self.sender_serial:
                self._sender_next(what, t)
            else:
                self._resume(what, t)
        elif kind == UPDATED:
            self._updated(what[0], what[1], t)
        elif kind == READY:
            self._enqueue(what[0], what[1], what[2], t)
        elif kind == POSTED:
            self._enqueue(what[0], what[1], what[2], t, posted=True)
        elif version == what.version:  # else a finish that a later rate change made void
            self._flow_done(what, t)
            self.events += 1

    def _finish(self, t: float) -> None:
        """After the last event (at t): background bytes counted, and a check that every iteration ended."""
        for flow in self.bg_flows:
            self._advance(flow, t)  # background bytes up to the last event, however few re-allocations
        unfinished = [i for i in range(self.iterations) if self.agg_left[i] or self.bwd_left[i]]
        if unfinished:
            raise RuntimeError(f"simulator stalled before iteration {unfinished[0]} finished (a bug)")

    def _try_start(self, wk: int, t: float) -> None:
        if self.busy[wk]:
            return
        op = self.op[wk]
        L2 = 2 * self.L
        it, pos = divmod(op, L2)
        if it >= self.iterations:
            return
        if pos < self.L:
            if self.after_mask is not None:
                layer = self._pick(wk, it)
                if layer < 0:
                    return  # every layer it may run waits for parameters; an arrival tries again
                self.running[wk] = layer
                duration = self.fwd[layer]
            elif self.pending[wk][it * self.L + pos]:
                return  # waits for its parameters; the last pull to arrive starts it
            else:
                duration = self.fwd[pos]
        else:
            duration = self.bwd[L2 - 1 - pos]
        self.busy[wk] = True
        self.op_start[wk] = t
        self._at(t + duration, COMPUTE_DONE, wk)

    def _pick(self, wk: int, it: int) -> int:
        """The first layer (in profile order) worker wk may start now: its predecessors' forwards done,
        its parameters in; -1 if none. One op at a time per worker, as on one GPU stream."""
        done = self.fwd_done[wk]
        pending = self.pending[wk]
        base = it * self.L
        assert self.after_mask is not None
        for layer, mask in enumerate(self.after_mask):
            if not (done >> layer) & 1 and not mask & ~done and not pending[base + layer]:
                return layer
        return -1

    def _compute_done(self, wk: int, t: float) -> None:
        op = self.op[wk]
        L = self.L
        it, pos = divmod(op, 2 * L)
        if pos >= L:
            layer = 2 * L - 1 - pos
        elif self.after_mask is None:
            layer = pos
        else:
            layer = self.running[wk]
            # The last forward resets the mask for the next iteration's.
            self.fwd_done[wk] = 0 if pos == L - 1 else self.fwd_done[wk] | (1 << layer)
        if self.trace:
            kind = "forward" if pos < L else "backward"
            self.spans.append(
                Span(
                    self.host_names[wk],
                    "gpu",
                    f"{kind} {self.profile.layers[layer].name}",
                    kind,
                    self.op_start[wk],
                    t,
                    {"iteration": it, "layer": layer, "worker": wk},
                )
            )
        self.busy[wk] = False
        self.op[wk] = op + 1
        if pos >= L:
            for j in self._request_order(self.layer_shards[layer]):
                self._send(PUSH, j, it, wk, t)
            if layer == 0:
                self.bwd_left[it] -= 1
                self._maybe_end(it, t)
        self._try_start(wk, t)

    def _send(self, side: int, j: int, it: int, wk: int, t: float) -> None:
        """Starts worker wk's pull or push of shard j; between a worker and its host's PS it is done now."""
        ps = self.s_ps[j]
        if self.is_local[ps][wk]:
            # A copy in host memory, free next to the network (its cost is taken as 0).
            self._arrived(side, j, it, wk, t)
        key = (side, ps, wk, self.s_cls[j] if self.per_class else 0)
        if key in self.flows:  # with groups, a stand-in also gets its group's others' copies
            flow = self.flows[key]
            if self.delayed and self.send_delay[j] > 0:
                self._at(t + self.send_delay[j], READY, (flow, j, it))  # per-message work first
            else:
                self._enqueue(flow, j, it, t)

    def _maybe_end(self, it: int, t: float) -> None:
        if not self.agg_left[it] and not self.bwd_left[it]:
            self.iteration_end[it] = t

    def _release_pulls(self, shards: Sequence[int], it: int, t: float) -> None:
        # tf-verbs: each worker's requests in an order of its own. The other transports keep the
        # shard-major loop below, so their events (and results) stay as they were, bit for bit.
        if self.verbs and len(shards) > 1:
            for wk in range(self.sim_workers):
                for j in self._request_order(shards):
                    self._send(PULL, j, it, wk, t)
            return
        for j in shards:
            for wk in range(self.sim_workers):
                self._send(PULL, j, it, wk, t)

    def _request_order(self, shards: Sequence[int]) -> Sequence[int]:
        """tf-verbs: transfers that become ready at once are posted in the order their requests came,
        which TensorFlow's executor issues in no fixed order (a seeded shuffle); else as given."""
        if not self.verbs or len(shards) < 2:
            return shards
        order = list(shards)
        self.rng.shuffle(order)
        return order

    def _flow_done(self, flow: Flow, t: float) -> None:
        self._advance(flow, t)
        if flow.shared:
            _, j, it = heapq.heappop(flow.members)
            if flow.queue:  # a TF channel's window: the next transfer, in random order, takes the slot
                _, nj, nit = heapq.heappop(flow.queue)
                heapq.heappush(flow.members, (flow.served + self.s_bytes[nj], nj, nit))
                self._note_start(flow, (nj, nit), t)
            if flow.members:
                self._schedule(flow, t)  # same rate, one member fewer to share it
            else:
                self._idle(flow)
        else:
            assert flow.head is not None
            j, it = flow.head
            if flow.cut is not None:
                # hybrid: a chunk boundary with a more urgent transfer waiting; the head steps back.
                self._switch_now(flow, j, it, t)
                return
            if self.sender_serial:
                flow.head = None
                self._idle(flow)
                key = (flow.side, flow.src)
                if self.sender_q.get(key):
                    self._at(t + self.gap, RESUME, key)  # the sender's next transfer, after the gap
                else:
                    self.sender_busy.discard(key)
            elif self.gap > 0:
                flow.head = None
                if self._quiet_rate(flow, flow.level_up, flow.level_down) is None:
                    self._idle(flow)
                else:  # its leaving changes no other rate: no re-allocation (see _quiet_rate)
                    self.port_used[flow.up] -= flow.rate
                    self.port_used[flow.down] -= flow.rate
                    flow.rate = 0.0
                    flow.version += 1
                    self._leave(flow)
                if flow.queue:
                    self._pause(flow, t)
            else:
                self._next_head(flow, t)
        if self.trace:
            self.spans.append(
                Span(
                    self.host_names[flow.src],
                    flow.tid,
                    self.s_name[j],
                    "pull" if flow.side == PULL else "push",
                    flow.starts.pop((j, it)),
                    t,
                    {
                        "iteration": it,
                        "bytes": self.s_bytes[j],
                        "class": self.s_cls[j],
                        "layer": self.s_layer[j],
                        "param": self.s_param[j],
                        "worker": flow.dst if flow.side == PULL else flow.src,
                    },
                )
            )
        self._arrived(flow.side, j, it, flow.dst if flow.side == PULL else flow.src, t)

    def _arrived(self, side: int, j: int, it: int, wk: int, t: float) -> None:
        """Worker wk's pull or push of shard j in iteration it has arrived at time t."""
        if side == PULL:
            index = it * self.L + self.s_layer[j]
            self.pending[wk][index] -= 1
            if not self.pending[wk][index]:
                op = self.op[wk]
                if self.after_mask is None:
                    if op == it * 2 * self.L + self.s_layer[j]:
                        self._try_start(wk, t)
                elif it * 2 * self.L <= op < it * 2 * self.L + self.L:
                    self._try_start(wk, t)  # busy or not: _try_start checks
        else:
            self.agg[it][j] += 1
            if self.agg[it][j] == self.agg_need[j]:
                cost = self.update_s[j]
                if cost > 0:
                    # The PS updates one shard at a time, in the order their last gradients arrived.
                    ps = self.s_ps[j]
                    done = max(t, self.ps_free[ps]) + cost
                    self.ps_free[ps] = done
                    self._at(done, UPDATED, (j, it))
                else:
                    self._updated(j, it, t)

    def _updated(self, j: int, it: int, t: float) -> None:
        """Shard j of iteration it is aggregated and updated on its PS: the next pull may start."""
        self.agg_left[it] -= 1
        if it + 1 < self.pull_rounds:
            if not self.barrier:
                self._release_pulls((j,), it + 1, t)
            elif not self.agg_left[it]:
                self._release_pulls(self.by_rank, it + 1, t)
        self._maybe_end(it, t)

    def _levels(self, flow: Flow, j: int) -> tuple[int | None, int | None, int | None]:
        """(level at the NIC, level at the switch port, order within the sending process at the NIC)."""
        # process_order and nic_order are hybrid's (sender_order); they refine its class levels.
        if self.class_nic and not (self.push_arrival and flow.side == PUSH):
            if self.process_order:
                # The data plane: each process's writers send its most urgent chunk of the class,
                # whatever the connection; the NIC's qdisc and the switch see the class only.
                return self.s_cls[j], self.s_cls[j], self.s_rank[j]
            if self.nic_order:
                # A send scheduler per host: its most urgent chunk of any process first (which also
                # serves classes in priority order); the switch knows only the class.
                return self.s_rank[j], self.s_cls[j], None
        # Otherwise each port sees what the mode's policy says: nothing, the class or the rank
        # (hybrid inside a connection only, the data plane's per-socket queue: the class).
        nic, switch = self.nic_levels, self.switch_levels
        return (None if nic is None else nic[j]), (None if switch is None else switch[j]), None

    def _activate(self, flow: Flow, j: int, t: float) -> None:
        flow.rate = 0.0
        flow.last_t = t
        flow.stale = True
        flow.level_up, flow.level_down, flow.order_up = self._levels(flow, j)
        self._join(flow)
        self.dirty[flow.group] = True

    def _idle(self, flow: Flow) -> None:
        flow.rate = 0.0
        flow.served = 0.0
        flow.version += 1
        self._leave(flow)
        self.dirty[flow.group] = True

    def _note_start(self, flow: Flow, key: tuple[int, int], t: float) -> None:
        if self.trace:
            if flow.rate > 0:
                flow.starts[key] = t
            else:
                flow.waiting.append(key)

    def _set_head(self, flow: Flow, j: int, it: int, t: float, remaining: float) -> None:
        flow.head = (j, it)
        flow.remaining = remaining
        flow.last_t = t
        if (j, it) not in flow.starts:
            self._note_start(flow, (j, it), t)
        levels = self._levels(flow, j)
        if not flow.stale and levels == (flow.level_up, flow.level_down, flow.order_up):
            self._schedule(flow, t)  # same levels, same rates: only this flow's finish moves
        else:
            flow.level_up, flow.level_down, flow.order_up = levels
            flow.stale = True
            self.dirty[flow.group] = True
            if self.memo is not None:
                self.touched.append(flow)

    def _next_head(self, flow: Flow, t: float) -> None:
        if not flow.queue:
            flow.head = None
            self._idle(flow)
            return
        _, j, it = heapq.heappop(flow.queue)
        self._set_head(
            flow, j, it, t, self.saved.pop((flow.side, flow.src, flow.dst, j, it), self.s_bytes[j])
        )

    def _pause(self, flow: Flow, t: float) -> None:
        """end-host: the connection waits out the per-transfer gap before its next transfer."""
        flow.paused = True
        self._at(t + self.gap, RESUME, flow)

    def _resume(self, flow: Flow, t: float) -> None:
        flow.paused = False
        _, j, it = heapq.heappop(flow.queue)
        levels = self._levels(flow, j)  # end-host: no order within a process
        rate = self._quiet_rate(flow, levels[0], levels[1])
        if rate is None:
            self._activate(flow, j, t)
        else:  # its joining changes no other rate: it takes its own at once (see _quiet_rate)
            flow.level_up, flow.level_down, flow.order_up = levels
            flow.rate = rate
            flow.last_t = t
            flow.stale = False
            self._join(flow)
            self.port_used[flow.up] = self.port_used.get(flow.up, 0.0) + rate
            self.port_used[flow.down] = self.port_used.get(flow.down, 0.0) + rate
        left = self.saved.pop((flow.side, flow.src, flow.dst, j, it), self.s_bytes[j])
        self._set_head(flow, j, it, t, left)

    def _sender_next(self, key: tuple[int, int], t: float) -> None:
        """end-host per sender: after its gap the sender starts its most urgent pending transfer."""
        _, j, it, fid = heapq.heappop(self.sender_q[key])
        flow = self.flow_list[fid]  # idle: its sender sends one transfer at a time
        self._activate(flow, j, t)
        self._set_head(flow, j, it, t, self.s_bytes[j])

    def _enqueue(self, flow: Flow, j: int, it: int, t: float, posted: bool = False) -> None:
        if self.ack > 0 and not posted:
            # tf-verbs: one control message in flight per channel, so its requests come one ACK round
            # trip apart; a tensor is posted once its request is in (and it is ready).
            post = max(t, self.post_free.get(flow.fid, 0.0))
            self.post_free[flow.fid] = post + self.ack
            if post > t:
                self._at(post, POSTED, (flow, j, it))
                return
        if flow.shared:
            if not flow.members:
                self._activate(flow, j, t)
                inflight = self.inflight
                if inflight is not None:
                    low = math.floor(inflight)
                    flow.window = low + (self.rng.random() < inflight - low)
            elif len(flow.members) >= flow.window:
                heapq.heappush(flow.queue, (self.rng.random(), j, it))  # TF: a random order
                return
            else:
                self._advance(flow, t)
            heapq.heappush(flow.members, (flow.served + self.s_bytes[j], j, it))
            self._note_start(flow, (j, it), t)
            if not flow.stale:
                self._schedule(flow, t)  # same rate, one more member to share it
            return
        if self.sender_serial:
            key = (flow.side, flow.src)
            heapq.heappush(self.sender_q.setdefault(key, []), (self.s_rank[j], j, it, flow.fid))
            if key not in self.sender_busy:
                self.sender_busy.add(key)
                self._at(t + self.gap, RESUME, key)
            return
        if flow.head is None:
            if self.gap > 0:
                heapq.heappush(flow.queue, (self.s_rank[j], j, it))
                if not flow.paused:
                    self._pause(flow, t)
                return
            self._activate(flow, j, t)
            self._set_head(flow, j, it, t, self.s_bytes[j])
            return
        if self.push_arrival and flow.side == PUSH:
            heapq.heappush(flow.queue, (self._ready(), j, it))
            return
        if self.push_whole and flow.side == PUSH:
            heapq.heappush(flow.queue, (self.s_rank[j], j, it))  # urgency order, a started push finishes
            return
        head_j, head_it = flow.head
        if self.chunk is not None and self.s_rank[j] < self.s_rank[head_j]:
            heapq.heappush(flow.queue, (self.s_rank[j], j, it))
            if flow.cut is None:
                self._cut_at_chunk(flow, head_j, head_it, t)
            return
        if self.preempt and self.s_rank[j] < self.s_rank[head_j]:
            # ideal: a more urgent transfer takes the connection; the head keeps the bytes it has left.
            self._advance(flow, t)
            self.saved[(flow.side, flow.src, flow.dst, head_j, head_it)] = flow.remaining
            heapq.heappush(flow.queue, (self.s_rank[head_j], head_j, head_it))
            if (head_j, head_it) in flow.waiting:
                flow.waiting.remove((head_j, head_it))
            self._set_head(flow, j, it, t, self.s_bytes[j])
            return
        heapq.heappush(flow.queue, (self.s_rank[j] if self.by_urgency else self._ready(), j, it))

    def _cut_at_chunk(self, flow: Flow, head_j: int, head_it: int, t: float) -> None:
        """hybrid: the head stops at its next chunk boundary, where the queue's most urgent takes over."""
        self._advance(flow, t)
        chunk = self.chunk
        assert chunk is not None
        sent = self.s_bytes[head_j] - flow.remaining
        to_boundary = -sent % chunk
        if to_boundary >= flow.remaining:
            return  # the head ends before (or at) its next boundary: it goes first anyway
        if to_boundary <= 1e-9 * chunk or chunk - to_boundary <= 1e-9 * chunk:
            to_boundary = 0.0  # exactly at a boundary (up to rounding): switch now
        flow.cut = flow.remaining - to_boundary
        flow.remaining = to_boundary
        if to_boundary == 0.0:
            self._switch_now(flow, head_j, head_it, t)
        elif not flow.stale:
            self._schedule(flow, t)

    def _switch_now(self, flow: Flow, head_j: int, head_it: int, t: float) -> None:
        assert flow.cut is not None
        self.saved[(flow.side, flow.src, flow.dst, head_j, head_it)] = flow.cut
        flow.cut = None
        heapq.heappush(flow.queue, (self.s_rank[head_j], head_j, head_it))
        if (head_j, head_it) in flow.waiting:
            flow.waiting.remove((head_j, head_it))
        self._next_head(flow, t)

    def _ready(self) -> int:
        """Ready order for connections that send one transfer at a time in arrival order."""
        self.ready_seq += 1
        return self.ready_seq

    def result(self, wall_s: float) -> SimResult:
        ends = tuple(self.iteration_end)
        first = ends[0]
        steady = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else first
        compute = self.profile.compute_s
        bps = self.bandwidth_bps
        total = sum(self.s_bytes)
        per_ps = [0.0] * self.num_ps
        for j, b in enumerate(self.s_bytes):
            per_ps[self.s_ps[j]] += b
        if self.colocate:
            # Pulls: host h sends its PS's bytes to the W - 1 other workers and receives the rest of
            # the model; pushes the other way round. Bytes between a worker and its own PS stay home.
            held = per_ps + [0.0] * (self.workers - self.num_ps)
            busiest = max(max((self.workers - 1) * b, total - b) for b in held)
        else:
            # A worker's pulls, then its pushes, each limited by its own port or the busiest PS port.
            busiest = max(total, self.workers * max(per_ps))
        comm = 2 * busiest * 8.0 / bps
        W = self.sim_workers
        link_bytes: dict[str, float] = {}
        for h, name in enumerate(self.port_names):
            scale = self.workers if (self.symmetric and h >= W) else 1
            # A group's hosts each move what its stand-in moves (the symmetry that made it one).
            names = [f"host{g}" for g in self.groups[h]] if self.groups is not None else [name]
            for each in names:
                link_bytes[f"{each}.nic"] = self.link_moved[2 * h] * scale
                link_bytes[f"switch->{each}"] = self.link_moved[2 * h + 1] * scale
        background_bytes: dict[str, float] = {}
        for key, index, scale in self.bg_ports:
            background_bytes[key] = background_bytes.get(key, 0.0) + self.link_moved[index] * scale
        return SimResult(
            mode=self.policy.name,
            workers=self.workers,
            num_ps=self.num_ps,
            bandwidth_bps=bps,
            thresholds=self.thresholds,
            slice_bytes=self.slice_bytes,
            iterations=self.iterations,
            iteration_s=steady,
            first_iteration_s=first,
            gpu_utilization=min(1.0, compute / steady) if steady > 0 else 1.0,
            alpha=overlap_coefficient(comm, compute, steady),
            comm_s=comm,
            compute_s=compute,
            iteration_ends=ends,
            shards=len(self.s_bytes),
            link_bytes=link_bytes,
            events=self.events,
            wall_s=wall_s,
            symmetric=self.symmetric,
            partition=self.partition,
            interleave=self.interleave,
            barrier=self.barrier,
            colocate=self.colocate,
            cohost_fast=self.fast,
            simulated_workers=W,
            chunk_bytes=self.knobs.chunk_bytes,
            endhost_gap_s=self.knobs.endhost_gap_s,
            inflight=self.knobs.inflight,
            seed=self.knobs.seed,
            ps_costs=self.knobs.ps_costs,
            background=self.knobs.background,
            incast=self.knobs.incast,
            transport=self.knobs.transport,
            verbs_ack_s=self.knobs.verbs_ack_s,
            background_bytes=background_bytes,
            push_order=self.knobs.push_order,
            sender_order=self.knobs.sender_order,
            endhost_scope=self.knobs.endhost_scope,
            spans=tuple(self.spans) if self.trace else None,
            bound=lower_bound(
                self.s_bytes,
                self.s_ps,
                workers=self.workers,
                num_ps=self.num_ps,
                colocate=self.colocate,
                bandwidth_bps=bps,
                compute_s=compute,
            ),
        )
