"""Unresolved data-plane bytes (issue 16) from a task's reporter to a real agent (its API on a unix socket
and its metrics port on loopback): the Prometheus counters, /status.json, `geryon agent status`, and
reports the agent refuses. The reporter reads counters shaped as geryon.tf.flow_counters() gives them;
tests/tf/test_unresolved_counts.py runs the same path from real TensorFlow processes."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from tf.tf_cluster import agent_services

from geryon.agent import cli_obs
from geryon.agent.proto import agent_pb2 as pb
from geryon.agent.proto import agent_pb2_grpc as pb_grpc
from geryon.agent.service import Services
from geryon.errors import UsageError
from geryon.tf import FlowCounter
from geryon.tf.agent_report import (
    AgentReporter,
    FallbackCount,
    TaskIdentity,
    agent_task_name,
    reporter_from_env,
    unresolved_counts,
)

CLUSTER = {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]}
PS, W0, W1 = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"


def counter(role: str, local: str, peer: str, klass: int, unresolved: int, messages: int) -> FlowCounter:
    return FlowCounter(
        role=role,
        local_task=local,
        peer_task=peer,
        klass=klass,
        dscp=26,
        local_port=1,
        peer_port=2,
        bytes_sent=0,
        bytes_received=unresolved + 4096,
        messages_sent=0,
        messages_received=messages + 1,
        queue_ns=0,
        connections=1,
        errors=0,
        aborted=0,
        unresolved_bytes=unresolved,
        unresolved_messages=messages,
    )


@pytest.fixture
def agent() -> Iterator[tuple[Services, str, str]]:
    """A real agent's services, job "ju" of CLUSTER registered: API on a private unix socket, metrics on a
    free loopback port."""
    with agent_services(CLUSTER, job_id="ju") as services:
        yield services


def metrics(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text: str = r.read().decode()
        return text


def status_args(sock: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="geryon agent")
    cli_obs.register(parser.add_subparsers(dest="sub", required=True))
    return parser.parse_args(["status", "--api-socket", sock, *extra])


def test_task_names_and_which_flows_are_reported() -> None:
    assert agent_task_name(W1) == "worker:1" and agent_task_name("/job:ps/replica:0/task:12") == "ps:12"
    assert agent_task_name("worker:1") is None and agent_task_name("/job:ps/task:0") is None
    rows = [
        counter("consumer", W0, PS, 1, 1016, 1),
        counter("consumer", W0, PS, 0, 0, 0),  # nothing unresolved: nothing to say
        counter("producer", PS, W0, 1, 1016, 1),
        counter("consumer", W0, "/job:ps/task:0", 1, 5, 1),  # not a task name the agent knows
    ]
    assert [(u.task, u.peer, u.class_index, u.direction, u.bytes) for u in unresolved_counts(rows)] == [
        ("ps:0", "worker:0", 1, "sent", 1016),
        ("worker:0", "ps:0", 1, "received", 1016),
    ]


def test_unresolved_flows_reach_metrics_status_and_the_cli(
    agent: tuple[Services, str, str], capsys: pytest.CaptureFixture
) -> None:
    svc, sock, base = agent
    worker_rows = [counter("consumer", W0, PS, 1, 1016, 1), counter("consumer", W0, PS, 0, 0, 0)]
    ps_rows = [counter("producer", PS, W0, 1, 1016, 1), counter("producer", PS, W1, 0, 0, 0)]
    worker = AgentReporter("ju", sock, counters=lambda: worker_rows)
    ps = AgentReporter("ju", sock, counters=lambda: ps_rows)
    assert worker.report() and ps.report()
    assert not worker.report()  # nothing changed: nothing sent
    text = metrics(base)
    labels = 'class="bulk",direction="{}",geryon_job="ju",peer="{}",task="{}"'
    assert (
        f"geryon_job_unresolved_bytes_total{{{labels.format('received', 'ps:0', 'worker:0')}}} 1016.0" in text
    )
    assert f"geryon_job_unresolved_bytes_total{{{labels.format('sent', 'worker:0', 'ps:0')}}} 1016.0" in text
    assert f"geryon_job_unresolved_messages_total{{{labels.format('sent', 'worker:0', 'ps:0')}}} 1.0" in text
    assert 'class="urgent"' not in text.split("geryon_job_unresolved_bytes", 1)[1].split("# HELP", 1)[0]
    assert svc.jobs.get("ju").reports == 0  # counts alone are no iteration

    # The counts grow; the next report replaces them (the agent keeps the latest per flow).
    worker_rows[0] = counter("consumer", W0, PS, 1, 3048, 3)
    assert worker.report(iteration_time_s=0.25, thresholds=[0.5])
    text = metrics(base)
    assert (
        f"geryon_job_unresolved_bytes_total{{{labels.format('received', 'ps:0', 'worker:0')}}} 3048.0" in text
    )
    assert svc.jobs.get("ju").reports == 1

    assert cli_obs.run_status(status_args(sock)) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if "unresolved" in line]
    assert lines == [
        "unresolved: ps:0 sent to worker:0, class bulk: 1016 bytes in 1 tensor(s) the graph pass could not "
        "trace to a parameter",
        "unresolved: worker:0 received from ps:0, class bulk: 3048 bytes in 3 tensor(s) the graph pass could "
        "not trace to a parameter",
    ]
    with urllib.request.urlopen(base + "/status.json", timeout=10) as r:
        [job] = json.loads(r.read())["jobs"]
    assert job["unresolved"][1] == {
        "task": "worker:0",
        "peer": "ps:0",
        "class": "bulk",
        "direction": "received",
        "bytes": 3048,
        "messages": 3,
    }


def test_a_job_without_unresolved_bytes_says_nothing(
    agent: tuple[Services, str, str], capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    _, sock, base = agent
    caplog.set_level(logging.WARNING, logger="geryon.tf.agent_report")
    quiet = AgentReporter("ju", sock, counters=lambda: [counter("consumer", W0, PS, 0, 0, 0)])
    assert not quiet.report()  # nothing to say: no empty report (the agent would refuse it)
    assert quiet.report(iteration_time_s=0.1)
    assert cli_obs.run_status(status_args(sock)) == 0
    out = capsys.readouterr().out
    assert "job ju:" in out and "unresolved" not in out
    assert "geryon_job_unresolved_bytes_total{" not in metrics(base)
    assert caplog.records == []  # every report it sent was accepted


def test_reports_the_agent_refuses_name_the_field(agent: tuple[Services, str, str]) -> None:
    svc, sock, _ = agent
    bad: list[tuple[dict[str, Any], str]] = [
        ({"task": "worker:9"}, "unresolved[0].task: 'worker:9' is no task of job 'ju'"),
        ({"class_index": 5}, "unresolved[0].class_index: 5, but the job has 2 classes (0..1)"),
        ({"direction": "in"}, "unresolved[0].direction: 'in' must be one of received, sent"),
    ]
    ch = grpc.insecure_channel(f"unix:{sock}")
    with ch:
        for change, message in bad:
            fields: dict[str, Any] = {
                "task": "worker:0",
                "peer": "ps:0",
                "class_index": 1,
                "direction": "sent",
            }
            fields.update(change)
            request = pb.ReportIterationRequest(
                job_id="ju", unresolved=[pb.UnresolvedFlow(**fields, bytes=1)]
            )
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.AgentStub(ch).ReportIteration(request, timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
    assert svc.jobs.get("ju").unresolved == ()


def test_a_reporter_without_an_agent_logs_once_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    rows = [counter("consumer", W0, PS, 1, 1016, 1)]
    reporter = AgentReporter("ju", "/nonexistent/agent.sock", timeout_s=0.5, counters=lambda: rows)
    with caplog.at_level(logging.WARNING, logger="geryon.tf.agent_report"):
        assert not reporter.report() and not reporter.report(iteration_time_s=1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "unix:/nonexistent/agent.sock failed (UNAVAILABLE" in lines[0], lines


def test_environment_values_are_checked_naming_the_variable() -> None:
    task = TaskIdentity("worker", 0, "10.0.0.2:2222")
    assert reporter_from_env({}) is None  # no job and no task to find one by
    r = reporter_from_env({"GERYON_AGENT_JOB": "ju", "GERYON_AGENT_SOCKET": "/x/a.sock"})
    assert r is not None and (r.job_id, r.address, r.interval_s) == ("ju", "unix:/x/a.sock", 10.0)
    # Nothing set: a task reports to the default socket, to the job that lists it.
    r = reporter_from_env({}, task=task)
    assert r is not None and (r.job_id, r.searching, r.address) == (None, True, "unix:/run/geryon/agent.sock")
    assert reporter_from_env({"GERYON_AGENT_REPORT_S": "off"}, task=task) is None
    assert reporter_from_env({"GERYON_AGENT_JOB": "ju", "GERYON_AGENT_REPORT_S": "OFF"}) is None
    for value in ("0", "-1", "soon", "nan", "7200"):
        with pytest.raises(UsageError, match=f"GERYON_AGENT_REPORT_S: '{value}' must be a number of seconds"):
            reporter_from_env({"GERYON_AGENT_JOB": "ju", "GERYON_AGENT_REPORT_S": value})
    for value in ("job 17", "-j", "x" * 65):
        with pytest.raises(
            UsageError, match=f"GERYON_AGENT_JOB: '{value}' is not a job id the agent accepts"
        ):
            reporter_from_env({"GERYON_AGENT_JOB": value}, task=task)
    for value in ("agent.sock", "run/geryon/agent.sock", "/" + "s" * 200):
        with pytest.raises(UsageError, match=f"GERYON_AGENT_SOCKET: '{value}' must be the absolute path"):
            reporter_from_env({"GERYON_AGENT_SOCKET": value}, task=task)


def register(sock: str, job_id: str, cluster: dict[str, list[str]]) -> None:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        pb_grpc.AgentStub(ch).RegisterJob(
            pb.RegisterJobRequest(
                job_id=job_id, cluster={r: pb.TaskAddresses(addresses=a) for r, a in cluster.items()}
            ),
            timeout=5,
        )


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_task_finds_its_job_by_its_place_in_the_cluster_spec(
    agent: tuple[Services, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    svc, sock, _ = agent
    caplog.set_level(logging.INFO, logger="geryon.tf.agent_report")
    rows = [counter("consumer", W1, PS, 1, 1016, 1)]
    clock = _Clock()
    # worker 1 as its own cluster spec spells it ("localhost" where the launcher registered 10.0.0.3 is
    # another host: not this task).
    other = AgentReporter(None, sock, task=TaskIdentity("worker", 1, "localhost:2222"), counters=lambda: rows)
    assert not other.report() and other.job_id is None
    reporter = AgentReporter(
        None, sock, task=TaskIdentity("worker", 1, "10.0.0.3:2222"), counters=lambda: rows, clock=clock
    )
    assert reporter.report() and reporter.job_id == "ju"
    assert [(f.task, f.peer, f.bytes) for f in svc.jobs.get("ju").unresolved] == [("worker:1", "ps:0", 1016)]
    assert "task worker:1 at 10.0.0.3:2222 reports to the agent's job ju" in caplog.text

    # The job is unregistered and registered again under another id (a relaunch): found again.
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        pb_grpc.AgentStub(ch).UnregisterJob(pb.UnregisterJobRequest(job_id="ju"), timeout=5)
    register(sock, "ju2", CLUSTER)
    rows[0] = counter("consumer", W1, PS, 1, 2032, 2)
    assert not reporter.report() and reporter.job_id is None  # NOT_FOUND: looks again next time
    assert reporter.report() and reporter.job_id == "ju2"
    assert [f.bytes for f in svc.jobs.get("ju2").unresolved] == [2032]

    # Two jobs list the task: it reports to neither and says which variable settles it, once.
    register(sock, "ju3", CLUSTER)
    ambiguous = AgentReporter(
        None, sock, task=TaskIdentity("ps", 0, "10.0.0.1:2222"), counters=lambda: rows, clock=clock
    )
    caplog.clear()
    assert not ambiguous.report()
    clock.now += 3600
    assert not ambiguous.report()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"geryon: reporting job of task ps:0 to the agent at unix:{sock} failed (the jobs ju2, ju3 all list "
        "ps:0 at 10.0.0.1:2222; set GERYON_AGENT_JOB to the one this task belongs to)"
    ]


def test_an_unmatched_task_asks_less_often_and_a_host_without_an_agent_not_at_all(
    agent: tuple[Services, str, str], tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, sock, _ = agent
    rows = [counter("consumer", W0, PS, 1, 1016, 1)]
    clock = _Clock()
    task = TaskIdentity("worker", 0, "10.0.0.9:2222")  # listed by no registered job
    asked: list[float] = []
    reporter = AgentReporter(None, sock, task=task, interval_s=1.0, counters=lambda: rows, clock=clock)
    original = reporter._search

    def counting() -> str | None:
        before = reporter._next_search
        found = original()
        if reporter._next_search != before:
            asked.append(clock.now)
        return found

    reporter._search = counting  # type: ignore[method-assign]
    for _ in range(400):  # 400 s of 1 s intervals
        assert not reporter.report()
        clock.now += 1.0
    # 1, 2, 4, ... 32 s apart, then every 60 s.
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0] and set(gaps[6:]) == {60.0}, gaps

    caplog.set_level(logging.INFO, logger="geryon.tf.agent_report")
    nowhere = AgentReporter(None, str(tmp_path / "agent.sock"), task=task, counters=lambda: rows)
    assert not nowhere.report() and caplog.records == []  # no agent on this host: silence


class _Searcher:
    def __init__(self) -> None:
        self.reports: list[tuple[tuple[float, ...], float]] = []

    def next_threshold(self) -> list[float]:
        return [0.5]

    def report(self, thresholds: tuple[float, ...], seconds: float) -> None:
        self.reports.append((thresholds, seconds))


class _Strategy:
    """What ThresholdHook uses of a GeryonStrategy: thresholds in force, and a way to change them."""

    thresholds: tuple[float, ...] = (0.5,)

    def set_thresholds(self, thresholds: tuple[float, ...]) -> None:
        self.thresholds = thresholds


def test_threshold_hook_reports_iterations_with_the_coordinators_flows(
    agent: tuple[Services, str, str],
) -> None:
    from geryon.tf.strategy import ThresholdHook

    svc, sock, base = agent
    rows = [counter("consumer", "/job:chief/replica:0/task:0", PS, 1, 64, 1)]
    cluster_with_chief = {**CLUSTER, "chief": ["10.0.0.4:2222"]}
    ch = grpc.insecure_channel(f"unix:{sock}")
    with ch:
        pb_grpc.AgentStub(ch).RegisterJob(
            pb.RegisterJobRequest(
                job_id="ju", cluster={r: pb.TaskAddresses(addresses=a) for r, a in cluster_with_chief.items()}
            ),
            timeout=5,
        )
    searcher = _Searcher()
    hook = ThresholdHook(searcher, _Strategy(), reporter=AgentReporter("ju", sock, counters=lambda: rows))
    for seconds in (0.3, 0.2):
        hook.begin()
        hook.end(iteration_time=seconds)
    state = svc.jobs.get("ju")
    assert (state.reports, state.iteration_time_s, state.thresholds) == (2, 0.2, (0.5,))
    assert [(f.task, f.peer, f.direction, f.bytes) for f in state.unresolved] == [
        ("chief:0", "ps:0", "received", 64)
    ]
    assert searcher.reports == [((0.5,), 0.3), ((0.5,), 0.2)]
    assert 'geryon_job_iteration_seconds{geryon_job="ju"} 0.2' in metrics(base)


def test_fallback_warnings_reach_metrics_status_and_the_cli(
    agent: tuple[Services, str, str], capsys: pytest.CaptureFixture
) -> None:
    # issue 36: a task whose data plane logged fallback lines reports how many, the last share and cause.
    svc, sock, base = agent
    warned: list[FallbackCount | None] = [None]
    rows = [counter("producer", PS, W0, 1, 1016, 1)]
    ps = AgentReporter(
        "ju",
        sock,
        task=TaskIdentity("ps", 0, "10.0.0.1:2222"),
        counters=lambda: rows,
        fallback=lambda: warned[0],
    )
    assert ps.report()
    assert "geryon_job_fallback_warnings_total{" not in metrics(base)  # none logged: no series
    warned[0] = FallbackCount(1, 0.987, "no_map_table")
    assert ps.report()  # the flows are unchanged, the warnings are new
    assert not ps.report()
    text = metrics(base)
    assert 'geryon_job_fallback_warnings_total{cause="no_map_table",geryon_job="ju",task="ps:0"} 1.0' in text
    assert 'geryon_job_fallback_share{geryon_job="ju",task="ps:0"} 0.987' in text
    assert svc.jobs.get("ju").fallback[0].warnings == 1

    assert cli_obs.run_status(status_args(sock)) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if "fallback" in line]
    assert lines == [
        "fallback: ps:0 logged 1 warning(s), last 98.7% of its bytes sent on the default class "
        "(no map_table installed); see its log"
    ]
    with urllib.request.urlopen(base + "/status.json", timeout=10) as r:
        [job] = json.loads(r.read())["jobs"]
    assert job["fallback"] == [{"task": "ps:0", "warnings": 1, "share": 0.987, "cause": "no_map_table"}]


def test_fallback_reports_the_agent_refuses_name_the_field(agent: tuple[Services, str, str]) -> None:
    svc, sock, _ = agent
    bad: list[tuple[dict[str, Any], str]] = [
        ({"task": "worker:9"}, "fallback[0].task: 'worker:9' is no task of job 'ju'"),
        ({"share": 1.5}, "fallback[0].share: 1.5 must be a number in [0, 1]"),
        ({"cause": "tired"}, "fallback[0].cause: 'tired' must be one of no_map_table, unresolved_share"),
    ]
    ch = grpc.insecure_channel(f"unix:{sock}")
    with ch:
        for change, message in bad:
            fields: dict[str, Any] = {
                "task": "worker:0",
                "warnings": 1,
                "share": 0.5,
                "cause": "unresolved_share",
            }
            fields.update(change)
            request = pb.ReportIterationRequest(job_id="ju", fallback=[pb.TaskFallback(**fields)])
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.AgentStub(ch).ReportIteration(request, timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
    assert svc.jobs.get("ju").fallback == ()
