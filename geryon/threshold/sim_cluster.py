"""What a replay runs on, fixed for the run: the shards, hosts, ports and connections (`Cluster`).

The shards come from the tagger's partition plan; the hosts and ports from the cluster's shape
(separate hosts, one representative worker, co-hosted groups or cohost_fast's two stand-ins); the
connections from the mode's policy (one per pair, or per pair and class). `geryon.threshold.sim_rates`
adds the moving rates, `geryon.threshold.sim_replay` the BSP iterations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geryon.tagger.map_table import class_of
from geryon.tagger.partition import plan_partitions
from geryon.threshold.profile import Profile
from geryon.threshold.sim_flows import PULL, PUSH, Flow
from geryon.threshold.sim_modes import ModePolicy
from geryon.threshold.simknobs import (
    ENDHOST_SCOPES,
    PUSH_ORDER_DEFAULT,
    SENDER_ORDERS,
    TRANSPORTS,
    VERBS_ACK_S,
    Background,
    Incast,
    PsCosts,
)


@dataclass(frozen=True)
class Knobs:
    """The cost and traffic knobs `simulate` checked (see geryon.threshold.simknobs)."""

    chunk_bytes: int
    endhost_gap_s: float
    inflight: float | None
    seed: int
    ps_costs: PsCosts
    background: tuple[Background, ...]
    cohost_fast: bool = False
    push_order: str = PUSH_ORDER_DEFAULT
    sender_order: str = SENDER_ORDERS[0]
    endhost_scope: str = ENDHOST_SCOPES[0]
    incast: Incast = field(default_factory=Incast)
    transport: str = TRANSPORTS[0]
    verbs_ack_s: float = VERBS_ACK_S


class Cluster:
    """The shards, hosts, ports and connections of one run (see the module docstring)."""

    def __init__(
        self,
        profile: Profile,
        workers: int,
        num_ps: int,
        bandwidth_bps: float,
        policy: ModePolicy,
        thresholds: tuple[float, ...],
        slice_bytes: int | None,
        iterations: int,
        trace: bool,
        barrier: bool,
        symmetric: bool,
        partition: bool,
        interleave: bool,
        colocate: bool,
        knobs: Knobs,
    ) -> None:
        self.profile = profile
        self.knobs = knobs
        self.workers = workers
        self.num_ps = num_ps
        self.bandwidth_bps = bandwidth_bps
        self.policy = policy
        self.thresholds = thresholds
        self.slice_bytes = slice_bytes
        self.iterations = iterations
        self.trace = trace
        self.barrier = barrier
        # Colocated workers differ (each has its own PS's shards at hand): no representative one.
        # cohost_fast: a mean-field stand-in for large co-hosted clusters (see _cohost_fast_hosts).
        self.fast = colocate and knobs.cohost_fast
        # end-host per sender: a PS sends to one worker after another, so workers differ.
        self.sender_serial = policy.takes_gap and knobs.endhost_scope == "sender"
        symmetric = symmetric and not self.sender_serial
        self.symmetric = (symmetric and not colocate) or self.fast
        self.partition = partition
        self.interleave = interleave
        self.colocate = colocate

        # Shards, from the tagger's plan, with each one's class and its place in the urgency order.
        specs = [(q.name, q.shape, q.element_size) for q in profile.params]
        plan = plan_partitions(specs, num_ps if partition else 1, slice_bytes)
        s_bytes: list[float] = []
        s_ps: list[int] = []
        s_layer: list[int] = []
        s_cls: list[int] = []
        s_name: list[str] = []
        s_param: list[str] = []  # the parameter each shard is a piece of (trace args)
        urg: list[float] = []
        s_sliced: list[bool] = []  # one of several slices of its parameter (per_slice_s applies)
        for param, shards in zip(profile.params, plan.params, strict=True):
            cls = class_of(param.urgency, thresholds)
            for shard in shards:
                s_sliced.append(len(shards) > 1)
                s_bytes.append(float(shard.bytes))
                # Without partitioning the strategy's round-robin counter spreads whole pieces over PSes.
                s_ps.append(shard.ps_task if partition else len(s_ps) % num_ps)
                s_layer.append(param.layer)
                s_cls.append(cls)
                s_name.append(shard.name)
                s_param.append(param.name)
                urg.append(param.urgency)
        n = len(s_bytes)
        self.s_bytes, self.s_ps, self.s_layer, self.s_cls, self.s_name = s_bytes, s_ps, s_layer, s_cls, s_name
        self.s_param = s_param
        # Co-hosted hosts whose PSes hold alike shards are interchangeable: one stands for its group
        # (see _cohost_groups). None: every host is simulated.
        self.groups: list[list[int]] | None = None
        if colocate and symmetric and not self.fast:
            self.groups = self._cohost_groups(trace)
            self.symmetric = self.groups is not None
        if self.fast:
            self.sim_workers = 2 if workers > num_ps else 1  # a co-hosted host, then a worker-only host
        elif self.groups is not None:
            self.sim_workers = len(self.groups)
        else:
            self.sim_workers = 1 if self.symmetric else workers
        self.weighted = self.fast or self.groups is not None  # flows with per-port weights
        # The shards simulated: all, or with groups only those of each group's first PS (the others'
        # move the same way, by symmetry).
        reps: set[int] = set()
        if self.groups is None:
            live = list(range(n))
        else:
            reps = {g[0] for g in self.groups if g[0] < num_ps}
            live = [j for j in range(n) if s_ps[j] in reps]
        self.live = live
        costs = knobs.ps_costs
        self.send_delay = [costs.per_slice_s if sl else costs.per_message_s for sl in s_sliced]
        self.delayed = any(d > 0 for d in self.send_delay)
        # A shard's update work on its PS once all its gradients are in (0: the PS is free).
        per_byte = workers * costs.aggregate_s_per_byte + costs.update_s_per_byte
        self.update_s = [b * per_byte for b in s_bytes]
        # Urgency order: most urgent first, then earlier layer; equal keys share a rank (and a level).
        keys = sorted({(-urg[j], s_layer[j]) for j in range(n)})
        rank_of = {k: r for r, k in enumerate(keys)}
        self.s_rank = [rank_of[(-urg[j], s_layer[j])] for j in range(n)]
        self.by_rank = sorted(live, key=lambda j: (self.s_rank[j], j))
        L = profile.num_layers
        self.L = L
        self.layer_shards: list[list[int]] = [[] for _ in range(L)]
        for j in self.by_rank:
            self.layer_shards[s_layer[j]].append(j)
        self.fwd = [layer.forward_s for layer in profile.layers]
        self.bwd = [layer.backward_s for layer in profile.layers]
        # A dataflow profile (geryon.threshold.forward_dag): per layer, the mask of layers its forward waits
        # for; None: the chain, forward in layer order.
        self.after_mask: list[int] | None = None
        if profile.is_dag:
            self.after_mask = [sum(1 << a for a in set(layer.after or ())) for layer in profile.layers]

        # Hosts: simulated workers first, then PSes; ports 2h (NIC egress) and 2h+1 (switch egress to h).
        # Colocated, host h holds worker h and (for h < P) PS h, so PS k's ports are worker k's.
        W = self.sim_workers
        cap = bandwidth_bps / 8.0
        self.w_up: dict[tuple[int, int], float] = {}  # (side, worker) -> port weight, fast path only
        self.w_down: dict[tuple[int, int], float] = {}
        if self.fast:
            self._cohost_fast_hosts(cap)
        elif self.groups is not None:
            groups = self.groups
            self.ps_host = [0] * num_ps
            for r, g in enumerate(groups):
                for h in g:
                    if h < num_ps:
                        self.ps_host[h] = r
            self.capacity = [cap] * (2 * W)
            self.port_names = [f"host{g[0]}" for g in groups]
            self.host_names = [
                f"host{g[0]} (worker{g[0]}" + (f"+ps{g[0]}" if g[0] < num_ps else "") + f", for {len(g)})"
                for g in groups
            ]
        elif colocate:
            self.ps_host = list(range(num_ps))
            self.capacity = [cap] * (2 * W)
            self.port_names = [f"host{h}" for h in range(W)]
            self.host_names = [f"host{h} (worker{h}" + (f"+ps{h})" if h < num_ps else ")") for h in range(W)]
        else:
            self.ps_host = [W + k for k in range(num_ps)]
            # A representative worker sees 1/W of every PS link: the other workers take the rest, equally.
            ps_cap = cap / workers if self.symmetric else cap
            self.capacity = [cap] * (2 * W) + [ps_cap] * (2 * num_ps)
            self.port_names = [f"worker{i}" for i in range(W)] + [f"ps{i}" for i in range(num_ps)]
            self.host_names = self.port_names
        self.link_moved = [0.0] * len(self.capacity)
        # Transfers between a worker and a PS on its own host never touch the network (see _send).
        self.is_local = [
            [self.ps_host[ps] == wk and not self.fast for wk in range(W)] for ps in range(num_ps)
        ]
        if self.groups is not None:
            size = [len(g) for g in self.groups]
            for ps in range(num_ps):
                if ps not in reps:
                    self.is_local[ps] = [False] * W  # a stand-in's PS: its shards are not simulated
        if self.fast and num_ps == 1:
            self.is_local[0][0] = True  # the co-hosted worker's only PS is its own

        # fifo and network connections interleave their transfers (a TF gRPC channel), or send them in
        # ready order; on tf-verbs in posting order, one request per ACK round trip (simknobs).
        self.verbs = policy.interleaves and knobs.transport == "tf-verbs"
        self.shared = policy.shares(interleave) and not self.verbs
        # hybrid's urgency order across connections: per sending process ("host") or per NIC ("nic").
        self.process_order = policy.takes_chunk and knobs.sender_order == "host"
        self.nic_order = policy.takes_chunk and knobs.sender_order == "nic"
        self.gap = knobs.endhost_gap_s if policy.takes_gap else 0.0
        # Each shard's level at a NIC and at a switch port, as the policy orders them (None: no order).
        by_priority = {None: None, "class": self.s_cls, "rank": self.s_rank}
        self.nic_levels = by_priority[policy.nic_priority]
        self.switch_levels = by_priority[policy.switch_priority]
        self.class_nic = policy.nic_priority == "class"
        # One connection per pair, or per pair and class.
        self.per_class = per_class = policy.per_class
        self.flows: dict[tuple[int, int, int, int], Flow] = {}
        self.flow_list: list[Flow] = []
        for side in (PULL, PUSH):
            for ps in range(num_ps):
                if self.groups is not None and ps not in reps:
                    continue
                for wk in range(W):
                    weights = (1.0, 1.0)
                    if self.groups is not None:
                        # Group A's worker and group B's PS: every real PS of B sends (or receives)
                        # to |A| workers, every real worker of A from |B| PSes; inside one group each
                        # host talks to the |A| - 1 others (and to its own PS at home).
                        a, b = size[wk], size[self.ps_host[ps]]
                        if self.ps_host[ps] == wk:
                            if a == 1:
                                continue
                            weights = (a - 1.0, a - 1.0)
                        else:
                            weights = (float(a), float(b)) if side == PULL else (float(b), float(a))
                    elif self.is_local[ps][wk]:
                        continue  # same host: the transfer never touches the network (see _send)
                    src, dst = (self.ps_host[ps], wk) if side == PULL else (wk, self.ps_host[ps])
                    up, down = 2 * src, 2 * dst + 1
                    if self.fast and wk == 1:
                        # The worker-only host's own NIC (pushes) or port (pulls), and host 0's as the mirror.
                        up, down = (0, 3) if side == PULL else (2, 1)
                    for cls in range(len(thresholds) + 1) if per_class else (0,):
                        to = f"worker{wk}" if side == PULL else f"ps{ps}"
                        tid = f"to {to}" + (f" class {cls}" if per_class else "")
                        flow = Flow(side, 0 if colocate else side, src, dst, up, down, tid, self.shared)
                        if self.fast:
                            flow.wu = self.w_up[(side, wk)]
                            flow.wd = self.w_down[(side, wk)]
                        else:
                            flow.wu, flow.wd = weights
                        flow.fid = len(self.flow_list)
                        self.flow_list.append(flow)
                        self.flows[(side, ps, wk, cls)] = flow
        self._add_background(knobs.background, len(thresholds) + 1 if per_class else None, len(keys), cap)

    def _cohost_groups(self, trace: bool) -> list[list[int]] | None:
        """Co-hosted hosts that are interchangeable, in groups (first host first), or None.

        Every worker pulls and pushes every shard, so two hosts differ only in what their PS holds:
        hosts whose PSes hold the same pieces of the same parameters, in the same order, can swap
        places without changing the cluster, and the worker-only hosts can always. A deterministic
        replay of a cluster that a swap leaves unchanged gives both hosts the same schedule (the
        max-min allocation is unique, so it is symmetric too), so one host per group is simulated and
        its flows weigh on the ports as many times as the group's hosts send or receive them (see the
        flow set-up in __init__). Exact, not an approximation; tests/threshold/test_simulator_knobs.py
        compares it with every host simulated. With a TF channel window (`inflight`) it is an
        approximation: each connection draws a random order, and a stand-in's one draw stands for
        each of its group's hosts drawing its own; bench_simulator.py --cohost-window measures its
        error against every host over seeds (issue 38 item 1 asks for 1%; 2026-12-03: up to 2.2%
        over 10 seeds, bench/results), and `symmetric=False` simulates every host. The same holds for
        tf-verbs' random request order among transfers ready at once. Not used (None)
        where it saves nothing or cannot apply: a trace shows every host's timeline; no two hosts
        alike."""
        if trace:
            return None
        P, W = self.num_ps, self.workers
        held: list[list[tuple[str, float]]] = [[] for _ in range(P)]
        for j, ps in enumerate(self.s_ps):
            held[ps].append((self.s_param[j], self.s_bytes[j]))
        by_content: dict[tuple[tuple[str, float], ...], list[int]] = {}
        for k in range(P):
            by_content.setdefault(tuple(held[k]), []).append(k)
        groups = list(by_content.values())
        if W > P:
            groups.append(list(range(P, W)))
        return groups if len(groups) < W else None

    def _cohost_fast_hosts(self, cap: float) -> None:
        """cohost_fast: two simulated hosts stand for a co-hosted cluster of W hosts, the first P of
        them each holding a worker and a PS, the rest a worker only (the paper's testbed at scale).

        Host 0 is a co-hosted host; by symmetry every co-hosted host's NIC and switch port carry what
        host 0's carry, so a transfer from or to any PS uses host 0's ports as its mirror. Its worker
        pulls and pushes every shard, of which 1/P stays on its host on average: its flows use (P-1)/P
        of their rate on host 0's ports (PS 0's pulls to the P-1 other co-hosted workers mirror host 0's
        pulls from the P-1 other PSes, and the same for pushes). Host 1, when W > P, is a worker-only host
        standing for all m = W - P of them: its own NIC and port carry its own transfers (weight 1) and
        host 0's ports the mirror of PS 0's share of all m, m / P per unit of its rate. Exact only
        where PSes hold equal and alike shards (partitioned, many PSes); the every-worker path is the
        reference (bench_simulator.py sets the two side by side)."""
        P, W_all = self.num_ps, self.workers
        self.ps_host = [0] * P
        n = self.sim_workers
        self.capacity = [cap] * (2 * n)
        self.port_names = ["host0", f"host{P}"][:n]
        self.host_names = [f"host0 (worker+ps, for {P})", f"host{P} (worker, for {W_all - P})"][:n]
        share = (P - 1) / P
        mirror = (W_all - P) / P
        for side in (PULL, PUSH):
            self.w_up[(side, 0)] = self.w_down[(side, 0)] = share
        self.w_up[(PULL, 1)], self.w_down[(PULL, 1)] = mirror, 1.0
        self.w_up[(PUSH, 1)], self.w_down[(PUSH, 1)] = 1.0, mirror

    def _add_background(
        self, background: tuple[Background, ...], n_classes: int | None, n_ranks: int, cap: float
    ) -> None:
        """Permanent flows between a chosen host's port and a virtual port of the flow's rate."""
        self.bg_flows: list[Flow] = []
        # (link_bytes key, the virtual port's index in link_moved, scale): a virtual port carries its
        # flow only; scale as link_bytes' (a symmetric PS port stands for every worker's share).
        self.bg_ports: list[tuple[str, int, int]] = []
        if not background:
            return
        priority = self.policy.background_priority
        W = self.sim_workers
        worker_hosts = list(range(W))
        ps_hosts = list(self.ps_host)
        for b in background:
            level: int | None = None
            nic_level: int | None = None  # its level on a host's NIC (out), where it differs
            if priority == "class" and n_classes is not None:
                if b.queue == "lowest":
                    level = n_classes - 1  # in the least urgent training class's queue, shared fairly
                else:
                    level = n_classes  # below every training class
                    if self.nic_order:
                        nic_level = n_ranks  # the NIC orders by rank: below every training rank
            elif priority == "rank":
                level = n_ranks  # below every training rank
            hosts = {"workers": worker_hosts, "ps": ps_hosts, "all": worker_hosts + ps_hosts}[b.hosts]
            for h in dict.fromkeys(hosts):
                rate = b.rate_bps / 8.0
                if self.symmetric and h >= W:
                    rate /= self.workers  # a representative worker's share of a PS link
                is_ps = h >= W  # separate hosts: pulls leave PS NICs, pushes land on PS ports
                for direction in ("in", "out") if b.direction == "both" else (b.direction,):
                    virtual = len(self.capacity) // 2  # a host of its own: its NIC or port has the rate
                    self.capacity += [0.0, 0.0]
                    self.link_moved += [0.0, 0.0]
                    if direction == "in":
                        up, down = 2 * virtual, 2 * h + 1
                        group = 1 if is_ps else 0
                    else:
                        up, down = 2 * h, 2 * virtual + 1
                        group = 0 if is_ps else 1
                    self.capacity[up if direction == "in" else down] = rate
                    name = self.port_names[h]
                    scale = self.workers if (self.symmetric and h >= W) else 1
                    if direction == "in":
                        self.bg_ports.append((f"switch->{name}", up, scale))
                    else:
                        self.bg_ports.append((f"{name}.nic", down, scale))
                    flow = Flow(PULL, 0 if self.colocate else group, -1, -1, up, down, "background", False)
                    flow.bg = True
                    flow.fid = len(self.flow_list)  # the memo's index (see _settle_memo)
                    self.flow_list.append(flow)
                    flow.level_up = (
                        None if direction == "in" else (nic_level if nic_level is not None else level)
                    )
                    flow.level_down = level if direction == "in" else None
                    self.bg_flows.append(flow)
