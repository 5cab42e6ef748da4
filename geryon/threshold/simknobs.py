"""The simulator's cost and traffic knobs: what each one means, its default and where the default comes from.

- `ENDHOST_GAP_S`: what an end-host scheduler (TicTac, P3, ByteScheduler) pays per transfer. It sends one
  scheduled tensor (or partition) at a time and hands the next one to the network only once the previous
  one is done, so every transfer carries the "partition overhead" of RPC serialization and ACK time:
  ByteScheduler (paper 004, Sec. 4.1) measured "about 300us in our testbed", and Sec. 4.2/6.2 name P3's
  stop-and-wait transmission as why P3 "cannot utilize the bandwidth fully". Default 300e-6 s.
- `CHUNK_BYTES`: the hybrid data plane's preemption unit inside a class (issue 14 item 1: "about 256 KiB").
- `PUSH_ORDERS`: how a hybrid connection orders the gradients it pushes (issue 14 item 1 leaves the push
  ranking to the data plane). "urgency" (default): the parameter's consumption rank, like pulls, with
  chunk preemption (P3's argument: the PS can update the first layer first); since backward produces
  gradients last layer first, each new gradient preempts the older ones, so the big late layers go last.
  "arrival": the order the gradients became ready (backward order), never preempting; the big late
  layers are then aggregated early and their next pulls overlap the remaining pushes. "whole": urgency
  order, but a push once started finishes (no chunk preemption), as end-host schedulers send a slice.
  bench/bench_simulator.py --grid measures both (bench/README.md).
- `SENDER_ORDERS`: where a hybrid sender's urgency order holds. "host" (default, what the native data
  plane calls its `sender_order=host`: one urgency order per process and class, native/rendezvous/
  README.md, "Host order"): each sending process sends its most urgent pending chunk of the class on
  any of its connections first. A host running one task (a PS, or a worker) has one sending process,
  so its NIC sends in one order; a co-hosted host's worker (pushes) and PS (pulls) keep one order each
  and share the NIC fairly within a class, their chunks never ordered against each other. "nic": one
  order over every chunk the NIC sends, of every process on the host (a send scheduler per host; the
  same as "host" where a host runs one task, and what "host" meant before the simulator followed the
  data plane per process). "connection": inside each connection only (the data plane's
  `sender_order=connection`), so a host's connections of one class share its NIC fairly (the kernel
  interleaves their sockets). Pushes in arrival order stay per connection under all three.
- `ENDHOST_SCOPES`: what end-host's stop-and-wait serializes. "connection" (default): each connection
  sends one transfer at a time, so a host's connections overlap one another's gaps. "sender": one
  transfer at a time per sending process (a PS's pulls, a worker's pushes), its most urgent pending one
  of any connection, each after the gap: ByteScheduler (paper 004) Sec. 4.2's stop-and-wait ("the sender
  keeps only one tensor unacknowledged and sends the next tensor after receiving the acknowledgement").
  Senders then treat their receivers unequally, so every worker is simulated.
- `TF_INFLIGHT`: how many pulls one TensorFlow gRPC channel (a worker-PS pair) has in flight at once, in
  a random order per iteration (TicTac, paper 000, Sec. 1: 1000 ResNet-50 iterations, every one a
  different order). Measured on this machine by bench/bench_tf_order.py (written beside this change;
  its out/bench/tf_order.json of this session): a worker pulling 16 tensors from 3 PSes had a median of
  3.49 pulls in flight per PS connection ("in_flight_per_ps"; 7.2-7.4 over all its connections,
  "in_flight"), every iteration a different arrival order, Kendall tau -0.12 to 0.03 against
  consumption order. The simulator's window is per connection, so the default is 3.5.
- `TRANSPORTS`: how a fifo or network connection carries its transfers (end-host, hybrid and ideal
  define their own order and take none of these). "tf-grpc" (default): TensorFlow's gRPC channel,
  its streams interleaved within the `TF_INFLIGHT` window below. "tf-verbs": TensorFlow 1.x's RDMA
  rendezvous (`grpc+verbs`, what the paper ran: paper 002 Sec. IV "TensorFlow r1.10", "RDMA-based
  rendezvous"), as tensorflow/contrib/verbs/README.md documents it: "the receive operation ... actually
  initiates the tensor transfer" with an RDMA_MESSAGE_TENSOR_REQUEST; control messages go through
  one fixed message buffer per channel, so "we cannot send on a specific channel more than one
  message at a time" and the next one waits for the remote side's ACK; the sender then RDMA-writes
  the tensor on the channel's queue pair, and a reliable-connected queue pair executes its work
  requests in the order they were posted (the InfiniBand specification's RC service). So a
  channel sends one tensor at a time in posting order: the order the tensors became ready, ties in
  the order their requests came, which TensorFlow's executor issues in no fixed order (TicTac, paper
  000, Sec. 1; drawn per iteration from `seed`); and a channel posts at most one tensor per
  `VERBS_ACK_S` (its request's ACK round trip). Geryon's paper keeps one such channel per class
  (Sec. IV: "two flows with different priorities") with strict priority between them: network mode
  on tf-verbs. "geryon": this project's data plane (native/rendezvous/README.md, "Order inside a
  class"): a connection per class sends its most urgent chunk first, which is hybrid mode: network
  on geryon is hybrid, fifo on geryon is the data plane with one class (no map_table).
- `VERBS_ACK_S`: a tf-verbs control message's round trip (the message write to the remote buffer,
  the ACK write back), 2 x ib_send_lat's one-way latency of a 32-byte send on an RC queue pair,
  0.83 us (D. Potter's master's thesis, table "mtu_performance": the median of 1000 iterations).
  It leaves out the completion-channel wake-ups of TF's polling thread (rdma.cc's Process_CQ waits in
  ibv_get_cq_event); bench/bench_paper_scaling.py --verbs-acks prints the tables for other values.
- `PsCosts`: work on the parameter server. All zero by default (the PS is free, the behaviour before these
  knobs); a calibration (geryon/threshold/calibration.py's load_knobs, or `--ps-costs FILE`) supplies
  measured values.
- `Background`: other traffic on the training job's links (a second job, checkpoints, storage), rate
  limited at its source, in a class of its own below every training class where ports have priorities.
- `Incast`: the share of its rate a switch port delivers while two or more hosts send to it at once
  (TCP senders overflow its queue and recover from loss; their rates do not settle at the max-min
  shares the fluid model gives). `alone`: every sender's NIC carries only this port's traffic;
  `shared`: at least one sender also sends to another port at the time (the demo's pushes: each worker
  to both PSes; its pulls: each PS to both workers). Both 1.0 by default (the fluid model, the
  behaviour before the knob); bench/bench_incast.py measures them on the testbed (its "2 senders" and
  "2x2" efficiencies), and geryon.demo.predict feeds them in. Background flows are not counted as
  senders (they are paced below the port's rate, and the bench does not measure them).
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import asdict, dataclass, fields
from typing import Any

ENDHOST_GAP_S = 300e-6  # ByteScheduler (paper 004) Sec. 4.1: partition overhead "about 300us"
CHUNK_BYTES = 256 << 10  # issue 14 item 1: chunks of about 256 KiB
CHUNK_MIN, CHUNK_MAX = 4 << 10, 1 << 30
PUSH_ORDERS = ("urgency", "arrival", "whole")  # hybrid's push ranking
# The data plane's: pushes (responses to a PS) queue in urgency order but go out whole once started
# (native/rendezvous/README.md, "Order inside a class"; bench/README.md, "The simulator's modes").
PUSH_ORDER_DEFAULT = "whole"
SENDER_ORDERS = ("host", "nic", "connection")  # where hybrid's urgency order holds; the first is the default
# Where end-host's stop-and-wait holds; the first is the default (see the module docstring).
ENDHOST_SCOPES = ("connection", "sender")
TF_INFLIGHT = 3.5  # bench/bench_tf_order.py on this machine: 3.49 pulls in flight per PS connection
# How fifo and network connections carry their transfers; the first is the default (see the docstring).
TRANSPORTS = ("tf-grpc", "tf-verbs", "geryon")
VERBS_ACK_S = 2 * 0.83e-6  # 2 x ib_send_lat's one-way 32-byte RC latency (module docstring)

BACKGROUND_HOSTS = ("workers", "ps", "all")
BACKGROUND_DIRECTIONS = ("in", "out", "both")
# Where background waits on ports with priorities: "below" every training class (a scavenger class of
# its own), or in the "lowest" training class's queue, sharing it fairly (a DSCP the switch maps to no
# class: the testbed's intent sends those to its least urgent class, geryon.fabric.intent).
BACKGROUND_QUEUES = ("below", "lowest")


@dataclass(frozen=True)
class PsCosts:
    """Parameter-server work, in seconds. A shard is updated once its last gradient arrived: its PS
    spends bytes x (workers x aggregate_s_per_byte + update_s_per_byte), one shard after another (a
    PS's update work is serial), before the next iteration may pull it. Every transfer waits
    per_message_s (RPC set-up, serialization) before it enters its connection, or per_slice_s instead
    when its parameter is cut into more than one slice: the calibration measures a slice's cost with
    its message included (geryon/threshold/calibration.py), so a slice pays one or the other."""

    aggregate_s_per_byte: float = 0.0
    update_s_per_byte: float = 0.0
    per_message_s: float = 0.0
    per_slice_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"ps_costs.{f.name}: expected a finite number of seconds >= 0, got {v!r}")

    @property
    def free(self) -> bool:
        return not any(asdict(self).values())

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "ps_costs") -> PsCosts:
        """From a mapping with some of the four keys; an unknown key or bad value names itself."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object with keys {', '.join(PS_COST_KEYS)}")
        for key in data:
            if key not in PS_COST_KEYS:
                raise ValueError(f"{where}: unknown key {key!r}; allowed: {', '.join(PS_COST_KEYS)}")
        try:
            return cls(**data)
        except ValueError as e:
            raise ValueError(f"{where}: {str(e).removeprefix('ps_costs.')}") from None

    @classmethod
    def load(cls, path: str) -> PsCosts:
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as e:
            raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None
        if isinstance(data, dict) and data.get("format") == "geryon.ps-costs":
            # bench/bench_ps_costs.py's document: its knobs, less the loopback rate and the per-step
            # fixed cost (bench_step_cost.py's; neither is a PS cost).
            knobs = data.get("knobs")
            if isinstance(knobs, dict):
                data = {k: v for k, v in knobs.items() if k not in ("loopback_s_per_byte", "step_fixed_s")}
        return cls.from_dict(data, path)


PS_COST_KEYS = tuple(f.name for f in fields(PsCosts))


@dataclass(frozen=True)
class Background:
    """Constant-rate traffic at `rate_bps` on every chosen host's link: into it (the switch port towards
    it), out of it (its NIC) or both. On ports with priorities (network, hybrid) it waits below all
    training traffic (`queue="below"`) or shares the least urgent training class's queue
    (`queue="lowest"`, BACKGROUND_QUEUES); under ideal it is below every rank; elsewhere it shares fairly."""

    rate_bps: float
    hosts: str = "workers"
    direction: str = "in"
    queue: str = "below"

    def __post_init__(self) -> None:
        r = self.rate_bps
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r <= 0:
            raise ValueError(
                f"background.rate_bps: expected a finite number of bits per second > 0, got {r!r}"
            )
        if self.hosts not in BACKGROUND_HOSTS:
            raise ValueError(
                f"background.hosts: unknown {self.hosts!r}; allowed: {', '.join(BACKGROUND_HOSTS)}"
            )
        if self.direction not in BACKGROUND_DIRECTIONS:
            raise ValueError(
                f"background.direction: unknown {self.direction!r}; "
                f"allowed: {', '.join(BACKGROUND_DIRECTIONS)}"
            )
        if self.queue not in BACKGROUND_QUEUES:
            raise ValueError(
                f"background.queue: unknown {self.queue!r}; allowed: {', '.join(BACKGROUND_QUEUES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_bps": float(self.rate_bps),
            "hosts": self.hosts,
            "direction": self.direction,
            "queue": self.queue,
        }


def check_chunk(value: Any, what: str = "chunk_bytes") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not CHUNK_MIN <= value <= CHUNK_MAX:
        raise ValueError(
            f"{what}: expected an integer number of bytes in [{CHUNK_MIN}, {CHUNK_MAX}], got {value!r}"
        )
    return value


def check_push_order(value: Any, what: str = "push_order") -> str:
    if value not in PUSH_ORDERS:
        raise ValueError(f"{what}: unknown push order {value!r}; allowed: {', '.join(PUSH_ORDERS)}")
    return str(value)


def check_endhost_scope(value: Any, what: str = "endhost_scope") -> str:
    if value not in ENDHOST_SCOPES:
        raise ValueError(f"{what}: unknown scope {value!r}; allowed: {', '.join(ENDHOST_SCOPES)}")
    return str(value)


def check_sender_order(value: Any, what: str = "sender_order") -> str:
    if value not in SENDER_ORDERS:
        raise ValueError(f"{what}: unknown sender order {value!r}; allowed: {', '.join(SENDER_ORDERS)}")
    return str(value)


def check_count(value: Any, what: str) -> int:
    """An integer >= 1 (not a bool); ValueError naming `what` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{what}: expected an integer >= 1, got {value!r}")
    return number


def check_transport(value: Any, what: str = "transport") -> str:
    if value not in TRANSPORTS:
        raise ValueError(f"{what}: unknown transport {value!r}; allowed: {', '.join(TRANSPORTS)}")
    return str(value)


def check_seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: expected a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_inflight(value: Any, what: str = "inflight") -> float | None:
    """None (every pending transfer shares the connection) or a mean window >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise ValueError(f"{what}: expected None or a number of transfers >= 1, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Incast:
    """Port efficiency under incast (module docstring): a switch port with traffic from >= 2 hosts at
    once delivers `alone` (no sender sends elsewhere) or `shared` (one does) times its rate."""

    alone: float = 1.0
    shared: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or not 0 < v <= 1
            ):
                raise ValueError(f"incast.{f.name}: expected a share of the port's rate in (0, 1], got {v!r}")

    @property
    def ideal(self) -> bool:
        """No loss: the fluid model as before the knob."""
        return self.alone == 1.0 and self.shared == 1.0

    def to_dict(self) -> dict[str, float]:
        return {"alone": float(self.alone), "shared": float(self.shared)}
