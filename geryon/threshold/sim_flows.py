"""The simulator's connections: `Flow` (one sender-receiver(-class) connection and its transfers)
and `FlowArrays` (every flow's ports and levels as numpy arrays, for `network.allocate_arrays`)."""

from __future__ import annotations

import numpy as np

from geryon.threshold.network import NO_LEVEL, allocate_arrays

PULL, PUSH = 0, 1  # a flow's side: PS -> worker (pulls) or worker -> PS (pushes)


class Flow:
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
        self.group = group  # the flows it is allocated with (see Rates.active)
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
        self.fid = 0  # its place in Cluster.flow_list (end-host per sender)
        self.wu = 1.0  # share of its up and down ports per unit of rate (cohost_fast's mirrors)
        self.wd = 1.0

    @property
    def busy(self) -> bool:
        return bool(self.members) if self.shared else self.head is not None


class FlowArrays:
    """Every flow's ports, weights, levels and order as numpy arrays by fid, for allocate_arrays. Ports
    and weights are fixed per run; levels and orders are written as _settle_memo takes in the flows a
    change touched (the same flows whose memo codes it updates)."""

    def __init__(self, flows: list[Flow], capacity: list[float], weighted: bool) -> None:
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
