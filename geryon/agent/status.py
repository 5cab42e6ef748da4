"""The snapshot behind the agent's status page (GET /status.json). Pure logic: the HTTP server reads the
kernel and the registries (geryon/agent/http_server.py) and hands the values in.

Live throughput is a byte-counter delta between two readings over their time delta: per flow (by its
4-tuple) and per class queue (by interface and class). The server keeps a short history of readings, so the
page only renders and several pollers do not shrink each other's interval to nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from geryon.agent.config import AgentConfig
    from geryon.agent.jobs import JobFlow, JobState, PairReport
    from geryon.agent.observe import ClassSample

K = TypeVar("K")
FlowId = tuple[str, int, str, int]  # local address, local port, peer address, peer port
QueueId = tuple[str, str]  # interface, class

# Rates span at least this long when the history allows (a 1 s poller and a second viewer share it).
MIN_INTERVAL_S = 0.5
MAX_HISTORY_S = 10.0
MAX_READINGS = 64


def rates(prev: Mapping[K, int], now: Mapping[K, int], dt: float) -> dict[K, float | None]:
    """Bits per second per key of `now`: 8 * (now - prev) / dt. None where it cannot be known: the key is
    new since `prev`, the counter went backwards (a new connection on the same 4-tuple, a rebuilt queue),
    or dt is not positive."""
    out: dict[K, float | None] = {}
    for key, value in now.items():
        before = prev.get(key)
        if before is None or value < before or dt <= 0:
            out[key] = None
        else:
            out[key] = 8.0 * (value - before) / dt
    return out


@dataclass(frozen=True)
class Reading:
    """The counters one snapshot saw, kept for the next snapshot's rates."""

    at: float  # monotonic seconds
    flow_sent: Mapping[FlowId, int] = field(default_factory=dict)
    flow_received: Mapping[FlowId, int] = field(default_factory=dict)
    queue_bytes: Mapping[QueueId, int] = field(default_factory=dict)


class History:
    """Recent readings; the base for a new snapshot is the newest one at least `min_interval` older (else
    the oldest there is). Not thread-safe: the server holds its lock around base() and add()."""

    def __init__(self, min_interval: float = MIN_INTERVAL_S, max_age: float = MAX_HISTORY_S) -> None:
        if min_interval <= 0 or max_age < min_interval:
            raise ValueError(f"history: need 0 < min_interval <= max_age, got {min_interval}, {max_age}")
        self.min_interval = min_interval
        self.max_age = max_age
        # Bounded even when many clients poll fast: a base then is merely closer than min_interval.
        self._readings: deque[Reading] = deque(maxlen=MAX_READINGS)

    def base(self, at: float) -> Reading | None:
        older = [r for r in self._readings if r.at < at]
        settled = [r for r in older if at - r.at >= self.min_interval]
        if settled:
            return settled[-1]
        return older[0] if older else None

    def add(self, reading: Reading) -> None:
        self._readings.append(reading)
        # Drop what is too old, but keep the newest reading that is old enough to be a base.
        while len(self._readings) > 1 and reading.at - self._readings[1].at >= self.max_age:
            self._readings.popleft()

    def __len__(self) -> int:
        return len(self._readings)


@dataclass(frozen=True)
class Observed:
    """What the server read for one snapshot. A section that failed is None, with its error in `errors`."""

    host: str
    version: str
    time: float  # unix seconds
    at: float  # monotonic seconds
    config: AgentConfig
    queues: Mapping[str, Sequence[ClassSample]] | None  # interface -> its class queues ([] = none)
    drift: Sequence[str] | None
    last_apply: float | None
    jobs: Sequence[JobState]
    pairs: Sequence[PairReport] | None
    errors: Mapping[str, str] = field(default_factory=dict)
    peer: Mapping[str, Any] | None = None  # PeerCheck.as_json() of the daemon's last switch check


def flow_id(jf: JobFlow) -> FlowId:
    f = jf.flow
    return (f.local, f.local_port, f.peer, f.peer_port)


def reading(obs: Observed) -> Reading:
    sent: dict[FlowId, int] = {}
    received: dict[FlowId, int] = {}
    for p in obs.pairs or ():
        for jf in p.flows:
            sent[flow_id(jf)] = jf.flow.bytes_sent
            received[flow_id(jf)] = jf.flow.bytes_received
    queue_bytes = {
        (ifname, s.class_name): s.bytes for ifname, samples in (obs.queues or {}).items() for s in samples
    }
    return Reading(obs.at, sent, received, queue_bytes)


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _classes(obs: Observed, queue_bps: Mapping[QueueId, float | None]) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(obs.config.classes):
        mine = [
            (ifname, s)
            for ifname, samples in (obs.queues or {}).items()
            for s in samples
            if s.class_name == c.name
        ]
        bps = [queue_bps.get((ifname, s.class_name)) for ifname, s in mine]
        queues = [
            {
                "interface": ifname,
                "bytes": s.bytes,
                "packets": s.packets,
                "drops": s.drops,
                "overlimits": s.overlimits,
                "backlog_bytes": s.backlog_bytes,
                "backlog_packets": s.backlog_packets,
                "bits_per_second": rate,
            }
            for (ifname, s), rate in zip(mine, bps, strict=True)
        ]
        out.append(
            {
                "index": i,
                "name": c.name,
                "dscp": c.dscp,
                "dscps": list(c.dscps),
                "priority": c.priority,
                "lossless": c.lossless,
                "tsa": c.tsa,
                "bandwidth": c.bandwidth if c.tsa == "ets" else None,
                "queues": queues,
                "bits_per_second": _sum(bps),
                "backlog_bytes": sum(s.backlog_bytes for _, s in mine) if mine else None,
                "drops": sum(s.drops for _, s in mine) if mine else None,
            }
        )
    return out


def _flow(jf: JobFlow, sent_bps: float | None, received_bps: float | None) -> dict[str, Any]:
    f = jf.flow.as_dict()
    return {
        "class": jf.class_name,
        "dscp": jf.flow.dscp,
        "role": jf.role,
        "local": f["local"],
        "remote": f["peer"],
        "bytes_sent": jf.flow.bytes_sent,
        "bytes_received": jf.flow.bytes_received,
        "sent_bps": sent_bps,
        "received_bps": received_bps,
        "rtt_ms": jf.flow.rtt_us / 1000,
        "retransmits": jf.flow.retransmits,
    }


def _pair(
    p: PairReport,
    order: Mapping[str, int],
    sent: Mapping[FlowId, float | None],
    received: Mapping[FlowId, float | None],
) -> dict[str, Any]:
    """One PS-worker pair; its flows in the job's class order (urgent first), unknown DSCPs last."""
    flows = sorted(
        p.flows, key=lambda jf: (order.get(jf.class_name, len(order)), jf.flow.local_port, jf.flow.peer_port)
    )
    return {
        "ps": p.ps.name,
        "worker": p.worker.name,
        "ok": p.ok,
        "connections": p.connections,
        "dscps": list(p.dscps),
        "missing": list(p.missing),
        "wrong": list(p.wrong),
        "problems": p.problems(),
        "flows": [_flow(jf, sent.get(flow_id(jf)), received.get(flow_id(jf))) for jf in flows],
    }


def _job(state: JobState, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "job_id": state.spec.job_id,
        "classes": [{"name": c.name, "dscp": c.dscp, "priority": c.priority} for c in state.spec.classes],
        "thresholds": list(state.thresholds) if state.thresholds is not None else None,
        "iteration_time_s": state.iteration_time_s,
        "registered_at": state.registered_at,
        "reported_at": state.reported_at,
        "reports": state.reports,
        "threshold_changes": state.threshold_changes,
        "threshold_changed_at": state.threshold_changed_at,
        # Flows with tensors the graph pass could not trace to a parameter, as their tasks reported them.
        "unresolved": [
            {
                "task": f.task,
                "peer": f.peer,
                "class": state.spec.classes[f.class_index].name,
                "direction": f.direction,
                "bytes": f.bytes,
                "messages": f.messages,
            }
            for f in state.unresolved
            if f.bytes > 0
        ],
        # Tasks whose data plane logged fallback warnings (issue 36), as they reported them.
        "fallback": [
            {"task": w.task, "warnings": w.warnings, "share": w.share, "cause": w.cause}
            for w in state.fallback
            if w.warnings > 0
        ],
        "pairs": pairs,
    }


def snapshot(obs: Observed, base: Reading | None) -> dict[str, Any]:
    """The JSON document the page renders. Rates are None without a base (the first request)."""
    now = reading(obs)
    dt = obs.at - base.at if base is not None else 0.0
    prev = base if base is not None else Reading(obs.at)
    queue_bps = rates(prev.queue_bytes, now.queue_bytes, dt)
    sent_bps = rates(prev.flow_sent, now.flow_sent, dt)
    received_bps = rates(prev.flow_received, now.flow_received, dt)
    order = {s.spec.job_id: {c.name: i for i, c in enumerate(s.spec.classes)} for s in obs.jobs}
    by_job: dict[str, list[dict[str, Any]]] = {}
    for p in obs.pairs or ():
        by_job.setdefault(p.job_id, []).append(_pair(p, order.get(p.job_id, {}), sent_bps, received_bps))
    return {
        "host": obs.host,
        "version": obs.version,
        "time": obs.time,
        "interval_s": dt if base is not None else None,
        "interfaces": [
            {"name": ifname, "queues_present": bool(obs.queues[ifname]) if obs.queues is not None else None}
            for ifname in obs.config.interfaces
        ],
        "config": {
            "in_sync": (not obs.drift) if obs.drift is not None else None,
            "drift": list(obs.drift or ()),
            "last_apply": obs.last_apply,
        },
        "peer": dict(obs.peer) if obs.peer is not None else None,
        "classes": _classes(obs, queue_bps),
        "jobs": [_job(s, by_job.get(s.spec.job_id, [])) for s in obs.jobs],
        "errors": dict(obs.errors),
    }
