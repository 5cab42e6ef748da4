"""Several training jobs sharing one fabric (issue 39 item 4): per-job BSP replays, one clock, one allocation.

Every job is a parameter-server job as `geryon.threshold.simulator` replays it (its workers and PSes on
separate hosts, every worker simulated, partitioned parameters, by default gRPC channels that interleave
their transfers), placed on given hosts of one star switch: host h has a full-duplex link of `bandwidth_bps`,
its NIC egress port 2h and the switch's port towards it 2h+1. Jobs meet where their placements share a
host: two jobs' PSes on one host share its NIC (pulls) and its switch port (pushes), a worker of one job
next to a PS of another shares the host's link both ways. A port serves fabric classes in strict
priority and shares fairly within one (`geryon.threshold.network.allocate`, as for one job).

The policies (`POLICIES`) differ only in the fabric class each transfer takes:

- fifo: no classes anywhere, every port shares fairly among all connections (TensorFlow as it is);
- geryon: each job runs Geryon's classes as today, its class c on fabric class c: one job's bulk
  competes with every other job's bulk, its urgent tensors with the others' urgent ones;
- job-priority: one class per job (no urgency inside a job), on the fabric class its rank gives it
  (`geryon.jobs.bands` with one class per job: the more intense job higher), like Crux;
- combined: `geryon.jobs.bands` with each job's classes: every job's urgent class above every bulk one,
  the more intense job first at each level, compressed onto `queues` classes.

GPU intensity (bands' ranking) is compute per iteration over iteration time, each job's taken from a
run of that job ALONE on the same placement under the same policy; that run's step time is also the
reference for its slowdown (shared step / alone step), so a slowdown measures what sharing costs under
the policy, not what the policy costs a job alone (geryon's and combined's alone runs are the same).
The metric Crux uses is the GPU utilisation weighted by GPUs: sum_j W_j * compute_j / step_j over
sum_j W_j, W_j the job's workers (one GPU each).

Why this design: the single-job engine (`sim_cluster` -> `sim_rates` -> `sim_replay`) already holds
one job's shards, connections and BSP state; jobs interact only through the rates of the ports they
share. So each job is a `Replay` of its own (`_JobReplay`: the same code, its connections' ports mapped
onto the shared hosts, its class levels mapped through its band) and `_Fabric` drives them all off one
clock (the earliest event of any job's heap) and re-allocates every active connection of every job
together at once after all the events of an instant, as `Replay.run` does for one job. Nothing of the
single-job engine is copied or changed beyond splitting `Replay.run` into steps, and one job through
here gives `simulate`'s times (tests/threshold/test_sim_jobs.py checks it to 1e-9).

Measuring: jobs run side by side from t=0. The window opens when the last job's first iteration ends
(before that one job's start-up weighs on the others') and closes once every job has finished
`iterations` iterations in it; a faster job keeps iterating meanwhile, so no job ever runs with a
partner gone quiet (`_JobReplay.extend` adds iterations to a job before it reaches its last). Each
job's step time is the mean time between its iteration ends in the window (for one job: the single-job
simulator's steady state, after its first iteration). Two jobs of different periods settle slowly, as
their phases drift: VGG-19 and AlexNet (K40, batch 32, 4 workers each, both jobs' 2 PSes on the same two
hosts, 10 Gbit/s) under fifo give AlexNet 1098, 1068 and 1050 ms at 3, 5 and 12 iterations, VGG-19
2633, 2622 and 2607 ms; hence 5 by default, and more where a few percent matter.

Transports (`transport`, as for one job): TF's gRPC channels (the default), TF 1.x's verbs rendezvous
(the paper's stack) or Geryon's data plane (every policy's connections as hybrid: urgency order inside a
class, chunked preemption; fifo there with one class, as `simulate` runs it).

Left out: co-hosted tasks of one job (a job's worker and PS on one host), background traffic, the
other single-job modes and knobs (end-host, ideal, the TF window, PS costs, incast, hybrid's push and
sender orders other than their defaults) and more than one GPU per worker.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from geryon.jobs.bands import Demand, compute_bands
from geryon.tagger.map_table import MAX_CLASSES, validate_thresholds
from geryon.threshold.model import check_bandwidth
from geryon.threshold.network import allocate
from geryon.threshold.profile import Profile
from geryon.threshold.sim_cluster import Knobs
from geryon.threshold.sim_flows import Flow
from geryon.threshold.sim_jobs_result import JobOutcome, JobsResult, weighted_utilization
from geryon.threshold.sim_modes import FIFO, HYBRID, NETWORK, ModePolicy
from geryon.threshold.sim_replay import Replay
from geryon.threshold.simknobs import (
    CHUNK_BYTES,
    ENDHOST_GAP_S,
    TRANSPORTS,
    VERBS_ACK_S,
    PsCosts,
    check_count,
    check_seconds,
    check_transport,
)

POLICIES = ("fifo", "geryon", "job-priority", "combined")
DEFAULT_QUEUES = 4
DEFAULT_ITERATIONS = 5  # iterations of the slowest job in the window (see Measuring above)
# The single-job engine's mode each policy runs every job's connections in: fifo's one fair connection
# per pair, or network's one connection per pair and class with its classes as port levels. On the
# geryon transport every policy runs as hybrid (simulator.simulate does the same for one job).
_ENGINE: dict[str, ModePolicy] = {
    "fifo": FIFO,
    "geryon": NETWORK,
    "job-priority": NETWORK,
    "combined": NETWORK,
}


@dataclass(frozen=True)
class _Carrier:
    """How every job's tensors travel (simknobs.TRANSPORTS) and the seed of tf-verbs' request order."""

    transport: str
    verbs_ack_s: float
    seed: int

    def engine(self, policy: str) -> ModePolicy:
        return dataclasses.replace(HYBRID, name=policy) if self.transport == "geryon" else _ENGINE[policy]


@dataclass(frozen=True)
class JobSpec:
    """One job: its profile, its workers' hosts and its PSes' hosts (indices on the switch), and the
    thresholds of its Geryon classes (k - 1 for k classes; () for one class)."""

    name: str
    profile: Profile
    workers: tuple[int, ...]
    ps: tuple[int, ...]
    thresholds: tuple[float, ...] = (0.5,)

    @property
    def classes(self) -> int:
        return len(self.thresholds) + 1


def simulate_jobs(
    jobs: Sequence[JobSpec],
    *,
    hosts: int,
    bandwidth_bps: float,
    policy: str,
    queues: int = DEFAULT_QUEUES,
    iterations: int = DEFAULT_ITERATIONS,
    transport: str = TRANSPORTS[0],
    verbs_ack_s: float = VERBS_ACK_S,
    seed: int = 0,
) -> JobsResult:
    """Simulates `jobs` side by side on `hosts` hosts of one switch under `policy`; see the module
    docstring. `transport` as `simulator.simulate`'s (simknobs.TRANSPORTS): "tf-grpc" (channels that
    interleave their transfers), "tf-verbs" (one tensor at a time per channel in posting order, a
    request per `verbs_ack_s`, ties in an order drawn from `seed`) or "geryon" (the data plane: every
    policy's connections run as hybrid, urgency order inside a class and chunked preemption).
    Raises ValueError naming the argument (or the job's field) that is out of range."""
    return compare_policies(
        jobs,
        hosts=hosts,
        bandwidth_bps=bandwidth_bps,
        policies=(policy,),
        queues=queues,
        iterations=iterations,
        transport=transport,
        verbs_ack_s=verbs_ack_s,
        seed=seed,
    )[policy]


def compare_policies(
    jobs: Sequence[JobSpec],
    *,
    hosts: int,
    bandwidth_bps: float,
    policies: Sequence[str] = POLICIES,
    queues: int = DEFAULT_QUEUES,
    iterations: int = DEFAULT_ITERATIONS,
    transport: str = TRANSPORTS[0],
    verbs_ack_s: float = VERBS_ACK_S,
    seed: int = 0,
) -> dict[str, JobsResult]:
    """`simulate_jobs` under each of `policies`, sharing the alone runs (geryon's are combined's)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    carrier = _Carrier(check_transport(transport), check_seconds(verbs_ack_s, "verbs_ack_s"), seed)
    specs = _check_jobs(jobs, check_count(hosts, "hosts"))
    bps = check_bandwidth(bandwidth_bps)
    n_iter = check_count(iterations, "iterations")
    if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= MAX_CLASSES:
        raise ValueError(f"queues: expected an integer from 1 to {MAX_CLASSES}, got {queues!r}")
    if isinstance(policies, str):
        policies = (policies,)
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"policy: unknown policy {p!r}; allowed: {', '.join(POLICIES)}")
    if not policies:
        raise ValueError(f"policies: give at least one of {', '.join(POLICIES)}")
    if "geryon" in policies:
        for s in specs:
            if s.classes > queues:
                raise ValueError(
                    f"queues: job {s.name!r} has {s.classes} classes, more than the {queues} queues "
                    "(geryon puts class c on fabric class c; combined compresses)"
                )
    alone: dict[tuple[str, str], float] = {}
    return {p: _run_policy(specs, hosts, bps, p, queues, n_iter, carrier, alone) for p in policies}


def _run_policy(
    specs: list[JobSpec],
    hosts: int,
    bps: float,
    policy: str,
    queues: int,
    n_iter: int,
    carrier: _Carrier,
    alone: dict[tuple[str, str], float],
) -> JobsResult:
    start = time.perf_counter()
    # Each job alone on its placement, under the same policy (its band alone is what bands give one job).
    # geryon and combined treat a lone job alike (bands keep class c on c): they share the run.
    key_policy = "geryon" if policy == "combined" and all(s.classes <= queues for s in specs) else policy
    for s in specs:
        if (s.name, key_policy) not in alone:
            bands = _bands([s], policy, queues, {s.name: 1.0})
            steps, _, _ = _Fabric([s], hosts, bps, policy, bands, n_iter, carrier).measure()
            alone[(s.name, key_policy)] = steps[0][0]
    alone_s = [alone[(s.name, key_policy)] for s in specs]
    compute = [s.profile.compute_s for s in specs]
    intensity = {s.name: min(1.0, c / a) for s, c, a in zip(specs, compute, alone_s, strict=True)}
    bands = _bands(specs, policy, queues, intensity)
    steps, (opened, window), events = _Fabric(specs, hosts, bps, policy, bands, n_iter, carrier).measure()
    ranked = policy in ("job-priority", "combined")
    outcomes = tuple(
        JobOutcome(
            name=s.name,
            workers=len(s.workers),
            compute_s=compute[i],
            step_s=steps[i][0],
            alone_s=alone_s[i],
            slowdown=steps[i][0] / alone_s[i],
            utilization=min(1.0, compute[i] / steps[i][0]),
            intensity=intensity[s.name],
            rank=bands[s.name][0] if ranked else None,
            fabric_classes=bands[s.name][1],
            iterations=steps[i][1],
        )
        for i, s in enumerate(specs)
    )
    return JobsResult(
        policy=policy,
        queues=queues,
        bandwidth_bps=bps,
        iterations=n_iter,
        jobs=outcomes,
        weighted_utilization=weighted_utilization(
            [o.workers for o in outcomes], compute, [o.step_s for o in outcomes]
        ),
        window_start_s=opened,
        window_s=window,
        events=events,
        wall_s=time.perf_counter() - start,
    )


def _bands(
    specs: Sequence[JobSpec], policy: str, queues: int, intensity: Mapping[str, float]
) -> dict[str, tuple[int | None, tuple[int, ...]]]:
    """Each job's (rank, class c -> fabric class) under the policy; fifo's map is empty (no classes)."""
    if policy == "fifo":
        return {s.name: (None, ()) for s in specs}
    if policy == "geryon":
        return {s.name: (None, tuple(range(s.classes))) for s in specs}
    one = policy == "job-priority"  # one class per job: no urgency inside a job
    demands = [Demand(s.name, 1 if one else s.classes, intensity[s.name]) for s in specs]
    return {name: (b.rank, b.classes) for name, b in compute_bands(demands, queues).items()}


class _JobReplay(Replay):
    """One job's replay on the shared fabric: `Replay` with its class levels mapped through its band."""

    # Neither the allocation memo nor end-host's quiet gaps apply: _Fabric allocates every job at once.
    memo_allocations = False
    quiet_gaps = False
    band: tuple[int, ...] = ()

    def _levels(self, flow: Flow, j: int) -> tuple[int | None, int | None, int | None]:
        nic, switch, order = super()._levels(flow, j)
        band = self.band
        return (None if nic is None else band[nic]), (None if switch is None else band[switch]), order

    def extend(self, extra: int) -> None:
        """`extra` more iterations, appended to the BSP state as __init__ lays it out (every worker
        simulated, so no groups). Exact while the job has not yet aggregated a shard of its last
        iteration, the first moment the iteration count is read (the next pulls' release, then the
        next op's start): no push of iteration i + 1 can arrive before iteration i has ended (its
        backward waits for every pull of i + 1, each released by an aggregation of i), so extending
        when the next-to-last iteration ends is always in time."""
        assert self.groups is None
        per_layer = [len(shards) for shards in self.layer_shards]
        for row in self.pending:
            row.extend(per_layer * extra)
        n = len(self.s_bytes)
        self.agg.extend([0] * n for _ in range(extra))
        self.agg_left.extend([len(self.live)] * extra)
        self.bwd_left.extend([self.sim_workers] * extra)
        self.iteration_end.extend([0.0] * extra)
        self.iterations += extra
        self.pull_rounds += extra


class _Fabric:
    """Several jobs' replays on one star switch: one clock, one allocation (see the module docstring)."""

    def __init__(
        self,
        specs: Sequence[JobSpec],
        hosts: int,
        bps: float,
        policy: str,
        bands: Mapping[str, tuple[int | None, tuple[int, ...]]],
        iterations: int,
        carrier: _Carrier = _Carrier(TRANSPORTS[0], VERBS_ACK_S, 0),
    ) -> None:
        self.specs = list(specs)
        self.carrier = carrier
        self.hosts = hosts
        self.bps = bps
        self.policy = policy
        self.bands = bands
        self.iterations = iterations
        self.done: list[int] = []  # iterations ended, per job, in the last run

    def _build(self, budgets: Sequence[int]) -> None:
        """Every job's replay with `budgets` iterations, on the shared ports, levels and clock."""
        self.capacity = [self.bps / 8.0] * (2 * self.hosts)
        self.link_moved = [0.0] * (2 * self.hosts)
        # Every job's connections in one allocation group: placements may put one job's pulls and
        # another's pushes on one port, so the single-job split into pulls and pushes does not hold.
        self.active: tuple[dict[Flow, None], dict[Flow, None]] = ({}, {})
        self.dirty = [False, False]
        self.owner: dict[Flow, _JobReplay] = {}
        self.replays: list[_JobReplay] = []
        carrier = self.carrier
        engine = carrier.engine(self.policy)
        knobs = Knobs(
            CHUNK_BYTES,
            ENDHOST_GAP_S,
            None,  # inflight: all pending transfers share a gRPC channel
            carrier.seed,
            PsCosts(),
            (),  # background
            transport=carrier.transport,
            verbs_ack_s=carrier.verbs_ack_s,
        )
        # hybrid's urgency order at a NIC is per sending process (sender_order "host"): a job's PS or
        # worker there, so every job's processes are owners of their own (allocate's owner_up).
        self.owner_id: dict[Flow, int] = {}
        for index, (spec, budget) in enumerate(zip(self.specs, budgets, strict=True)):
            # job-priority: one class per job, so no thresholds; the others keep the job's classes, but
            # fifo on the geryon transport has one class (no map_table), as simulate runs it.
            one = self.policy == "job-priority" or (self.policy == "fifo" and carrier.transport == "geryon")
            ts = () if one else spec.thresholds
            replay = _JobReplay(
                spec.profile,
                len(spec.workers),
                len(spec.ps),
                self.bps,
                engine,
                ts,
                None,  # slice_bytes
                budget,
                False,  # trace
                False,  # barrier
                False,  # symmetric: every worker simulated
                True,  # partition
                True,  # interleave
                False,  # colocate
                knobs,
            )
            # fifo's connections have no levels; on hybrid (the geryon transport) its one class is 0.
            replay.band = self.bands[spec.name][1] or (0,)
            # The job's hosts are its workers, then its PSes (sim_cluster's order on separate hosts).
            placed = list(spec.workers) + list(spec.ps)
            for flow in replay.flow_list:
                flow.up = 2 * placed[flow.src]
                flow.down = 2 * placed[flow.dst] + 1
                flow.group = 0
                self.owner[flow] = replay
                self.owner_id[flow] = 2 * index + flow.side
            replay.capacity = self.capacity
            replay.link_moved = self.link_moved
            replay.active = self.active
            replay.dirty = self.dirty
            self.replays.append(replay)
        self.ordered = any(r.process_order for r in self.replays)

    def measure(
        self, budgets: Sequence[int] | None = None
    ) -> tuple[list[tuple[float, int]], tuple[float, float], int]:
        """Each job's (step time, iterations measured), the window and the events handled. `budgets`:
        the iterations each job starts with (tests: enough that none grows, for the same result)."""
        n = self.iterations
        if budgets is None:
            # One job runs exactly its iterations, as simulate does; several grow theirs as they go (_run).
            budgets = [n if len(self.specs) == 1 else n + 2] * len(self.specs)
        self._build(budgets)
        start, window = self._run()
        steps = []
        for k, r in enumerate(self.replays):
            ends = [e for e in r.iteration_end[: self.done[k]] if start <= e <= window]
            c = len(ends)
            steps.append(((ends[-1] - ends[0]) / (c - 1) if c > 1 else ends[0], c))
        return steps, (start, window), sum(r.events for r in self.replays)

    def _run(self) -> tuple[float, float]:
        """Runs until every job has finished `iterations` iterations since the window opened (when the
        last job's first iteration ended: before it, one job's start-up would weigh on the others'
        steps); returns when the window opened and when it closed."""
        replays = self.replays
        n = self.iterations
        for r in replays:
            r._start()
        self._settle(0.0)
        heaps = [r.heap for r in replays]
        dirty = self.dirty
        self.done = done = [0] * len(replays)  # (iterations end in order)
        grow = len(replays) > 1
        t = 0.0
        while True:
            # The earliest event of any job (ties: the first job's first, each job's in its own order).
            k = -1
            best = math.inf
            for i, h in enumerate(heaps):
                if h and h[0][0] < best:
                    best, k = h[0][0], i
            if k < 0:
                break
            t, _, kind, what, version = heapq.heappop(heaps[k])
            r = replays[k]
            r._handle(t, kind, what, version)
            before = done[k]
            while done[k] < r.iterations and not r.agg_left[done[k]] and not r.bwd_left[done[k]]:
                done[k] += 1
            if done[k] != before and grow and done[k] >= r.iterations - 1:
                r.extend(r.iterations)  # still running when the window closes (see extend)
            if done[k] != before and min(done) > 0:
                start = max(q.iteration_end[0] for q in replays)
                if all(
                    d == q.iterations or d - bisect.bisect_left(q.iteration_end, start, 0, d) >= n
                    for q, d in zip(replays, done, strict=True)
                ):
                    # The window closes at t, after everything else that happens at t (another job's
                    # iteration that ends at the same instant is in it).
                    while True:
                        k = min(range(len(heaps)), key=lambda i: heaps[i][0][0] if heaps[i] else math.inf)
                        if not heaps[k] or heaps[k][0][0] != t:
                            return start, t
                        _, _, kind, what, version = heapq.heappop(heaps[k])
                        r = replays[k]
                        r._handle(t, kind, what, version)
                        while done[k] < r.iterations and not r.agg_left[done[k]] and not r.bwd_left[done[k]]:
                            done[k] += 1
            if dirty[0] and min((h[0][0] for h in heaps if h), default=math.inf) != t:
                self._settle(t)
        raise RuntimeError("simulate_jobs: the replay stalled before every job finished (a bug)")

    def _settle(self, t: float) -> None:
        """Rates.\\_settle for every job's connections at once, each finish on its own job's heap."""
        self.dirty[0] = False
        flows = list(self.active[0])
        owner = self.owner
        for flow in flows:
            owner[flow]._advance(flow, t)
        rates = allocate(
            [f.up for f in flows],
            [f.down for f in flows],
            [f.level_up for f in flows],
            [f.level_down for f in flows],
            self.capacity,
            None,
            None,
            [f.order_up for f in flows] if self.ordered else None,
            [self.owner_id[f] for f in flows] if self.ordered else None,
        )
        for flow, rate in zip(flows, rates, strict=True):
            if rate != flow.rate or flow.stale:
                flow.rate = rate
                flow.stale = False
                owner[flow]._schedule(flow, t)


def _check_jobs(jobs: Sequence[JobSpec], hosts: int) -> list[JobSpec]:
    specs = list(jobs)
    if not specs:
        raise ValueError("jobs: give at least one JobSpec")
    seen: set[str] = set()
    out = []
    for i, s in enumerate(specs):
        if not isinstance(s, JobSpec):
            raise ValueError(f"jobs[{i}]: expected a JobSpec, got {type(s).__name__}")
        where = f"jobs[{i}]"
        if not isinstance(s.name, str) or not s.name:
            raise ValueError(f"{where}.name: expected a non-empty string, got {s.name!r}")
        where = f"jobs[{i}] ({s.name!r})"
        if s.name in seen:
            raise ValueError(f"{where}.name: listed twice")
        seen.add(s.name)
        if not isinstance(s.profile, Profile):
            raise ValueError(f"{where}.profile: expected a Profile, got {type(s.profile).__name__}")
        placed: dict[int, str] = {}
        for role in ("workers", "ps"):
            values = getattr(s, role)
            if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
                raise ValueError(
                    f"{where}.{role}: expected a non-empty sequence of host indices, got {values!r}"
                )
            for h in values:
                if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < hosts:
                    raise ValueError(f"{where}.{role}: host {h!r} is not an index from 0 to {hosts - 1}")
                if h in placed:
                    # A job's worker and PS on one host would be co-hosted (not modelled here), two
                    # workers on one host would share its GPU slot.
                    raise ValueError(
                        f"{where}.{role}: host {h} already holds its {placed[h]}; a job's tasks need "
                        "hosts of their own (co-hosted tasks of one job are not modelled)"
                    )
                placed[h] = role
        ts = tuple(s.thresholds)
        ts = validate_thresholds(ts, f"{where}.thresholds") if ts else ()
        out.append(dataclasses.replace(s, workers=tuple(s.workers), ps=tuple(s.ps), thresholds=ts))
    return out


__all__ = [
    "DEFAULT_ITERATIONS",
    "DEFAULT_QUEUES",
    "POLICIES",
    "JobOutcome",
    "JobSpec",
    "JobsResult",
    "compare_policies",
    "simulate_jobs",
    "weighted_utilization",
]
