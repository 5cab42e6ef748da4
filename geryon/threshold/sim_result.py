"""What a simulator run predicts: `SimResult` (see `geryon.threshold.simulator`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from geryon.threshold.sim_bound import Bound
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
)
from geryon.threshold.trace import Span, chrome_trace


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
    transport: str = TRANSPORTS[0]  # what fifo and network connections ran on (simknobs.TRANSPORTS)
    verbs_ack_s: float = VERBS_ACK_S
    # Bytes the background moved over the run on each port or NIC it loads, keyed as link_bytes
    # ("switch->worker0" for direction "in"): its simulated share, next to what a testbed run's
    # switch counters measure (bench/bench_bg_share.py). Empty without background.
    background_bytes: dict[str, float] = field(default_factory=dict)
    # The iteration time no mode can beat on this cluster (sim_bound: compute alone, or the busiest
    # port busy for the whole iteration), the same for every mode.
    bound: Bound | None = None
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
            "transport": self.transport,
            "verbs_ack_s": self.verbs_ack_s,
            "background_bytes": dict(self.background_bytes),
            "bound": self.bound.to_dict() if self.bound is not None else None,
        }

    def chrome_trace(self) -> dict[str, Any]:
        """The run as Chrome trace JSON (chrome://tracing, Perfetto); needs ``trace=True``."""
        if self.spans is None:
            raise ValueError("trace: this result has no timeline; simulate with trace=True")
        return chrome_trace(self.spans, metadata={"geryon.simulate": self.to_dict()})
