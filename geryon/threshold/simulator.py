"""Replay simulator of a parameter-server cluster: BSP iterations over a star fabric with priority queues.

In the spirit of dPRO's replayer (paper 001): W identical workers and P parameter servers hang off one
switch; every host has a full-duplex link of `bandwidth_bps`, with an egress queue on its NIC and one
on the switch port towards it. Parameters are partitioned and sliced exactly as
`geryon.tagger.partition.plan_partitions` says, each shard on its PS task, each in the class its
parameter's urgency gets from the thresholds. Per iteration every worker pulls every shard (PS ->
worker); forward layer l starts once layer l-1 is done and the shards layer l consumes have arrived;
backward runs in reverse; after layer l's backward the worker pushes the gradient shards of layer l's
parameters (worker -> PS); a PS aggregates a shard once all W pushes arrived (aggregation time is
hidden, as in the paper), and the next iteration's pull of that shard starts then (or, with
`barrier=True`, once the whole iteration is aggregated, like TF's SyncReplicasOptimizer).

Transfers are fluid (see `geryon.threshold.network` for how ports share). Each sender-receiver pair
has one connection (per class in `network` mode); rates change only when a connection starts, stops
or changes level, which keeps the event count near two per transfer:

- fifo: one connection per pair whose pending transfers share it equally (the streams of one gRPC
  channel), or with `interleave=False` go one at a time in the order they became ready (an RDMA
  queue pair); every port shares fairly among connections.
- end-host (TicTac/P3-like): one connection per pair sending its most urgent pending transfer (class,
  then urgency, then layer; a started transfer finishes first); the sender's NIC serves its
  connections in that order, but switch ports share fairly among senders. With
  `endhost_scope="sender"` each sending process sends one transfer at a time, its most urgent of any
  connection.
- network (Geryon): one connection per pair and class, carrying its transfers like fifo does; every
  port (NIC and switch) serves classes in strict priority and shares fairly within a class.
- hybrid (Geryon with urgency order inside a class, issue 14): one connection per pair and class, as
  network; each connection sends its most urgent pending transfer in chunks of `chunk_bytes`, and a more
  urgent one that becomes ready takes over at the next chunk boundary (the preempted one keeps the bytes
  it has left). Pushes (by default, `push_order="whole"`, as the data plane sends them) go in urgency
  order but a started one is not preempted; with "urgency" they are preempted like pulls, with
  "arrival" they go in the order they became ready, without preemption. Every port, the sender's NIC
  too, serves classes in strict priority and shares fairly among the connections of a class. With
  `sender_order="host"` (the default, as the data plane's writers yield to a more urgent response of
  their class on any connection of the process) each sending process serves its most urgent chunk of
  any connection first; on a co-hosted NIC the worker's pushes and the PS's pulls keep one order each
  and share the NIC fairly within a class. `sender_order="nic"` orders every chunk the NIC sends, of
  every process, by urgency (a send scheduler per host); `"connection"` orders inside each connection
  only.
- ideal: one connection per pair sending its most urgent pending transfer (urgency, then layer; a
  more urgent arrival preempts); every port serves the most urgent transfer first. This is a perfect
  global priority order, not an optimal schedule: it can lose to end-host where the urgent-first
  order itself is not the best one (a PS link bottleneck, say).

Costs and other traffic (knobs in `geryon.threshold.simknobs`, each default cited there): an end-host
connection waits `endhost_gap_s` before each transfer (the scheduler's per-partition overhead and the
pipelining it loses by waiting for the previous transfer to finish); with `inflight` set, a fifo or network
connection (a TF gRPC channel) serves at most that many transfers at once (a mean: the window is drawn per
connection and busy period from its floor and ceiling) and takes the others in a seeded random order, as
TensorFlow's pulls arrive; `ps_costs` adds the PS's aggregation, update and per-message work;
`background` adds constant-rate flows, each bounded by a virtual port of its rate, in a class below all
training traffic on ports with priorities, or in the least urgent training class (`queue="lowest"`).

Identical workers in BSP see the same schedule, so by default (`symmetric=True`) one representative
worker is simulated against P PSes whose links carry 1/W of their bandwidth per worker: the symmetric
max-min allocation of the full cluster is exactly this. `symmetric=False` simulates every worker (slow,
for cross-checks); both give the same times.

`colocate=True` is the paper's testbed (Sec. V-A): PS i runs on worker i's host (so num_ps <= workers;
hosts i >= num_ps hold a worker only) and shares its one full-duplex link. A host's NIC then sends its
PS's pulls to the other workers and its worker's pushes to the other PSes; its switch port carries its
worker's pulls from the other PSes and the other workers' pushes to its PS. A transfer between a worker
and the PS on its own host is a memory copy, taken as free: it arrives the moment it starts, moves no
bytes on any port and has no span in the trace. Colocated workers are not all identical (each has
its own PS's shards at hand), but hosts whose PSes hold the same pieces of the same parameters are
interchangeable, and so are the hosts with a worker only: with `symmetric=True` one host per such
group is simulated, its flows weighing on the ports as often as the group's hosts send or receive
them (`_Replay._cohost_groups`). That is exact, not an approximation (tests/threshold/
test_simulator_cohost.py compares it with every host simulated, all modes and knobs, to 1e-9), and
the result says `symmetric=True`. Where it would not be exact (a TF channel window, `inflight`, draws
a random order per connection) or with `trace=True` (every host's timeline), every host is
simulated. 1024 hosts x 64 PSes of VGG-19 form 19 groups. Pulls and pushes share ports there, so
they are allocated together, and without the barrier the pulls of one more iteration run too (nothing
computes after them): the last iteration's pushes then share the links as they would in a longer run,
and `link_bytes` counts those pulls.
end-host's gaps re-allocate twice per transfer, and co-hosted hybrid's chunk switches change levels
often; for both a memo keyed by the active connections and their levels (and orders) returns the rates
of a state seen before (`_Replay._settle_memo`; exact, tested against allocating every time), and a
miss of many connections allocates on numpy arrays (`network.allocate_arrays`, equal to the bit).
Colocation is not simply slower: 1/W of the traffic stays home, and while workers pull, a colocated
link carries pulls both ways (its PS's out, its worker's in) where separate hosts use one direction of
each link per phase. It wins where pulls and pushes alternate (the barrier, or the first layer's
gradient pushed last) and loses where the next iteration's pulls overlap this one's pushes.
"""

from __future__ import annotations

import heapq
import math
import operator
import random
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from geryon.tagger.map_table import class_of, validate_thresholds
from geryon.tagger.partition import plan_partitions
from geryon.threshold.model import check_bandwidth, overlap_coefficient
from geryon.threshold.network import NO_LEVEL, allocate, allocate_arrays
from geryon.threshold.profile import Profile
from geryon.threshold.sim_modes import MODES, ModePolicy, mode_policy
from geryon.threshold.simknobs import (
    CHUNK_BYTES,
    ENDHOST_GAP_S,
    ENDHOST_SCOPES,
    PUSH_ORDER_DEFAULT,
    SENDER_ORDERS,
    Background,
    Incast,
    PsCosts,
    check_chunk,
    check_endhost_scope,
    check_inflight,
    check_push_order,
    check_seconds,
    check_sender_order,
)
from geryon.threshold.trace import Span, chrome_trace

__all__ = ["MODES", "SimResult", "simulate"]

PULL, PUSH = 0, 1
_FLOW_DONE, _COMPUTE_DONE, _RESUME, _UPDATED, _READY = 0, 1, 2, 3, 4
# _quiet_rate's headroom: a port this close to full counts as full (the allocation's own SATURATED is 1e-12).
_QUIET_MARGIN = 1e-9
# Allocations of at least this many flows run on numpy arrays (network.allocate_arrays): faster above it,
# slower below (numpy's cost per call); the rates are the same to the bit either way.
_ARRAY_FLOWS = 128


@dataclass(frozen=True)
class SimResult:
    """What a run predicts. Without the barrier, the pulls of the next iteration overlap the pushes
    of this one (full-duplex links), so T may drop below N, and alpha then reads 1 (clamped)."""

    mode: str
    workers: int
    num_ps: int
    bandwidth_bps: float
    thresholds: tuple[float, ...]
    slice_bytes: int | None
    iterations: int
    iteration_s: float  # steady state: mean time between iteration ends after the first
    first_iteration_s: float  # from t=0 to the end of the first iteration (the paper's model's T)
    gpu_utilization: float  # compute / iteration time, in [0, 1]
    alpha: float  # TicTac's (N + C - T) / min(N, C), clamped to [0, 1]
    comm_s: float  # N: one iteration's pulls then pushes at the busiest port, without compute
    compute_s: float  # C: forward plus backward of one iteration
    iteration_ends: tuple[float, ...]  # when each iteration's last gradient was aggregated
    shards: int  # shards in the plan: each worker pulls and pushes each one once per iteration
    # Bytes each egress port moved over the run ("ps0.nic", "switch->worker0"; colocated "host0.nic",
    # "switch->host0"); PS ports count every worker's traffic, and with symmetric=True worker0 stands
    # for each of the identical workers.
    link_bytes: dict[str, float]
    events: int
    wall_s: float
    symmetric: bool
    partition: bool
    interleave: bool
    barrier: bool
    colocate: bool = False
    cohost_fast: bool = False
    # Hosts whose worker the replay ran (a representative or a group's stand-in counts once).
    simulated_workers: int = 0
    chunk_bytes: int = CHUNK_BYTES
    endhost_gap_s: float = ENDHOST_GAP_S
    inflight: float | None = None
    seed: int = 0
    ps_costs: PsCosts = field(default_factory=PsCosts)
    push_order: str = PUSH_ORDER_DEFAULT
    sender_order: str = SENDER_ORDERS[0]
    endhost_scope: str = ENDHOST_SCOPES[0]
    background: tuple[Background, ...] = ()
    incast: Incast = field(default_factory=Incast)
    # Bytes the background moved over the run on each port or NIC it loads, keyed as link_bytes
    # ("switch->worker0" for direction "in"): its simulated share, next to what a testbed run's
    # switch counters measure (bench/bench_bg_share.py). Empty without background.
    background_bytes: dict[str, float] = field(default_factory=dict)
    # trace=True: compute spans (args: iteration, layer, worker) and transfer spans (args: iteration,
    # bytes, class, layer, param, worker: the worker end of the pull or push, an index).
    spans: tuple[Span, ...] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "workers": self.workers,
            "num_ps": self.num_ps,
            "bandwidth_bps": self.bandwidth_bps,
            "thresholds": list(self.thresholds),
            "slice_bytes": self.slice_bytes,
            "iterations": self.iterations,
            "iteration_s": self.iteration_s,
            "first_iteration_s": self.first_iteration_s,
            "gpu_utilization": self.gpu_utilization,
            "alpha": self.alpha,
            "comm_s": self.comm_s,
            "compute_s": self.compute_s,
            "iteration_ends": list(self.iteration_ends),
            "shards": self.shards,
            "link_bytes": dict(self.link_bytes),
            "events": self.events,
            "wall_s": self.wall_s,
            "symmetric": self.symmetric,
            "partition": self.partition,
            "interleave": self.interleave,
            "barrier": self.barrier,
            "colocate": self.colocate,
            "cohost_fast": self.cohost_fast,
            "simulated_workers": self.simulated_workers,
            "chunk_bytes": self.chunk_bytes,
            "endhost_gap_s": self.endhost_gap_s,
            "inflight": self.inflight,
            "seed": self.seed,
            "ps_costs": self.ps_costs.to_dict(),
            "push_order": self.push_order,
            "sender_order": self.sender_order,
            "endhost_scope": self.endhost_scope,
            "background": [b.to_dict() for b in self.background],
            "incast": self.incast.to_dict(),
            "background_bytes": dict(self.background_bytes),
        }

    def chrome_trace(self) -> dict[str, Any]:
        """The run as Chrome trace JSON (chrome://tracing, Perfetto); needs ``trace=True``."""
        if self.spans is None:
            raise ValueError("trace: this result has no timeline; simulate with trace=True")
        return chrome_trace(self.spans, metadata={"geryon.simulate": self.to_dict()})


def simulate(
    profile: Profile,
    *,
    workers: int,
    num_ps: int,
    bandwidth_bps: float,
    mode: str,
    thresholds: Sequence[float] = (0.5,),
    slice_bytes: int | None = None,
    iterations: int = 2,
    trace: bool = False,
    barrier: bool = False,
    symmetric: bool = True,
    partition: bool = True,
    interleave: bool = True,
    colocate: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    endhost_gap_s: float = ENDHOST_GAP_S,
    inflight: float | None = None,
    seed: int = 0,
    ps_costs: PsCosts | None = None,
    background: Sequence[Background] = (),
    cohost_fast: bool = False,
    push_order: str = PUSH_ORDER_DEFAULT,
    sender_order: str = SENDER_ORDERS[0],
    endhost_scope: str = ENDHOST_SCOPES[0],
    incast: Incast | None = None,
) -> SimResult:
    """Simulates `iterations` BSP iterations of `profile` on the cluster; see the module docstring.

    `partition=False` leaves every parameter (or each of its slices, with `slice_bytes`) on one PS,
    round-robin in creation order, like TensorFlow without a partitioner (the paper's "vanilla").
    `interleave=False` makes fifo and network connections send one transfer at a time in the order
    they became ready (an RDMA queue pair, or one TCP byte stream) instead of interleaving all they
    hold (the streams of a gRPC/HTTP2 channel).
    `colocate=True` runs PS i on worker i's host and link (needs num_ps <= workers); transfers
    between a worker and its own host's PS are free; interchangeable hosts are simulated once per
    group (exact; `symmetric=False` simulates every host).
    `cohost_fast=True` (with colocate) simulates two hosts standing for all as if every PS held alike
    shards (see `_Replay._cohost_fast_hosts`): a mean-field approximation of the exact path.
    `chunk_bytes` is hybrid's preemption unit, `endhost_gap_s` end-host's per-transfer cost, `inflight`
    the TF channel window of fifo and network (None: all pending transfers share), `seed` its random
    order; `ps_costs` and `background` as in the module docstring; `push_order` hybrid's ranking of
    pushes ("urgency" or "arrival") and `sender_order` where its urgency order holds ("host": per
    sending process, "nic": per host's NIC, or "connection"), `endhost_scope` what end-host's
    stop-and-wait serializes ("connection" or "sender": one
    transfer at a time per sending process, every worker simulated), see `geryon.threshold.simknobs`.
    `incast` (separate hosts only): the share of a switch port's rate it delivers while >= 2 hosts send
    to it (simknobs.Incast; None: all of it, the fluid model).
    Raises ValueError naming the argument when one is out of range.
    """
    if not isinstance(profile, Profile):
        raise ValueError(
            f"profile: expected a geryon.threshold.profile.Profile, got {type(profile).__name__}"
        )
    w = _count(workers, "workers")
    p = _count(num_ps, "num_ps")
    n_iter = _count(iterations, "iterations")
    check_bandwidth(bandwidth_bps)
    policy = mode_policy(mode)
    ts = validate_thresholds(thresholds, "thresholds")
    for name, flag in (
        ("trace", trace),
        ("barrier", barrier),
        ("symmetric", symmetric),
        ("partition", partition),
        ("interleave", interleave),
        ("colocate", colocate),
        ("cohost_fast", cohost_fast),
    ):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: expected True or False, got {flag!r}")
    if colocate and p > w:
        raise ValueError(
            f"colocate: PS i shares host i with worker i, so it needs num_ps <= workers; "
            f"got workers={w}, num_ps={p}"
        )
    if slice_bytes is not None:
        slice_bytes = _count(slice_bytes, "slice_bytes (bytes, or None for no slicing)")
    chunk_bytes = check_chunk(chunk_bytes)
    endhost_gap_s = check_seconds(endhost_gap_s, "endhost_gap_s")
    inflight = check_inflight(inflight)
    push_order = check_push_order(push_order)
    sender_order = check_sender_order(sender_order)
    endhost_scope = check_endhost_scope(endhost_scope)
    if endhost_scope == "sender" and cohost_fast:
        raise ValueError("cohost_fast: not with endhost_scope='sender' (its senders treat hosts unequally)")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    if ps_costs is None:
        ps_costs = PsCosts()
    elif not isinstance(ps_costs, PsCosts):
        raise ValueError(f"ps_costs: expected a PsCosts, got {type(ps_costs).__name__}")
    background = tuple(background)
    for b in background:
        if not isinstance(b, Background):
            raise ValueError(f"background: expected Background entries, got {type(b).__name__}")
    if incast is None:
        incast = Incast()
    elif not isinstance(incast, Incast):
        raise ValueError(f"incast: expected an Incast, got {type(incast).__name__}")
    if colocate and not incast.ideal:
        raise ValueError("incast: not modelled with colocate=True (co-hosted groups weigh their ports)")
    start = time.perf_counter()
    replay = _Replay(
        profile,
        w,
        p,
        float(bandwidth_bps),
        policy,
        ts,
        slice_bytes,
        n_iter,
        trace,
        barrier,
        symmetric,
        partition,
        interleave,
        colocate,
        _Knobs(
            chunk_bytes,
            endhost_gap_s,
            inflight,
            seed,
            ps_costs,
            background,
            cohost_fast,
            push_order,
            sender_order,
            endhost_scope,
            incast,
        ),
    )
    replay.run()
    wall = time.perf_counter() - start
    return replay.result(wall)


def _by_fid(flow: _Flow) -> int:
    return flow.fid


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}")
    return number


@dataclass(frozen=True)
class _Knobs:
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


class _Flow:
    """A sender-receiver(-class) connection and the transfers it carries.

    A shared flow (fifo, network) serves all its transfers at once, splitting its rate equally (the
    streams of one gRPC/HTTP2 channel); a serial flow (end-host, ideal) sends its most urgent transfer,
    the head, and queues the rest. Shared flows track a virtual clock `served`: the bytes each member
    has received since the flow last went idle; a member finishes when `served` reaches its tag.
    """

    __slots__ = (
        "bg",
        "cut",
        "down",
        "dst",
        "fid",
        "group",
        "head",
        "last_t",
        "level_down",
        "level_up",
        "members",
        "order_up",
        "paused",
        "queue",
        "rate",
        "remaining",
        "served",
        "shared",
        "side",
        "src",
        "stale",
        "starts",
        "tid",
        "up",
        "version",
        "waiting",
        "wd",
        "window",
        "wu",
    )

    def __init__(
        self, side: int, group: int, src: int, dst: int, up: int, down: int, tid: str, shared: bool
    ) -> None:
        self.side = side
        self.group = group  # the flows it is allocated with (see _Replay.active)
        self.src = src
        self.dst = dst
        self.up = up
        self.down = down
        self.tid = tid
        self.shared = shared
        self.members: list[tuple[float, int, int]] = []  # shared: heap of (tag, shard, iteration)
        self.served = 0.0
        # serial: heap of (rank, shard, iteration); shared with a window: (random key, shard, iteration)
        self.queue: list[tuple[float, int, int]] = []
        self.head: tuple[int, int] | None = None  # serial: (shard, iteration) being sent
        self.remaining = 0.0  # serial: bytes the head has left
        self.rate = 0.0
        self.last_t = 0.0
        self.version = 0  # bumps void the flow's scheduled finish
        self.stale = True  # no finish is scheduled for its current members and rate
        self.level_up: int | None = None
        self.level_down: int | None = None
        # hybrid with sender_order="host": the chunk's urgency rank, which orders it against the other
        # connections of its sending process (its side: a host sends pulls from its PS, pushes from its
        # worker) at its NIC; None: not ordered there beyond its level.
        self.order_up: int | None = None
        # Trace only: when each member first got bandwidth, and members still waiting for it.
        self.starts: dict[tuple[int, int], float] = {}
        self.waiting: list[tuple[int, int]] = []
        self.window = 1 << 62  # shared: members served at once (inflight)
        self.cut: float | None = None  # hybrid: the head's bytes left after the chunk it now finishes
        self.paused = False  # end-host: waiting out the per-transfer gap
        self.bg = False  # a background flow: always active, never finishes
        self.fid = 0  # its place in _Replay.flow_list (end-host per sender)
        self.wu = 1.0  # share of its up and down ports per unit of rate (cohost_fast's mirrors)
        self.wd = 1.0

    @property
    def busy(self) -> bool:
        return bool(self.members) if self.shared else self.head is not None


class _FlowArrays:
    """Every flow's ports, weights, levels and order as numpy arrays by fid, for allocate_arrays. Ports
    and weights are fixed per run; levels and orders are written as _settle_memo takes in the flows a
    change touched (the same flows whose memo codes it updates)."""

    def __init__(self, flows: list[_Flow], capacity: list[float], weighted: bool) -> None:
        n = len(flows)
        self.up = np.array([f.up for f in flows], dtype=np.intp)
        self.down = np.array([f.down for f in flows], dtype=np.intp)
        self.weight_up = np.array([f.wu if weighted else 1.0 for f in flows], dtype=float)
        self.weight_down = np.array([f.wd if weighted else 1.0 for f in flows], dtype=float)
        self.capacity = np.array(capacity, dtype=float)
        self.level_up = np.full(n, NO_LEVEL, dtype=np.int64)
        self.level_down = np.full(n, NO_LEVEL, dtype=np.int64)
        self.order_up = np.full(n, NO_LEVEL, dtype=np.int64)
        # A sending process's slot at its NIC: a host sends pulls from its PS, pushes from its worker.
        self.owner_slot = np.array([2 * f.up + f.side for f in flows], dtype=np.intp)

    def allocate(self, fids: np.ndarray, ordered: bool) -> np.ndarray:
        return allocate_arrays(
            self.up[fids],
            self.down[fids],
            self.level_up[fids],
            self.level_down[fids],
            self.capacity,
            self.weight_up[fids],
            self.weight_down[fids],
            self.order_up[fids] if ordered else None,
            self.owner_slot[fids] if ordered else None,
        )


class _Replay:
    quiet_gaps = True  # False: re-allocate at every end-host gap (the old path, for the equality tests)
    # end-host, hybrid: reuse the allocation of a set of flows and levels seen before (see _settle_memo);
    # False: allocate at every settle (the old path, for the equality tests).
    memo_allocations = True
    MEMO_MAX = 16384  # allocations kept (about 11 KB each at 1024 x 64); the memo restarts when full

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
        knobs: _Knobs,
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
        self.events = 0
        self.spans: list[Span] = []

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
            self.groups = self._cohost_groups(interleave, knobs.inflight, trace)
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
        self.s_param = s_param
        costs = knobs.ps_costs
        self.send_delay = [costs.per_slice_s if sl else costs.per_message_s for sl in s_sliced]
        self.delayed = any(d > 0 for d in self.send_delay)
        # A shard's update work on its PS once all its gradients are in (0: the PS is free).
        per_byte = workers * costs.aggregate_s_per_byte + costs.update_s_per_byte
        self.update_s = [b * per_byte for b in s_bytes]
        self.ps_free = [0.0] * num_ps  # when each PS's serial update work is done
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

        # fifo and network connections interleave their transfers, or send them in ready order.
        self.shared = policy.shares(interleave)
        self.by_urgency = policy.by_urgency
        self.ready_seq = 0
        self.preempt = policy.preempts
        self.chunk = float(knobs.chunk_bytes) if policy.takes_chunk else None
        # hybrid with push_order="arrival": push connections send in ready order and never preempt.
        self.push_arrival = policy.takes_chunk and knobs.push_order == "arrival"
        self.push_whole = policy.takes_chunk and knobs.push_order == "whole"
        # hybrid's urgency order across connections: per sending process ("host") or per NIC ("nic").
        self.process_order = policy.takes_chunk and knobs.sender_order == "host"
        self.nic_order = policy.takes_chunk and knobs.sender_order == "nic"
        self.gap = knobs.endhost_gap_s if policy.takes_gap else 0.0
        # Each shard's level at a NIC and at a switch port, as the policy orders them (None: no order).
        by_priority = {None: None, "class": self.s_cls, "rank": self.s_rank}
        self.nic_levels = by_priority[policy.nic_priority]
        self.switch_levels = by_priority[policy.switch_priority]
        self.class_nic = policy.nic_priority == "class"
        # end-host's gaps skip re-allocations only on the representative path with more workers than
        # PSes: with every worker (or co-hosted) every PS port carries many connections, and with as many
        # PSes as workers the worker's own port is full, so the check would cost without paying.
        # (Not under incast: a flow's coming or going then changes its ports' capacity.)
        self.track_ports = (
            self.gap > 0 and self.symmetric and not colocate and workers > num_ps and knobs.incast.ideal
        )
        self.inflight = knobs.inflight if self.shared else None
        self.rng = random.Random(knobs.seed)
        per_class = policy.per_class
        self.flows: dict[tuple[int, int, int, int], _Flow] = {}
        self.flow_list: list[_Flow] = []
        # end-host per sender: each sender's pending transfers (rank, shard, iteration, flow) and
        # the senders sending or in their gap.
        self.sender_q: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        self.sender_busy: set[tuple[int, int]] = set()
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
                        flow = _Flow(side, 0 if colocate else side, src, dst, up, down, tid, self.shared)
                        if self.fast:
                            flow.wu = self.w_up[(side, wk)]
                            flow.wd = self.w_down[(side, wk)]
                        else:
                            flow.wu, flow.wd = weights
                        flow.fid = len(self.flow_list)
                        self.flow_list.append(flow)
                        self.flows[(side, ps, wk, cls)] = flow
        self.per_class = per_class
        # Allocation groups: flows that share no port are allocated apart. Pulls and pushes do not
        # meet on separate hosts (PS NIC -> worker port, worker NIC -> PS port); colocated, they do.
        self.active: tuple[dict[_Flow, None], dict[_Flow, None]] = ({}, {})
        self.dirty = [False, False]
        # The active flows through each port (filled as flows come and go; see _quiet_rate).
        self.port_flows: dict[int, dict[_Flow, None]] = {}
        # ... and the rate they use on it, refreshed by every re-allocation of its group.
        self.port_used: dict[int, float] = {}
        self.group_ports: tuple[set[int], set[int]] = (set(), set())
        self._add_background(knobs.background, len(thresholds) + 1 if per_class else None, len(keys), cap)
        self.saved: dict[tuple[int, int, int, int, int], float] = {}  # preempted transfers' bytes left
        # end-host's and hybrid's allocation memo (see _settle_memo): each group's active flows as one
        # code per flow (0: not active, else its levels' number in memo_codes), and the flows changed since.
        self.memo: dict[tuple[int, bytes], array[float]] | None = None
        # hybrid only co-hosted (its ~450-flow groups are where allocations cost): the memo advances a
        # connection's bytes only when its rate changes, which rounds differently from advancing all at
        # every settle, and a chunk switch a rounding apart can change hybrid's schedule (VGG-19, V100,
        # 64 x 8 separate hosts, 40 Gbit/s, threshold 0.25: 1036.2 ms with the memo, 1050.1 without).
        # Without it separate-host hybrid runs are the same to the bit as before the memo.
        if self.memo_allocations and policy.uses_memo(colocate):
            self.memo = {}
        n_flows = len(self.flow_list)
        self.memo_state = (array("I", bytes(4 * n_flows)), array("I", bytes(4 * n_flows)))
        # Large co-hosted groups allocate on numpy arrays (network.allocate_arrays) at a memo miss.
        self.flow_arrays: _FlowArrays | None = None
        # (Not under incast: its capacities depend on the active flows; the list path computes them.)
        if self.memo is not None and n_flows >= _ARRAY_FLOWS and knobs.incast.ideal:
            self.flow_arrays = _FlowArrays(self.flow_list, self.capacity, self.weighted)
        self.memo_codes: dict[tuple[int | None, int | None, int | None], int] = {}
        self.touched: list[_Flow] = []
        self.memo_rates = [array("d", bytes(8 * n_flows)), array("d", bytes(8 * n_flows))]

        # BSP state.
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
        self.busy = [False] * W
        self.op_start = [0.0] * W
        self.agg = [[0] * n for _ in range(iterations)]
        self.agg_left = [len(live)] * iterations
        self.bwd_left = [W] * iterations
        self.iteration_end = [0.0] * iterations
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.heap_limit = 4096  # _compact when the heap grows past this
        self.seq = 0

    def _cohost_groups(self, interleave: bool, inflight: float | None, trace: bool) -> list[list[int]] | None:
        """Co-hosted hosts that are interchangeable, in groups (first host first), or None.

        Every worker pulls and pushes every shard, so two hosts differ only in what their PS holds:
        hosts whose PSes hold the same pieces of the same parameters, in the same order, can swap
        places without changing the cluster, and the worker-only hosts can always. A deterministic
        replay of a cluster that a swap leaves unchanged gives both hosts the same schedule (the
        max-min allocation is unique, so it is symmetric too), so one host per group is simulated and
        its flows weigh on the ports as many times as the group's hosts send or receive them (see the
        flow set-up in __init__). Exact, not an approximation; tests/threshold/test_simulator_knobs.py
        compares it with every host simulated. Not used (None) where it would not be exact or saves
        nothing: a TF channel window (`inflight`) draws a random order per connection, so two
        connections that stand for each other would differ; a trace shows every host's timeline;
        no two hosts alike."""
        if trace or (inflight is not None and self.policy.shares(interleave)):
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
        self.bg_flows: list[_Flow] = []
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
                    flow = _Flow(PULL, 0 if self.colocate else group, -1, -1, up, down, "background", False)
                    flow.bg = True
                    flow.fid = len(self.flow_list)  # the memo's index (see _settle_memo)
                    self.flow_list.append(flow)
                    flow.level_up = (
                        None if direction == "in" else (nic_level if nic_level is not None else level)
                    )
                    flow.level_down = level if direction == "in" else None
                    self.bg_flows.append(flow)

    # --- events ---------------------------------------------------------------------------------
    def _at(self, t: float, kind: int, what: Any, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, what, version))

    def run(self) -> None:
        for flow in self.bg_flows:
            self._join(flow)
            self.dirty[flow.group] = True
        self._release_pulls(self.by_rank, 0, 0.0)
        for wk in range(self.sim_workers):
            self._try_start(wk, 0.0)
        self._settle(0.0)
        heap = self.heap
        dirty = self.dirty
        t = 0.0
        while heap:
            t, _, kind, what, version = heapq.heappop(heap)
            if kind == _COMPUTE_DONE:
                self._compute_done(what, t)
                self.events += 1
            elif kind == _RESUME:
                if self.sender_serial:
                    self._sender_next(what, t)
                else:
                    self._resume(what, t)
            elif kind == _UPDATED:
                self._updated(what[0], what[1], t)
            elif kind == _READY:
                self._enqueue(what[0], what[1], what[2], t)
            elif version == what.version:  # else a finish that a later rate change made void
                self._flow_done(what, t)
                self.events += 1
            # Everything that happens at t first, then one re-allocation per group.
            if (dirty[0] or dirty[1]) and (not heap or heap[0][0] != t):
                self._settle(t)
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
            if self.pending[wk][it * self.L + pos]:
                return  # waits for its parameters; the last pull to arrive starts it
            duration = self.fwd[pos]
        else:
            duration = self.bwd[L2 - 1 - pos]
        self.busy[wk] = True
        self.op_start[wk] = t
        self._at(t + duration, _COMPUTE_DONE, wk)

    def _compute_done(self, wk: int, t: float) -> None:
        op = self.op[wk]
        L = self.L
        it, pos = divmod(op, 2 * L)
        layer = pos if pos < L else 2 * L - 1 - pos
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
            for j in self.layer_shards[layer]:
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
                self._at(t + self.send_delay[j], _READY, (flow, j, it))  # per-message work first
            else:
                self._enqueue(flow, j, it, t)

    def _maybe_end(self, it: int, t: float) -> None:
        if not self.agg_left[it] and not self.bwd_left[it]:
            self.iteration_end[it] = t

    def _release_pulls(self, shards: Sequence[int], it: int, t: float) -> None:
        for j in shards:
            for wk in range(self.sim_workers):
                self._send(PULL, j, it, wk, t)

    def _flow_done(self, flow: _Flow, t: float) -> None:
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
                    self._at(t + self.gap, _RESUME, key)  # the sender's next transfer, after the gap
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
            if not self.pending[wk][index] and self.op[wk] == it * 2 * self.L + self.s_layer[j]:
                self._try_start(wk, t)
        else:
            self.agg[it][j] += 1
            if self.agg[it][j] == self.agg_need[j]:
                cost = self.update_s[j]
                if cost > 0:
                    # The PS updates one shard at a time, in the order their last gradients arrived.
                    ps = self.s_ps[j]
                    done = max(t, self.ps_free[ps]) + cost
                    self.ps_free[ps] = done
                    self._at(done, _UPDATED, (j, it))
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

    # --- flows ------------------------------------------------------------------------------------
    def _allocate(self, flows: list[_Flow]) -> list[float]:
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

    def _capacity_with(self, flows: Sequence[_Flow]) -> list[float]:
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

    def _advance(self, flow: _Flow, t: float) -> None:
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

    def _levels(self, flow: _Flow, j: int) -> tuple[int | None, int | None, int | None]:
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

    def _activate(self, flow: _Flow, j: int, t: float) -> None:
        flow.rate = 0.0
        flow.last_t = t
        flow.stale = True
        flow.level_up, flow.level_down, flow.order_up = self._levels(flow, j)
        self._join(flow)
        self.dirty[flow.group] = True

    def _idle(self, flow: _Flow) -> None:
        flow.rate = 0.0
        flow.served = 0.0
        flow.version += 1
        self._leave(flow)
        self.dirty[flow.group] = True

    def _join(self, flow: _Flow) -> None:
        self.active[flow.group][flow] = None
        if self.memo is not None:
            self.touched.append(flow)
        if self.track_ports:  # only _quiet_rate reads port_flows
            pf = self.port_flows
            pf.setdefault(flow.up, {})[flow] = None
            pf.setdefault(flow.down, {})[flow] = None
            self.group_ports[flow.group].update((flow.up, flow.down))

    def _leave(self, flow: _Flow) -> None:
        del self.active[flow.group][flow]
        if self.memo is not None:
            self.touched.append(flow)
        if self.track_ports:
            del self.port_flows[flow.up][flow]
            del self.port_flows[flow.down][flow]

    def _quiet_rate(self, flow: _Flow, level_up: int | None, level_down: int | None) -> float | None:
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

    def _note_start(self, flow: _Flow, key: tuple[int, int], t: float) -> None:
        if self.trace:
            if flow.rate > 0:
                flow.starts[key] = t
            else:
                flow.waiting.append(key)

    def _set_head(self, flow: _Flow, j: int, it: int, t: float, remaining: float) -> None:
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

    def _next_head(self, flow: _Flow, t: float) -> None:
        if not flow.queue:
            flow.head = None
            self._idle(flow)
            return
        _, j, it = heapq.heappop(flow.queue)
        self._set_head(
            flow, j, it, t, self.saved.pop((flow.side, flow.src, flow.dst, j, it), self.s_bytes[j])
        )

    def _pause(self, flow: _Flow, t: float) -> None:
        """end-host: the connection waits out the per-transfer gap before its next transfer."""
        flow.paused = True
        self._at(t + self.gap, _RESUME, flow)

    def _resume(self, flow: _Flow, t: float) -> None:
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

    def _enqueue(self, flow: _Flow, j: int, it: int, t: float) -> None:
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
                self._at(t + self.gap, _RESUME, key)
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

    def _cut_at_chunk(self, flow: _Flow, head_j: int, head_it: int, t: float) -> None:
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

    def _switch_now(self, flow: _Flow, head_j: int, head_it: int, t: float) -> None:
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

    def _schedule(self, flow: _Flow, t: float) -> None:
        flow.version += 1
        if flow.shared:
            left = flow.members[0][0] - flow.served
            share = len(flow.members)
        else:
            left = flow.remaining
            share = 1
        if left <= 0:
            self._at(t, _FLOW_DONE, flow, flow.version)
        elif flow.rate > 0:
            self._at(t + left * share / flow.rate, _FLOW_DONE, flow, flow.version)
        if len(self.heap) > self.heap_limit:
            self._compact()

    def _compact(self) -> None:
        """Drops the finishes that later rate changes made void (they would be popped and skipped).
        end-host's gaps change many rates per transfer, so without this the heap fills with them and
        every push and pop pays for its depth. Pop order is (time, sequence), unique, so it is unchanged."""
        heap = self.heap
        heap[:] = [e for e in heap if e[2] != _FLOW_DONE or e[4] == e[3].version]
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
                    push(heap, (t, seq, _FLOW_DONE, flow, version))
                elif rate > 0:
                    seq += 1
                    push(heap, (t + left / rate, seq, _FLOW_DONE, flow, version))
                if trace and rate > 0 and flow.waiting:
                    for key_ in flow.waiting:
                        flow.starts[key_] = t
                    flow.waiting.clear()
            self.seq = seq
            if len(heap) > self.heap_limit:
                self._compact()

    # --- result -----------------------------------------------------------------------------------
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
            background_bytes=background_bytes,
            push_order=self.knobs.push_order,
            sender_order=self.knobs.sender_order,
            endhost_scope=self.knobs.endhost_scope,
            spans=tuple(self.spans) if self.trace else None,
        )
