"""A task's unresolved data-plane bytes, reported to its host's agent (issue 16).

Tensors whose rendezvous edge resolves to no parameter (the graph pass could not trace it, or it carries
none) take the map_table's default class, the least urgent by default, and are counted per flow on both
ends (`FlowCounter.unresolved_bytes` / `unresolved_messages`). So that a model that defeats the pass is
visible where operators look, each task sends its flows' counts to the agent on its host, in the
`unresolved` field of `ReportIteration`, and the agent exports them (`geryon_job_unresolved_bytes_total`)
and shows them (`geryon agent status`).

Every ps and worker task started with geryon.tf.server() reports, with nothing set: it finds its job
among the jobs registered with the agent on its default socket, as the one whose cluster spec lists this
task (same job name and index, same host and port; `localhost` and `127.0.0.1` are the same host). No
agent socket on the host: nothing is sent. The launcher registers the job (`RegisterJob`) before or
after the tasks start (an unmatched task asks again, every interval at first, then at most every 60 s).
The environment overrides (a bad value fails geryon.tf.server() with an error naming the variable):

    GERYON_AGENT_JOB=job-17                        # report to this job; skips the search
    GERYON_AGENT_SOCKET=/run/geryon/agent.sock     # default; an absolute path
    GERYON_AGENT_REPORT_S=10                       # default: every 10 s, when the counts changed; off: never

The coordinator can pass an `AgentReporter` to `geryon.tf.strategy.ThresholdHook`, which then reports
each iteration's time and thresholds with the coordinator's own flows. An agent that is down or refuses
a report is logged (once per distinct error), never raised into training.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from geryon.errors import UsageError

log = logging.getLogger("geryon.tf.agent_report")

ENV_JOB = "GERYON_AGENT_JOB"
ENV_SOCKET = "GERYON_AGENT_SOCKET"
ENV_INTERVAL = "GERYON_AGENT_REPORT_S"
DEFAULT_API_SOCKET = "/run/geryon/agent.sock"  # the agent's --api-socket default
DEFAULT_INTERVAL_S = 10.0
MAX_INTERVAL_S = 3600.0
MAX_SEARCH_S = 60.0  # an unmatched task asks the agent at most this seldom once its backoff is spent
UNIX_PATH_MAX = 107  # sun_path's 108 bytes less the NUL
# The data plane's role of a flow -> the direction the agent labels it with, seen from the reporting task.
DIRECTION = {"consumer": "received", "producer": "sent"}

_TF_TASK = re.compile(r"^/job:([A-Za-z0-9_]+)/replica:\d+/task:(\d+)$")


def agent_task_name(tf_task: str) -> str | None:
    """The agent's name for a TF task ("/job:worker/replica:0/task:3" -> "worker:3"); None for other text."""
    m = _TF_TASK.match(tf_task)
    return f"{m.group(1)}:{int(m.group(2))}" if m else None


@dataclass(frozen=True)
class TaskIdentity:
    """This task as its job's cluster spec names it: job name, index and "host:port"."""

    job: str
    index: int
    address: str

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


@dataclass(frozen=True)
class UnresolvedCount:
    task: str
    peer: str
    class_index: int
    direction: str
    bytes: int
    messages: int


def unresolved_counts(counters: Iterable[Any]) -> list[UnresolvedCount]:
    """This process's flows (geryon.tf.FlowCounter) that carried unresolved tensors, sorted; flows
    with none are left out (nothing to report), and so are tasks named in a way the agent cannot know."""
    out = []
    for c in counters:
        if c.unresolved_messages == 0 and c.unresolved_bytes == 0:
            continue
        task, peer = agent_task_name(c.local_task), agent_task_name(c.peer_task)
        if task is None or peer is None or c.role not in DIRECTION:
            continue
        out.append(
            UnresolvedCount(task, peer, c.klass, DIRECTION[c.role], c.unresolved_bytes, c.unresolved_messages)
        )
    return sorted(out, key=lambda u: (u.task, u.peer, u.class_index, u.direction))


def _flow_counters() -> list[Any]:
    from geryon.tf.library import flow_counters

    return flow_counters()


@dataclass(frozen=True)
class FallbackCount:
    """The fallback warnings this process's data plane logged (issue 36; geryon.tf.classification_report)."""

    warnings: int
    share: float  # unresolved share of the window the last line was about
    cause: str  # "no_map_table" | "unresolved_share"


def _fallback_count() -> FallbackCount | None:
    from geryon.tf.library import is_loaded
    from geryon.tf.report import classification_report

    # A process that never loaded the extension has no data plane, so nothing fell back; and reading
    # would load TensorFlow into it (the agent's tests, a coordinator that only reports iterations).
    if not is_loaded():
        return None
    r = classification_report()
    return FallbackCount(r.warnings, r.last_share, r.last_cause) if r.warnings else None


class AgentReporter:
    """Sends this process's unresolved counts (and, when given, iteration time and thresholds) to the
    agent's ReportIteration over its unix socket. Thread-safe; `start()` reports every `interval_s`
    from a daemon thread, only when the counts changed.

    `job_id` None: the job is the registered one whose cluster spec lists `task` (found with the agent's
    GetStatus before the first report, and again when the agent no longer knows it); nothing is sent
    while none or several match, or while there is no socket at `api_socket`."""

    def __init__(
        self,
        job_id: str | None,
        api_socket: str | None = None,
        *,
        task: TaskIdentity | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 5.0,
        counters: Callable[[], Iterable[Any]] = _flow_counters,
        fallback: Callable[[], FallbackCount | None] = _fallback_count,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if job_id is None:
            if task is None:
                raise UsageError("job_id: give the id the job was registered with, or the task to find it by")
        elif not isinstance(job_id, str) or not job_id:
            raise UsageError(f"job_id: give the id the job was registered with, got {job_id!r}")
        self.job_id = job_id
        self.task = task
        self.searching = job_id is None  # the job is found (and found again) by `task`
        self.socket_path = api_socket or DEFAULT_API_SOCKET
        self.address = f"unix:{self.socket_path}"
        self.interval_s = check_interval(interval_s, "interval_s")
        self.timeout_s = timeout_s
        self._counters = counters
        self._fallback = fallback
        self._clock = clock
        self._lock = threading.Lock()
        self._channel: Any = None
        self._last: list[UnresolvedCount] | None = None  # what the agent last accepted
        self._last_fallback: FallbackCount | None = None
        self._logged: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_search = 0.0  # clock time before which an unmatched task does not ask again
        self._search_wait = self.interval_s
        self.reports = 0  # accepted by the agent

    def report(
        self, iteration_time_s: float | None = None, thresholds: Sequence[float] | None = None
    ) -> bool:
        """One report; True when the agent accepted it, False when there was nothing new to say, no job
        to say it to yet, or it failed (logged)."""
        import grpc

        from geryon.agent.proto import agent_pb2 as pb
        from geryon.agent.proto import agent_pb2_grpc as pb_grpc

        with self._lock:
            if self.job_id is None and not os.path.exists(self.socket_path):
                return False  # no agent on this host (yet): not even the counters are read
            flows = unresolved_counts(self._counters())
            # The task the warnings are about: this one, or the reporting task of its flows.
            fallback_task = self.task.name if self.task is not None else (flows[0].task if flows else None)
            fallback = self._fallback() if fallback_task is not None else None
            # Counts only grow in a process, so no flows now means none ever: nothing to say (the agent
            # refuses an empty report).
            new_flows = bool(flows) and flows != self._last
            new_fallback = fallback is not None and fallback != self._last_fallback
            if iteration_time_s is None and not thresholds and not new_flows and not new_fallback:
                return False
            job_id = self.job_id if self.job_id is not None else self._search()
            if job_id is None:
                return False
            request = pb.ReportIterationRequest(
                job_id=job_id,
                thresholds=list(thresholds or ()),
                unresolved=[
                    pb.UnresolvedFlow(
                        task=f.task,
                        peer=f.peer,
                        class_index=f.class_index,
                        direction=f.direction,
                        bytes=f.bytes,
                        messages=f.messages,
                    )
                    for f in flows
                ],
                fallback=[
                    pb.TaskFallback(
                        task=fallback_task,
                        warnings=fallback.warnings,
                        share=fallback.share,
                        cause=fallback.cause,
                    )
                ]
                if fallback is not None
                else [],
            )
            if iteration_time_s is not None:
                request.iteration_time_s = iteration_time_s
            try:
                pb_grpc.AgentStub(self._stub_channel()).ReportIteration(request, timeout=self.timeout_s)
            except grpc.RpcError as e:
                if self.searching and e.code() == grpc.StatusCode.NOT_FOUND:
                    # Unregistered meanwhile (a relaunch registers it again, maybe under another id).
                    log.info("geryon: job %s is no longer registered with the agent; looking again", job_id)
                    self.job_id, self._last, self._last_fallback = None, None, None
                    self._next_search, self._search_wait = 0.0, self.interval_s
                    return False
                self._log_once(f"{e.code().name}: {e.details()}")
                return False
            self._last, self._last_fallback = flows, fallback
            self.reports += 1
            return True

    def _stub_channel(self) -> Any:
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(self.address)
        return self._channel

    def _search(self) -> str | None:
        """Under the lock: the registered job whose cluster spec lists this task, or None (not yet)."""
        import grpc

        from geryon.agent.proto import agent_pb2 as pb
        from geryon.agent.proto import agent_pb2_grpc as pb_grpc

        assert self.task is not None
        now = self._clock()
        if now < self._next_search:
            return None
        # Asked every interval at first (the launcher may register the job just after the tasks start),
        # then less often, so a task no job lists costs the agent little.
        self._next_search = now + self._search_wait
        self._search_wait = min(self._search_wait * 2, max(MAX_SEARCH_S, self.interval_s))
        if not os.path.exists(self.socket_path):
            return None  # no agent on this host: nothing to report to, nothing to log
        try:
            status = pb_grpc.AgentStub(self._stub_channel()).GetStatus(
                pb.GetStatusRequest(), timeout=self.timeout_s
            )
        except grpc.RpcError as e:
            self._log_once(f"{e.code().name}: {e.details()}")
            return None
        jobs = sorted(j.job_id for j in status.jobs if lists_task(j.cluster, self.task))
        if len(jobs) > 1:
            self._log_once(
                f"the jobs {', '.join(jobs)} all list {self.task.name} at {self.task.address}; "
                f"set {ENV_JOB} to the one this task belongs to"
            )
            return None
        if not jobs:
            return None
        self.job_id = jobs[0]
        log.info(
            "geryon: task %s at %s reports to the agent's job %s (its cluster spec lists the task)",
            self.task.name,
            self.task.address,
            self.job_id,
        )
        return self.job_id

    def _log_once(self, why: str) -> None:
        # A training job runs for days: one line per distinct failure, not one per interval.
        if why not in self._logged:
            self._logged.add(why)
            log.warning(
                "geryon: reporting job %s to the agent at %s failed (%s)",
                self.job_id or f"of task {self.task.name if self.task else '?'}",
                self.address,
                why,
            )

    def start(self) -> AgentReporter:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="geryon-agent-report", daemon=True)
                self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.report()
            except Exception as e:  # the process's training must not die of its reporting
                self._log_once(f"{type(e).__name__}: {e}")

    def stop(self) -> None:
        """Stops the thread after one last report, so the final counts reach the agent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s)
        self.report()
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None


_endpoint_cache: dict[str, tuple[str, int] | None] = {}


def _endpoint(text: str) -> tuple[str, int] | None:
    """(address, port) of 'host:port' as the agent keys it; None when it does not parse or resolve.
    Cached: a task's own address and its job's do not change while it runs."""
    if text not in _endpoint_cache:
        from geryon.agent.jobs import JobError, resolve_endpoint

        try:
            _endpoint_cache[text] = resolve_endpoint(text, "address")
        except JobError:
            _endpoint_cache[text] = None
    return _endpoint_cache[text]


def lists_task(cluster: Mapping[str, Any], task: TaskIdentity) -> bool:
    """Whether a registered cluster spec (job name -> TaskAddresses) has `task` at its index, by the
    same text or the same resolved host and port."""
    entry = cluster.get(task.job)
    addresses = list(entry.addresses) if entry is not None else []
    if not 0 <= task.index < len(addresses):
        return False
    if addresses[task.index] == task.address:
        return True
    mine = _endpoint(task.address)
    return mine is not None and _endpoint(addresses[task.index]) == mine


def check_interval(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or not 0 < seconds <= MAX_INTERVAL_S:
        raise UsageError(f"{name}: {value!r} must be a number of seconds in (0, {MAX_INTERVAL_S:g}]")
    return seconds


def check_job_id(value: str, name: str) -> str:
    from geryon.agent.jobs import JOB_ID

    if not JOB_ID.match(value):
        raise UsageError(
            f"{name}: {value!r} is not a job id the agent accepts (1-64 characters of letters, digits, "
            "'_', '.', '-', starting with a letter or digit)"
        )
    return value


def check_socket(value: str, name: str) -> str:
    if not value.startswith("/") or len(value.encode()) > UNIX_PATH_MAX:
        raise UsageError(
            f"{name}: {value!r} must be the absolute path of the agent's unix socket "
            f"(at most {UNIX_PATH_MAX} bytes; the agent's --api-socket, default {DEFAULT_API_SOCKET})"
        )
    return value


_env_lock = threading.Lock()
_env_reporter: AgentReporter | None = None


def reporter_from_env(
    environ: Mapping[str, str] | None = None, task: TaskIdentity | None = None
) -> AgentReporter | None:
    """The reporter the environment asks for, not started: to job GERYON_AGENT_JOB when set, else to the
    registered job that lists `task` (None without a task); None when GERYON_AGENT_REPORT_S is off. A bad
    value is a UsageError naming the variable."""
    env = os.environ if environ is None else environ
    raw_interval = env.get(ENV_INTERVAL, "").strip()
    if raw_interval.lower() == "off":
        return None
    interval = check_interval(raw_interval or DEFAULT_INTERVAL_S, ENV_INTERVAL)
    raw_socket = env.get(ENV_SOCKET, "")
    sock = check_socket(raw_socket, ENV_SOCKET) if raw_socket else None
    job = env.get(ENV_JOB, "")
    if job:
        return AgentReporter(check_job_id(job, ENV_JOB), sock, task=task, interval_s=interval)
    if task is None:
        return None
    return AgentReporter(None, sock, task=task, interval_s=interval)


def start_from_env(task: TaskIdentity | None = None) -> AgentReporter | None:
    """Starts the environment's reporter once per process (geryon.tf.server() calls it with its task)."""
    global _env_reporter
    with _env_lock:
        if _env_reporter is None:
            reporter = reporter_from_env(task=task)
            if reporter is not None:
                _env_reporter = reporter.start()
        return _env_reporter
