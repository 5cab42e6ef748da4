"""Replay simulator of a parameter-server cluster: BSP iterations over a star fabric with priority queues.

In the spirit of dPRO's replayer (paper 001): W identical workers and P parameter servers hang off one
switch; every host has a full-duplex link of `bandwidth_bps`, with an egress queue on its NIC and one
on the switch port towards it. Parameters are partitioned and sliced exactly as
`geryon.tagger.partition.plan_partitions` says, each shard on its PS task, each in the class its
parameter's urgency gets from the thresholds. Per iteration every worker pulls every shard (PS ->
worker); forward layer l starts once layer l-1 is done and the shards layer l consumes have arrived
(with a dataflow profile, `geryon.threshold.forward_dag`, once the layers it reads from are done: the
worker then runs the first such layer whose shards are in, one at a time); backward runs in reverse;
after layer l's backward the worker pushes the gradient shards of layer l's parameters (worker -> PS);
a PS aggregates a shard once all W pushes arrived (aggregation time is hidden, as in the paper), and
the next iteration's pull of that shard starts then (or, with `barrier=True`, once the whole
iteration is aggregated, like TF's SyncReplicasOptimizer).

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
them (`sim_cluster.Cluster._cohost_groups`). That is exact, not an approximation (tests/threshold/
test_simulator_cohost.py compares it with every host simulated, all modes and knobs, to 1e-9), and the
result says `symmetric=True`. With a TF channel window (`inflight`), which draws a random order per
connection, a stand-in's one draw stands for each of its group's hosts' own: an approximation whose
error against every host `bench_simulator.py --cohost-window` measures (issue 38 asks for 1%; up to 2.2%
over 10 seeds, 2026-12-03). With `trace=True` (every host's timeline) or `symmetric=False` every host is
simulated. 1024 hosts x 64 PSes of VGG-19 form 19 groups. Pulls and pushes share ports there, so they
are allocated together, and without the barrier the pulls of one more iteration run too (nothing
computes after them): the last iteration's pushes then share the links as they would in a longer run,
and `link_bytes` counts those pulls.
end-host's gaps re-allocate twice per transfer, and co-hosted hybrid's chunk switches change levels
often; for both a memo keyed by the active connections and their levels (and orders) returns the rates
of a state seen before (`sim_rates.Rates._settle_memo`; exact, tested against allocating every time),
and a miss of many connections allocates on numpy arrays (`network.allocate_arrays`, equal to the bit).
Colocation is not simply slower: 1/W of the traffic stays home, and while workers pull, a colocated
link carries pulls both ways (its PS's out, its worker's in) where separate hosts use one direction of
each link per phase. It wins where pulls and pushes alternate (the barrier, or the first layer's
gradient pushed last) and loses where the next iteration's pulls overlap this one's pushes.

This module is the public entry point: `simulate` checks its arguments and parses the mode into its
policy (`sim_modes`). The replay is three layers, each a subclass of the one below: `sim_cluster.Cluster`
(shards, hosts, ports and connections, fixed for the run), `sim_rates.Rates` (the event heap and the
connections' rates) and `sim_replay.Replay` (BSP iterations and each connection's order, preemption and
gaps); `sim_flows` holds the connection type, `sim_result` the result.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from geryon.tagger.map_table import validate_thresholds
from geryon.threshold.model import check_bandwidth
from geryon.threshold.profile import Profile
from geryon.threshold.sim_cluster import Knobs
from geryon.threshold.sim_modes import HYBRID, MODES, mode_policy
from geryon.threshold.sim_replay import Replay
from geryon.threshold.sim_result import SimResult
from geryon.threshold.simknobs import (
    CHUNK_BYTES,
    ENDHOST_GAP_S,
    ENDHOST_SCOPES,
    PUSH_ORDER_DEFAULT,
    SENDER_ORDERS,
    TRANSPORTS,
    VERBS_ACK_S,
    Background,
    Incast,
    PsCosts,
    check_chunk,
    check_count,
    check_endhost_scope,
    check_inflight,
    check_push_order,
    check_seconds,
    check_sender_order,
    check_transport,
)

# The simulator's public names; the engine lives in sim_cluster, sim_rates and sim_replay.
__all__ = ["MODES", "SimResult", "simulate"]


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
    transport: str = TRANSPORTS[0],
    verbs_ack_s: float = VERBS_ACK_S,
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
    shards (see `sim_cluster.Cluster._cohost_fast_hosts`): a mean-field approximation of the exact path.
    `chunk_bytes` is hybrid's preemption unit, `endhost_gap_s` end-host's per-transfer cost, `inflight`
    the TF channel window of fifo and network (None: all pending transfers share), `seed` its random
    order; `ps_costs` and `background` as in the module docstring; `push_order` hybrid's ranking of
    pushes ("urgency" or "arrival") and `sender_order` where its urgency order holds ("host": per
    sending process, "nic": per host's NIC, or "connection"), `endhost_scope` what end-host's
    stop-and-wait serializes ("connection" or "sender": one
    transfer at a time per sending process, every worker simulated), see `geryon.threshold.simknobs`.
    `incast` (separate hosts only): the share of a switch port's rate it delivers while >= 2 hosts send
    to it (simknobs.Incast; None: all of it, the fluid model).
    `transport` (fifo and network only; simknobs.TRANSPORTS): "tf-grpc" as above, "tf-verbs" (TF 1.x's
    RDMA rendezvous: one tensor at a time per channel in posting order, a request per `verbs_ack_s`;
    `interleave` and `inflight` do not apply) or "geryon" (this project's data plane: network runs
    as hybrid, fifo as hybrid with one class, so `thresholds` do not apply to fifo).
    Raises ValueError naming the argument when one is out of range.
    """
    if not isinstance(profile, Profile):
        raise ValueError(
            f"profile: expected a geryon.threshold.profile.Profile, got {type(profile).__name__}"
        )
    w = check_count(workers, "workers")
    p = check_count(num_ps, "num_ps")
    n_iter = check_count(iterations, "iterations")
    check_bandwidth(bandwidth_bps)
    policy = mode_policy(mode)
    ts = validate_thresholds(thresholds, "thresholds")
    transport = check_transport(transport)
    verbs_ack_s = check_seconds(verbs_ack_s, "verbs_ack_s")
    if transport == "geryon" and policy.interleaves:
        # The data plane's connections are hybrid's; without a map_table (fifo) every tensor is in one class.
        policy = dataclasses.replace(HYBRID, name=policy.name)
        if mode == "fifo":
            ts = ()
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
        slice_bytes = check_count(slice_bytes, "slice_bytes (bytes, or None for no slicing)")
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
    replay = Replay(
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
        Knobs(
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
            transport,
            verbs_ack_s,
        ),
    )
    replay.run()
    wall = time.perf_counter() - start
    return replay.result(wall)
