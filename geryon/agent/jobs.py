"""Registered training jobs, and the mapping of discovered flows to their roles and PS-worker pairs.

Pure logic: flows come in as flows.Flow values, the agent's classes as anything with name/dscp/priority.
A job's cluster spec names the endpoints (host:port) its flows connect to; one end of every flow of the job
is such an endpoint, the other end is either another task's endpoint or an ephemeral port on a task's host.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from geryon.agent.flows import Flow, normalize_address
from geryon.tagger.map_table import validate_thresholds

PS_ROLES = frozenset({"ps"})
WORKER_ROLES = frozenset({"worker", "chief", "evaluator"})
ROLES = PS_ROLES | WORKER_ROLES
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_WILDCARDS = ("0.0.0.0", "::")


class JobError(ValueError):
    """A bad registration or report; the message names the field."""


class JobNotFound(KeyError):
    def __str__(self) -> str:
        return f"job_id: no job {self.args[0]!r} is registered"


class ClassLike(Protocol):
    """What this module needs of a configured priority class (config.ClassSpec fits)."""

    @property
    def name(self) -> str: ...
    @property
    def dscp(self) -> int: ...
    @property
    def priority(self) -> int: ...


@dataclass(frozen=True)
class Task:
    role: str
    index: int
    host: str  # as given in the cluster spec
    ip: str  # resolved and normalised
    port: int

    @property
    def name(self) -> str:
        return f"{self.role}:{self.index}"

    @property
    def endpoint(self) -> tuple[str, int]:
        return (self.ip, self.port)


@dataclass(frozen=True)
class JobClass:
    name: str
    dscp: int  # what the job's flows of this class are marked with
    priority: int
    extra_dscp: tuple[int, ...] = ()  # also accepted as this class (config ClassSpec.extra_dscp)

    @property
    def dscps(self) -> tuple[int, ...]:
        return (self.dscp, *self.extra_dscp)


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    tasks: tuple[Task, ...]
    classes: tuple[JobClass, ...]  # index 0 = most urgent
    # DSCPs of a pair's other connections (e.g. TF's unmarked control channel): neither counted nor flagged.
    ignore_dscp: frozenset[int] = frozenset()

    def cluster(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.tasks:
            out.setdefault(t.role, []).append(f"{t.host}:{t.port}")
        return out


DIRECTIONS = ("received", "sent")  # of an unresolved flow: its task consumed / produced the tensors


@dataclass(frozen=True)
class UnresolvedFlow:
    """A task's data-plane flow and the bytes on it whose edge resolved to no parameter (issue 16): the
    graph pass could not trace it, or it carries none. Cumulative, as the task's flow counters are."""

    task: str  # the reporting task, "worker:0"
    peer: str  # the other end, "ps:0"
    class_index: int  # 0 = most urgent
    direction: str  # DIRECTIONS
    bytes: int
    messages: int

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.task, self.peer, self.class_index, self.direction)


FALLBACK_CAUSES = ("no_map_table", "unresolved_share")  # why a task's data plane logged a fallback line


@dataclass(frozen=True)
class TaskFallback:
    """A task's fallback warnings (issue 36): lines its data plane logged because more than 1% of the
    bytes it sent in a window carried no parameter id. Cumulative, as its flow counters are."""

    task: str  # the reporting task, "worker:0"
    warnings: int
    share: float  # unresolved share of the window the last line was about, 0..1
    cause: str  # of the last line: FALLBACK_CAUSES


@dataclass(frozen=True)
class JobState:
    spec: JobSpec
    registered_at: float
    iteration_time_s: float | None = None
    thresholds: tuple[float, ...] | None = None
    reported_at: float | None = None
    reports: int = 0  # accepted reports that carried an iteration time (one per reported iteration)
    # Each change is one threshold-search trial; the first thresholds reported count as a change.
    threshold_changes: int = 0
    threshold_changed_at: float | None = None  # unix time of the last change; None until thresholds come
    # Per flow, the latest report of its task, sorted by key; only flows with unresolved tensors.
    unresolved: tuple[UnresolvedFlow, ...] = ()
    # Per task that logged fallback warnings, its latest report, sorted by task.
    fallback: tuple[TaskFallback, ...] = ()


def _resolve(host: str, where: str) -> str:
    try:
        return normalize_address(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as e:
        raise JobError(f"{where}: cannot resolve host {host!r} ({e.strerror or e})") from None
    # Prefer IPv4: gRPC's dual-stack sockets put IPv4 on the wire for IPv4 peers.
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    return normalize_address(str(infos[0][4][0]))


def parse_address(text: Any, where: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port)."""
    if not isinstance(text, str) or not text:
        raise JobError(f"{where}: expected 'host:port', got {text!r}")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise JobError(f"{where}: expected '[ipv6]:port', got {text!r}")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise JobError(f"{where}: expected 'host:port' (IPv6 as '[addr]:port'), got {text!r}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise JobError(f"{where}: port must be 1-65535, got {port_text!r} in {text!r}")
    return host, int(port_text)


def resolve_endpoint(text: Any, where: str) -> tuple[str, int]:
    """'host:port' -> (the host's address as the agent keys it, port): two spellings of one endpoint
    ('localhost:2222', '127.0.0.1:2222') give the same pair."""
    host, port = parse_address(text, where)
    return _resolve(host, where), port


def parse_cluster(spec: Any, where: str = "cluster") -> tuple[Task, ...]:
    """A TF cluster spec {"ps": [...], "worker": [...], "chief": [...]} -> tasks, validated."""
    if not isinstance(spec, Mapping):
        raise JobError(
            f"{where}: expected a mapping of role -> list of 'host:port', got {type(spec).__name__}"
        )
    tasks: list[Task] = []
    seen: dict[tuple[str, int], str] = {}
    unknown = [r for r in spec if r not in ROLES]
    if unknown:
        raise JobError(f"{where}: unknown role {unknown[0]!r}; allowed: {', '.join(sorted(ROLES))}")
    for role, addresses in spec.items():
        if isinstance(addresses, str | bytes) or not isinstance(addresses, Sequence):
            raise JobError(f"{where}.{role}: expected a list of 'host:port'")
        for i, text in enumerate(addresses):
            at = f"{where}.{role}[{i}]"
            host, port = parse_address(text, at)
            task = Task(role=role, index=i, host=host, ip=_resolve(host, at), port=port)
            if task.endpoint in seen:
                raise JobError(
                    f"{at}: {text!r} is also {seen[task.endpoint]}; each task needs its own endpoint"
                )
            seen[task.endpoint] = at
            tasks.append(task)
    if not any(t.role in PS_ROLES for t in tasks):
        raise JobError(f"{where}: needs at least one 'ps' task")
    if not any(t.role in WORKER_ROLES for t in tasks):
        raise JobError(f"{where}: needs at least one 'worker' or 'chief' task")
    return tuple(tasks)


def make_job(
    job_id: str,
    cluster: Any,
    configured: Sequence[ClassLike],
    class_names: Sequence[str] = (),
    ignore_dscp: Iterable[int] = (),
) -> JobSpec:
    """Validates a registration. `class_names` picks (in urgency order) which of the agent's configured
    classes the job uses; empty = all of them."""
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):
        raise JobError(
            f"job_id: {job_id!r} must be 1-64 characters of letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        )
    tasks = parse_cluster(cluster)
    by_name = {c.name: c for c in configured}
    names = list(class_names) or [c.name for c in configured]
    if len(set(names)) != len(names):
        raise JobError(f"classes: {names} names a class twice")
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise JobError(f"classes: unknown class {unknown[0]!r}; the agent has {', '.join(by_name) or 'none'}")
    if len(names) < 2:
        raise JobError(f"classes: a job needs at least 2 priority classes, got {len(names)}")
    classes = tuple(
        JobClass(n, by_name[n].dscp, by_name[n].priority, tuple(getattr(by_name[n], "extra_dscp", ())))
        for n in names
    )
    ignored = frozenset(ignore_dscp)
    for d in ignored:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= 63:
            raise JobError(f"ignore_dscp: {d!r} is not a DSCP (0-63)")
    clash = ignored & {d for c in classes for d in c.dscps}
    if clash:
        raise JobError(f"ignore_dscp: {sorted(clash)} is the DSCP of one of the job's classes")
    return JobSpec(job_id=job_id, tasks=tasks, classes=classes, ignore_dscp=ignored)


class JobRegistry:
    """The jobs registered with this agent; thread-safe (the gRPC server runs handlers on a pool)."""

    def __init__(self, clock: Any = time.time) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, JobState] = {}
        self._clock = clock

    def register(self, spec: JobSpec) -> bool:
        """Adds or replaces (a restarted launcher registers again); True when it replaced one."""
        with self._lock:
            replaced = spec.job_id in self._jobs
            self._jobs[spec.job_id] = JobState(spec=spec, registered_at=self._clock())
            return replaced

    def unregister(self, job_id: str) -> JobSpec:
        with self._lock:
            state = self._jobs.pop(job_id, None)
        if state is None:
            raise JobNotFound(job_id)
        return state.spec

    def get(self, job_id: str) -> JobState:
        with self._lock:
            state = self._jobs.get(job_id)
        if state is None:
            raise JobNotFound(job_id)
        return state

    def states(self) -> list[JobState]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda s: s.spec.job_id)

    def report(
        self,
        job_id: str,
        iteration_time_s: float | None,
        thresholds: Sequence[float] | None,
        unresolved: Sequence[UnresolvedFlow] = (),
        fallback: Sequence[TaskFallback] = (),
    ) -> JobState:
        """Records the job's latest iteration time and/or thresholds (k-1 for its k classes), counting
        iteration reports and threshold changes (thresholds equal to the current ones are no change),
        its tasks' unresolved flows (each replaces the last report of the same flow) and their fallback
        warnings (each replaces the last report of the same task)."""
        if iteration_time_s is not None and (
            not isinstance(iteration_time_s, int | float)
            or not math.isfinite(iteration_time_s)
            or iteration_time_s <= 0
        ):
            raise JobError(f"iteration_time_s: {iteration_time_s!r} must be a positive number of seconds")
        with self._lock:
            state = self._jobs.get(job_id)
            if state is None:
                raise JobNotFound(job_id)
            new_thresholds = state.thresholds
            if thresholds is not None:
                try:
                    new_thresholds = validate_thresholds(thresholds, "thresholds")
                except ValueError as e:
                    raise JobError(str(e)) from None
                k = len(state.spec.classes)
                if len(new_thresholds) != k - 1:
                    raise JobError(
                        f"thresholds: the job has {k} classes, so give {k - 1} thresholds, "
                        f"got {len(new_thresholds)}"
                    )
            flows = {f.key: f for f in state.unresolved}
            flows.update((f.key, f) for f in check_unresolved(state.spec, unresolved))
            warned = {w.task: w for w in state.fallback}
            warned.update((w.task, w) for w in check_fallback(state.spec, fallback))
            now = self._clock()
            changed = new_thresholds != state.thresholds
            new = replace(
                state,
                iteration_time_s=iteration_time_s if iteration_time_s is not None else state.iteration_time_s,
                thresholds=new_thresholds,
                reported_at=now,
                reports=state.reports + int(iteration_time_s is not None),
                threshold_changes=state.threshold_changes + int(changed),
                threshold_changed_at=now if changed else state.threshold_changed_at,
                unresolved=tuple(flows[k] for k in sorted(flows)),
                fallback=tuple(warned[t] for t in sorted(warned)),
            )
            self._jobs[job_id] = new
            return new


def check_unresolved(spec: JobSpec, flows: Sequence[UnresolvedFlow]) -> list[UnresolvedFlow]:
    """The reported flows, validated against the job: both ends tasks of its cluster, a class it has, a
    known direction, counts that are whole numbers; a flow named twice in one report is refused."""
    tasks = {t.name for t in spec.tasks}
    seen: set[tuple[str, str, int, str]] = set()
    for i, f in enumerate(flows):
        at = f"unresolved[{i}]"
        for name, value in (("task", f.task), ("peer", f.peer)):
            if value not in tasks:
                known = ", ".join(sorted(tasks))
                raise JobError(
                    f"{at}.{name}: {value!r} is no task of job {spec.job_id!r} (its tasks: {known})"
                )
        k = len(spec.classes)
        if (
            isinstance(f.class_index, bool)
            or not isinstance(f.class_index, int)
            or not 0 <= f.class_index < k
        ):
            raise JobError(f"{at}.class_index: {f.class_index!r}, but the job has {k} classes (0..{k - 1})")
        if f.direction not in DIRECTIONS:
            raise JobError(f"{at}.direction: {f.direction!r} must be one of {', '.join(DIRECTIONS)}")
        for name, count in (("bytes", f.bytes), ("messages", f.messages)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise JobError(f"{at}.{name}: {count!r} must be a whole number >= 0")
        if f.key in seen:
            raise JobError(
                f"{at}: the flow {f.task} {f.direction} {f.peer} class {f.class_index} is named twice"
            )
        seen.add(f.key)
    return list(flows)


def check_fallback(spec: JobSpec, reports: Sequence[TaskFallback]) -> list[TaskFallback]:
    """The reported fallback warnings, validated against the job: a task of its cluster (named once),
    a whole count, a share in [0, 1], a known cause (or none with no warnings)."""
    tasks = {t.name for t in spec.tasks}
    seen: set[str] = set()
    for i, w in enumerate(reports):
        at = f"fallback[{i}]"
        if w.task not in tasks:
            known = ", ".join(sorted(tasks))
            raise JobError(f"{at}.task: {w.task!r} is no task of job {spec.job_id!r} (its tasks: {known})")
        if isinstance(w.warnings, bool) or not isinstance(w.warnings, int) or w.warnings < 0:
            raise JobError(f"{at}.warnings: {w.warnings!r} must be a whole number >= 0")
        if not isinstance(w.share, int | float) or not 0.0 <= w.share <= 1.0:
            raise JobError(f"{at}.share: {w.share!r} must be a number in [0, 1]")
        if w.cause not in FALLBACK_CAUSES and not (w.warnings == 0 and w.cause == ""):
            raise JobError(f"{at}.cause: {w.cause!r} must be one of {', '.join(FALLBACK_CAUSES)}")
        if w.task in seen:
            raise JobError(f"{at}: the task {w.task} is named twice")
        seen.add(w.task)
    return list(reports)


# --- flows -> roles and pairs ---


@dataclass(frozen=True)
class JobFlow:
    """A flow of a job, seen from this host: the local socket's task and the task at the other end."""

    job_id: str
    flow: Flow
    local_task: Task | None
    peer_task: Task | None
    peer_label: str  # the peer task's name, or 'ip:*' when several tasks share the peer's host
    class_name: str  # the job class carrying this DSCP, or 'dscp<N>' when none does

    @property
    def role(self) -> str:
        return self.local_task.role if self.local_task else "unknown"

    @property
    def task_label(self) -> str:
        """The local socket's task ('worker:3'), or 'ip:*' when several tasks share this host's address."""
        return self.local_task.name if self.local_task else f"{self.flow.local}:*"


@dataclass(frozen=True)
class PairReport:
    """One PS-worker pair with a task on this host: its connections, and what is missing or wrong."""

    job_id: str
    ps: Task
    worker: Task
    connections: int
    dscps: tuple[int, ...]  # distinct DSCPs seen on the pair's sockets (ignored ones left out)
    missing: tuple[str, ...] = ()  # job classes with no flow carrying their DSCP
    wrong: tuple[int, ...] = ()  # DSCPs that belong to no class of the job
    flows: tuple[JobFlow, ...] = field(default=(), compare=False)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.wrong

    def problems(self) -> list[str]:
        out = [f"no flow for class {name!r}" for name in self.missing]
        out += [f"a flow carries DSCP {d}, which is no class of the job" for d in self.wrong]
        return out


def _local_tasks(spec: JobSpec, flows: Sequence[Flow], listeners: set[tuple[str, int]]) -> set[Task]:
    # A task runs here when its endpoint is listening here. A wildcard listener on the task's port counts
    # when the task's address is one of this host's (seen as the local end of some socket).
    local_ips = {f.local for f in flows} | {a for a, _ in listeners if a not in _WILDCARDS}
    out = set()
    for t in spec.tasks:
        if t.endpoint in listeners or (
            t.ip in local_ips and any((w, t.port) in listeners for w in _WILDCARDS)
        ):
            out.add(t)
    return out


def _classify(spec: JobSpec, dscp: int) -> str:
    for c in spec.classes:
        if dscp in c.dscps:
            return c.name
    return f"dscp{dscp}"


def map_job_flows(
    spec: JobSpec, flows: Sequence[Flow], listeners: set[tuple[str, int]]
) -> tuple[list[JobFlow], list[PairReport]]:
    """The job's flows with roles, and a report for every PS-worker pair with at least one task here."""
    by_endpoint = {t.endpoint: t for t in spec.tasks}
    by_ip: dict[str, list[Task]] = {}
    for t in spec.tasks:
        by_ip.setdefault(t.ip, []).append(t)

    def other_end(ip: str, known: Task) -> Task | None:
        # The ephemeral end of a connection to `known`: a task of the other kind on that host, if only one.
        kinds = WORKER_ROLES if known.role in PS_ROLES else PS_ROLES
        candidates = [t for t in by_ip.get(ip, ()) if t.role in kinds]
        return candidates[0] if len(candidates) == 1 else None

    job_flows: list[JobFlow] = []
    for f in flows:
        local_task = by_endpoint.get(f.local_endpoint)
        peer_task = by_endpoint.get(f.peer_endpoint)
        if local_task is None and peer_task is None:
            continue
        if local_task is None and peer_task is not None:
            local_task = other_end(f.local, peer_task)
        elif peer_task is None and local_task is not None:
            peer_task = other_end(f.peer, local_task)
        label = peer_task.name if peer_task else f"{f.peer}:*"
        job_flows.append(JobFlow(spec.job_id, f, local_task, peer_task, label, _classify(spec, f.dscp)))

    pairs: dict[tuple[Task, Task], list[JobFlow]] = {}
    here = _local_tasks(spec, flows, listeners)
    for ps in spec.tasks:
        if ps.role not in PS_ROLES:
            continue
        for w in spec.tasks:
            if w.role in WORKER_ROLES and (ps in here or w in here):
                pairs[(ps, w)] = []
    for jf in job_flows:
        a, b = jf.local_task, jf.peer_task
        if a is None or b is None:
            continue
        for key in ((a, b), (b, a)):
            if key in pairs:
                pairs[key].append(jf)

    job_dscps = {d for c in spec.classes for d in c.dscps}
    reports = []
    for (ps, w), pflows in pairs.items():
        counted = [jf for jf in pflows if jf.flow.dscp not in spec.ignore_dscp]
        # Both ends of a loopback connection are local sockets: count the connection once.
        connections = {frozenset((jf.flow.local_endpoint, jf.flow.peer_endpoint)) for jf in counted}
        dscps = sorted({jf.flow.dscp for jf in counted})
        reports.append(
            PairReport(
                job_id=spec.job_id,
                ps=ps,
                worker=w,
                connections=len(connections),
                dscps=tuple(dscps),
                missing=tuple(c.name for c in spec.classes if not set(c.dscps) & set(dscps)),
                wrong=tuple(d for d in dscps if d not in job_dscps),
                flows=tuple(pflows),
            )
        )
    return job_flows, reports


def map_all_jobs(
    states: Iterable[JobState], flows: Sequence[Flow], listeners: set[tuple[str, int]]
) -> tuple[list[JobFlow], list[PairReport]]:
    """map_job_flows over every registered job (a flow can only belong to the job whose endpoint it uses)."""
    all_flows: list[JobFlow] = []
    all_pairs: list[PairReport] = []
    for state in states:
        jf, pairs = map_job_flows(state.spec, flows, listeners)
        all_flows += jf
        all_pairs += pairs
    return all_flows, all_pairs
