"""A task's unresolved data-plane bytes, reported to its host's agent (issue 16).

Tensors whose rendezvous edge resolves to no parameter (the graph pass could not trace it, or it carries
none) take the map_table's default class, the least urgent by default, and are counted per flow on both
ends (`FlowCounter.unresolved_bytes` / `unresolved_messages`). So that a model that defeats the pass is
visible where operators look, each task sends its flows' counts to the agent on its host, in the
`unresolved` field of `ReportIteration`, and the agent exports them (`geryon_job_unresolved_bytes_total`)
and shows them (`geryon agent status`).

    # every ps and worker task: set in the environment before geryon.tf.server() starts it
    GERYON_AGENT_JOB=job-17                        # the job id the launcher registered with the agent
    GERYON_AGENT_SOCKET=/run/geryon/agent.sock     # default
    GERYON_AGENT_REPORT_S=10                       # default: every 10 s, when the counts changed

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
# The data plane's role of a flow -> the direction the agent labels it with, seen from the reporting task.
DIRECTION = {"consumer": "received", "producer": "sent"}

_TF_TASK = re.compile(r"^/job:([A-Za-z0-9_]+)/replica:\d+/task:(\d+)$")


def agent_task_name(tf_task: str) -> str | None:
    """The agent's name for a TF task ("/job:worker/replica:0/task:3" -> "worker:3"); None for other text."""
    m = _TF_TASK.match(tf_task)
    return f"{m.group(1)}:{int(m.group(2))}" if m else None


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
    from geryon.tf import flow_counters

    return flow_counters()


class AgentReporter:
    """Sends this process's unresolved counts (and, when given, iteration time and thresholds) to the
    agent's ReportIteration over its unix socket. Thread-safe; `start()` reports every `interval_s`
    from a daemon thread, only when the counts changed."""

    def __init__(
        self,
        job_id: str,
        api_socket: str | None = None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 5.0,
        counters: Callable[[], Iterable[Any]] = _flow_counters,
    ) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise UsageError(f"job_id: give the id the job was registered with, got {job_id!r}")
        self.job_id = job_id
        self.address = f"unix:{api_socket or DEFAULT_API_SOCKET}"
        self.interval_s = check_interval(interval_s, "interval_s")
        self.timeout_s = timeout_s
        self._counters = counters
        self._lock = threading.Lock()
        self._channel: Any = None
        self._last: list[UnresolvedCount] | None = None  # what the agent last accepted
        self._logged: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reports = 0  # accepted by the agent

    def report(
        self, iteration_time_s: float | None = None, thresholds: Sequence[float] | None = None
    ) -> bool:
        """One report; True when the agent accepted it, False when there was nothing new to say or it
        failed (logged)."""
        import grpc

        from geryon.agent.proto import agent_pb2 as pb
        from geryon.agent.proto import agent_pb2_grpc as pb_grpc

        with self._lock:
            flows = unresolved_counts(self._counters())
            # Counts only grow in a process, so no flows now means none ever: nothing to say (the agent
            # refuses an empty report).
            if iteration_time_s is None and not thresholds and (not flows or flows == self._last):
                return False
            request = pb.ReportIterationRequest(
                job_id=self.job_id,
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
            )
            if iteration_time_s is not None:
                request.iteration_time_s = iteration_time_s
            if self._channel is None:
                self._channel = grpc.insecure_channel(self.address)
            try:
                pb_grpc.AgentStub(self._channel).ReportIteration(request, timeout=self.timeout_s)
            except grpc.RpcError as e:
                self._log_once(f"{e.code().name}: {e.details()}")
                return False
            self._last = flows
            self.reports += 1
            return True

    def _log_once(self, why: str) -> None:
        # A training job runs for days: one line per distinct failure, not one per interval.
        if why not in self._logged:
            self._logged.add(why)
            log.warning(
                "geryon: reporting job %s to the agent at %s failed (%s)", self.job_id, self.address, why
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


def check_interval(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or not 0 < seconds <= MAX_INTERVAL_S:
        raise UsageError(f"{name}: {value!r} must be a number of seconds in (0, {MAX_INTERVAL_S:g}]")
    return seconds


_env_lock = threading.Lock()
_env_reporter: AgentReporter | None = None


def reporter_from_env(environ: Mapping[str, str] | None = None) -> AgentReporter | None:
    """The reporter the environment asks for (GERYON_AGENT_JOB set and not empty), not started; a bad
    value is a UsageError naming the variable. None when the job id is not set."""
    env = os.environ if environ is None else environ
    job = env.get(ENV_JOB, "")
    if not job:
        return None
    interval = check_interval(env.get(ENV_INTERVAL, DEFAULT_INTERVAL_S), ENV_INTERVAL)
    return AgentReporter(job, env.get(ENV_SOCKET) or None, interval_s=interval)


def start_from_env() -> AgentReporter | None:
    """Starts the environment's reporter once per process (geryon.tf.server() calls it)."""
    global _env_reporter
    with _env_lock:
        if _env_reporter is None:
            reporter = reporter_from_env()
            if reporter is not None:
                _env_reporter = reporter.start()
        return _env_reporter
