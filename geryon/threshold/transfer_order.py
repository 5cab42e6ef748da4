"""The order and overlap of TensorFlow's gRPC transfers in one training step, from its own step stats.

TensorFlow's gRPC worker records every RecvTensor RPC in the step stats of a traced step
(RunOptions.trace_level=FULL_TRACE): one NodeExecStats per received tensor on the receiving device,
``node_name`` "RecvTensor", ``all_start_micros`` when the request was issued, ``all_end_rel_micros``
until the tensor had arrived, and a ``timeline_label`` "[<size>] [<rate>] <edge name> from <device>
to <device>" (tensorflow/core/distributed_runtime/rpc/grpc_remote_worker.cc and
rpc_rendezvous_mgr.cc: RpcRecvTensorCall / RecvTensorAsync, with `stats` set when tracing).

`recvs(step_stats, device)` extracts them; the measures below turn one step's transfers into the
figures a replay simulator needs:

- `kendall_tau(order_a, order_b)`: rank agreement of two orders of the same items (1 same, -1
  reversed, about 0 unrelated);
- `mean_in_flight(intervals)`: the time-average, over the span from the first request to the last
  arrival, of how many transfers are requested and not yet arrived;
- `wire_intervals(recvs)`: when each transfer plausibly occupied the wire. A request's span
  [issued, arrived] includes waiting behind the transfers its connection served before it (TF opens
  one gRPC channel per remote task), so per (source, destination) pair of tasks the k-th arrival's
  wire span is taken as [max(issued, previous arrival on that pair), arrived]: exact when a
  connection serves one
  transfer at a time, and it cannot show interleaving inside one connection (`tau_size` in the
  benchmark tells that: fair sharing finishes small tensors first);
- `interleave(intervals)`: the fraction of all transfer time (sum of the intervals' lengths) during
  which the transfer shares the time with at least one other: 0 for strictly one-at-a-time
  transfers, near 1 when every transfer runs alongside others the whole time.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

_LABEL = re.compile(r"^\[(?P<size>[^\]]*)\] \[[^\]]*\] (?P<edge>\S+) from (?P<src>\S+) to (?P<dst>\S+)")
_EDGE = re.compile(r"^edge_\d+_(?P<node>.+)$")


@dataclass(frozen=True)
class Recv:
    """One received tensor: which graph node produced it, from where, and when (microseconds)."""

    node: str  # the sending node's name, e.g. "MatMul_3/ReadVariableOp"
    src: str  # the sending device
    dst: str  # the receiving device
    start_us: int  # request issued
    end_us: int  # tensor arrived

    @property
    def duration_us(self) -> int:
        return self.end_us - self.start_us


def recvs(step_stats: Any, device_prefix: str) -> list[Recv]:
    """The RecvTensor records of devices whose name starts with `device_prefix`, by arrival time."""
    out = []
    for dev in step_stats.dev_stats:
        if not dev.device.startswith(device_prefix):
            continue
        for ns in dev.node_stats:
            if ns.node_name != "RecvTensor":
                continue
            m = _LABEL.match(ns.timeline_label)
            if not m:
                continue
            edge = _EDGE.match(m.group("edge"))
            node = edge.group("node") if edge else m.group("edge")
            out.append(
                Recv(
                    node,
                    m.group("src"),
                    m.group("dst"),
                    ns.all_start_micros,
                    ns.all_start_micros + ns.all_end_rel_micros,
                )
            )
    out.sort(key=lambda r: (r.end_us, r.start_us))
    return out


def wire_intervals(received: Sequence[Recv]) -> list[tuple[int, int]]:
    """Per transfer (same order as `received`), its wire span; see the module docstring."""
    last: dict[tuple[str, str], int] = {}
    spans: list[tuple[int, int]] = [(0, 0)] * len(received)
    for i in sorted(range(len(received)), key=lambda k: (received[k].end_us, received[k].start_us)):
        r = received[i]
        spans[i] = (max(r.start_us, last.get((r.src, r.dst), r.start_us)), r.end_us)
        last[r.src, r.dst] = r.end_us
    return spans


def kendall_tau(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Kendall's tau-a between two orders (sequences) of the same distinct items."""
    if sorted(map(repr, a)) != sorted(map(repr, b)) or len(set(map(repr, a))) != len(a):
        raise ValueError("kendall_tau: both orders must hold the same distinct items")
    n = len(a)
    if n < 2:
        return 1.0
    pos = {repr(item): i for i, item in enumerate(b)}
    ranks = [pos[repr(item)] for item in a]
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            if ranks[i] < ranks[j]:
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


def mean_in_flight(intervals: Iterable[tuple[float, float]]) -> float:
    """Time-averaged number of open intervals over [first start, last end] (0 for an empty span)."""
    spans = [(s, e) for s, e in intervals if e >= s]
    if not spans:
        return 0.0
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    if hi <= lo:
        return float(len(spans))
    return sum(e - s for s, e in spans) / (hi - lo)


def interleave(intervals: Sequence[tuple[float, float]]) -> float:
    """Fraction of the summed transfer time during which another transfer is also in flight."""
    spans = [(s, e) for s, e in intervals if e > s]
    total = sum(e - s for s, e in spans)
    if total <= 0:
        return 0.0
    # Sweep the boundaries: between two consecutive boundaries the number open is constant.
    points = sorted({p for span in spans for p in span})
    shared = 0.0
    for lo, hi in itertools.pairwise(points):
        open_ = sum(1 for s, e in spans if s <= lo and e >= hi)
        if open_ >= 2:
            shared += open_ * (hi - lo)
    return shared / total
