"""Job registration (validation naming the field), the registry, flow -> role/pair mapping (pure logic)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.agent.config import ClassSpec, default_classes
from geryon.agent.flows import Flow
from geryon.agent.jobs import (
    JobError,
    JobNotFound,
    JobRegistry,
    UnresolvedFlow,
    make_job,
    map_job_flows,
    parse_address,
    parse_cluster,
)

SPEC = {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "chief": ["10.0.0.4:2222"]}


def flow(local: tuple[str, int], peer: tuple[str, int], dscp: int) -> Flow:
    return Flow(local[0], local[1], peer[0], peer[1], dscp, 100, 100, 0, 50, 0, inode=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("h:1", ("h", 1)), ("10.0.0.1:65535", ("10.0.0.1", 65535)), ("[fe80::1]:80", ("fe80::1", 80))],
)
def test_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text, "x") == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "cluster: expected a mapping"),
        ({"ps": ["a:1"], "gpu": ["b:1"]}, "cluster: unknown role 'gpu'"),
        ({"ps": "10.0.0.1:1", "worker": ["10.0.0.2:1"]}, "cluster.ps: expected a list"),
        ({"ps": ["10.0.0.1"], "worker": ["10.0.0.2:1"]}, "cluster.ps[0]: expected 'host:port'"),
        ({"ps": ["10.0.0.1:0"], "worker": ["10.0.0.2:1"]}, "cluster.ps[0]: port must be 1-65535"),
        ({"ps": ["10.0.0.1:99999"], "worker": ["10.0.0.2:1"]}, "cluster.ps[0]: port must be 1-65535"),
        ({"ps": ["fe80::1:80"], "worker": ["10.0.0.2:1"]}, "IPv6 as '[addr]:port'"),
        (
            {"ps": ["10.0.0.1:1"], "worker": ["10.0.0.1:1"]},
            "cluster.worker[0]: '10.0.0.1:1' is also cluster.ps[0]",
        ),
        ({"worker": ["10.0.0.2:1"]}, "needs at least one 'ps' task"),
        ({"ps": ["10.0.0.1:1"]}, "needs at least one 'worker' or 'chief'"),
        ({"ps": ["no-such-host.invalid:1"], "worker": ["10.0.0.2:1"]}, "cluster.ps[0]: cannot resolve host"),
    ],
)
def test_bad_cluster_specs_name_the_field(spec: object, message: str) -> None:
    with pytest.raises(JobError, match=re.escape(message)):
        parse_cluster(spec)


def test_cluster_resolves_and_names_tasks() -> None:
    tasks = parse_cluster({"ps": ["localhost:5", "[::ffff:10.0.0.1]:6"], "worker": ["10.0.0.2:7"]})
    assert [(t.name, t.ip, t.port) for t in tasks] == [
        ("ps:0", "127.0.0.1", 5),
        ("ps:1", "10.0.0.1", 6),
        ("worker:0", "10.0.0.2", 7),
    ]


def test_make_job_picks_classes_and_validates() -> None:
    job = make_job("j1", SPEC, default_classes())
    assert [(c.name, c.dscp, c.priority) for c in job.classes] == [("urgent", 46, 5), ("bulk", 26, 3)]
    assert job.cluster() == SPEC
    with pytest.raises(JobError, match="job_id: 'bad id'"):
        make_job("bad id", SPEC, default_classes())
    with pytest.raises(JobError, match="classes: unknown class 'gold'; the agent has urgent, bulk"):
        make_job("j1", SPEC, default_classes(), ["urgent", "gold"])
    with pytest.raises(JobError, match="classes: a job needs at least 2"):
        make_job("j1", SPEC, default_classes(), ["urgent"])
    with pytest.raises(JobError, match="names a class twice"):
        make_job("j1", SPEC, default_classes(), ["urgent", "urgent"])
    with pytest.raises(JobError, match=r"ignore_dscp: \[46\] is the DSCP of one of the job's classes"):
        make_job("j1", SPEC, default_classes(), ignore_dscp=[46])
    with pytest.raises(JobError, match="ignore_dscp: 64 is not a DSCP"):
        make_job("j1", SPEC, default_classes(), ignore_dscp=[64])


def test_registry_register_report_unregister() -> None:
    now = [100.0]
    reg = JobRegistry(clock=lambda: now[0])
    job = make_job("j1", SPEC, default_classes())
    assert reg.register(job) is False
    assert reg.register(job) is True  # a restarted launcher registers again
    now[0] = 105.0
    state = reg.report("j1", 0.25, [0.4])
    assert (state.iteration_time_s, state.thresholds, state.reported_at) == (0.25, (0.4,), 105.0)
    state = reg.report("j1", None, [0.6])  # threshold alone keeps the last iteration time
    assert (state.iteration_time_s, state.thresholds) == (0.25, (0.6,))
    with pytest.raises(JobError, match="thresholds: the job has 2 classes, so give 1"):
        reg.report("j1", None, [0.2, 0.4])
    with pytest.raises(JobError, match=r"thresholds\[0\]: 1.5 is not a number in \[0, 1\]"):
        reg.report("j1", None, [1.5])
    with pytest.raises(JobError, match="iteration_time_s: -1"):
        reg.report("j1", -1, None)
    with pytest.raises(JobError, match="iteration_time_s: nan"):
        reg.report("j1", float("nan"), None)
    assert reg.get("j1").thresholds == (0.6,)  # rejected reports changed nothing
    with pytest.raises(JobNotFound, match="no job 'nope'"):
        reg.report("nope", 1.0, None)
    assert reg.unregister("j1") == job
    assert reg.states() == []
    with pytest.raises(JobNotFound):
        reg.unregister("j1")


def test_registry_counts_reports_and_threshold_changes() -> None:
    now = [100.0]
    reg = JobRegistry(clock=lambda: now[0])
    reg.register(make_job("j1", SPEC, default_classes()))
    state = reg.get("j1")
    assert (state.reports, state.threshold_changes, state.threshold_changed_at) == (0, 0, None)
    state = reg.report("j1", 0.5, None)  # an iteration without thresholds: no change yet
    assert (state.reports, state.threshold_changes, state.threshold_changed_at) == (1, 0, None)
    now[0] = 110.0
    state = reg.report("j1", 0.4, [0.3])  # the first thresholds count as a change (a search trial)
    assert (state.reports, state.threshold_changes, state.threshold_changed_at) == (2, 1, 110.0)
    now[0] = 120.0
    state = reg.report("j1", 0.4, [0.3])  # the same thresholds again: not a change
    assert (state.reports, state.threshold_changes, state.threshold_changed_at) == (3, 1, 110.0)
    now[0] = 130.0
    state = reg.report("j1", None, [0.7])  # thresholds alone: a change, but no iteration
    assert (state.reports, state.threshold_changes, state.threshold_changed_at) == (3, 2, 130.0)
    with pytest.raises(JobError):
        reg.report("j1", 0.4, [0.2, 0.1])
    assert (reg.get("j1").reports, reg.get("j1").threshold_changes) == (3, 2)  # a rejected report counts not
    reg.register(make_job("j1", SPEC, default_classes()))  # a re-registered job starts over
    assert (reg.get("j1").reports, reg.get("j1").threshold_changes) == (0, 0)


def test_registry_keeps_the_latest_unresolved_counts_per_flow_and_names_bad_fields() -> None:
    reg = JobRegistry(clock=lambda: 100.0)
    reg.register(make_job("j1", SPEC, default_classes()))
    consumer = UnresolvedFlow("worker:0", "ps:0", 1, "received", 1016, 1)
    producer = UnresolvedFlow("ps:0", "worker:0", 1, "sent", 1016, 1)
    # Each task reports its own flows; a report alone (no iteration, no thresholds) is no iteration.
    reg.report("j1", None, None, [consumer])
    state = reg.report("j1", None, None, [producer])
    assert state.unresolved == (producer, consumer) and state.reports == 0  # sorted by task
    grown = UnresolvedFlow("worker:0", "ps:0", 1, "received", 3048, 3)
    state = reg.report("j1", 0.5, None, [grown])  # replaces that flow's count, keeps the others
    assert state.unresolved == (producer, grown) and state.reports == 1
    for bad, message in [
        (
            UnresolvedFlow("worker:7", "ps:0", 1, "received", 1, 1),
            r"unresolved\[0\]\.task: 'worker:7' is no task",
        ),
        (UnresolvedFlow("worker:0", "/job:ps", 1, "received", 1, 1), r"unresolved\[0\]\.peer: '/job:ps'"),
        (
            UnresolvedFlow("worker:0", "ps:0", 2, "received", 1, 1),
            r"class_index: 2, but the job has 2 classes",
        ),
        (UnresolvedFlow("worker:0", "ps:0", 0, "in", 1, 1), r"direction: 'in' must be one of received, sent"),
        (UnresolvedFlow("worker:0", "ps:0", 0, "sent", -1, 1), r"bytes: -1 must be a whole number"),
    ]:
        with pytest.raises(JobError, match=message):
            reg.report("j1", None, None, [bad])
    with pytest.raises(
        JobError, match=r"unresolved\[1\]: the flow worker:0 received ps:0 class 1 is named twice"
    ):
        reg.report("j1", None, None, [grown, grown])
    assert reg.get("j1").unresolved == (producer, grown)  # rejected reports changed nothing
    reg.register(make_job("j1", SPEC, default_classes()))  # a re-registered job starts over
    assert reg.get("j1").unresolved == ()


def test_mapping_on_the_ps_host() -> None:
    # This host is the PS (10.0.0.1); workers connect from ephemeral ports on their own hosts.
    job = make_job("j1", SPEC, default_classes(), ignore_dscp=[0])
    ps = ("10.0.0.1", 2222)
    flows = [
        flow(ps, ("10.0.0.2", 40001), 46),
        flow(ps, ("10.0.0.2", 40002), 26),
        flow(ps, ("10.0.0.2", 40003), 0),  # TF's own control channel, ignored
        flow(ps, ("10.0.0.3", 40001), 46),
        flow(ps, ("10.0.0.3", 40002), 8),
        flow(("10.0.0.1", 50000), ("10.9.9.9", 22), 0),  # not the job's
    ]
    job_flows, pairs = map_job_flows(job, flows, {("0.0.0.0", 2222)})
    assert len(job_flows) == 5
    assert {(jf.role, jf.peer_label) for jf in job_flows} == {("ps", "worker:0"), ("ps", "worker:1")}
    by = {p.worker.name: p for p in pairs}
    assert set(by) == {"worker:0", "worker:1", "chief:0"}  # the PS is here: all its pairs are expected
    assert by["worker:0"].ok and by["worker:0"].connections == 2
    assert by["worker:1"].wrong == (8,) and by["worker:1"].missing == ("bulk",)
    assert by["chief:0"].missing == ("urgent", "bulk") and by["chief:0"].connections == 0


def test_mapping_on_a_worker_host_and_ambiguous_hosts() -> None:
    spec = {"ps": ["10.0.0.1:2222", "10.0.0.1:2223"], "worker": ["10.0.0.2:2222"]}
    job = make_job("j1", spec, default_classes())
    flows = [
        flow(("10.0.0.2", 40001), ("10.0.0.1", 2222), 46),
        flow(("10.0.0.2", 40002), ("10.0.0.1", 2222), 26),
        flow(("10.0.0.2", 40003), ("10.0.0.1", 2223), 46),
    ]
    job_flows, pairs = map_job_flows(job, flows, {("10.0.0.2", 2222)})
    assert {jf.role for jf in job_flows} == {"worker"}
    by = {p.ps.name: p for p in pairs}
    assert by["ps:0"].ok and by["ps:1"].missing == ("bulk",)
    # Seen from a PS host: two PS tasks share 10.0.0.1, so a worker's flow to ... is still exact, while a
    # flow from an ephemeral port of a host with two workers cannot name the worker.
    spec2 = {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:1", "10.0.0.2:2"]}
    job2 = make_job("j2", spec2, default_classes())
    jfs, pairs2 = map_job_flows(
        job2, [flow(("10.0.0.1", 2222), ("10.0.0.2", 40001), 46)], {("10.0.0.1", 2222)}
    )
    assert jfs[0].peer_task is None and jfs[0].peer_label == "10.0.0.2:*"
    assert all(p.connections == 0 for p in pairs2)


def test_extra_dscp_counts_as_its_class() -> None:
    classes = (
        ClassSpec("urgent", 46, 5, True, extra_dscp=(34,)),
        ClassSpec("bulk", 26, 3, True),
    )
    job = make_job("j1", {"ps": ["10.0.0.1:1"], "worker": ["10.0.0.2:1"]}, classes)
    flows = [flow(("10.0.0.1", 1), ("10.0.0.2", 5), 34), flow(("10.0.0.1", 1), ("10.0.0.2", 6), 26)]
    job_flows, pairs = map_job_flows(job, flows, {("10.0.0.1", 1)})
    assert pairs[0].ok
    assert sorted(jf.class_name for jf in job_flows) == ["bulk", "urgent"]


def test_no_pairs_expected_when_no_task_runs_here() -> None:
    job = make_job("j1", SPEC, default_classes())
    assert map_job_flows(job, [], set()) == ([], [])


_ADDRESSES = st.sampled_from(
    ["10.0.0.1:1", "10.0.0.2:2222", "[fe80::1]:80", "10.0.0.1", ":80", "10.0.0.1:0", "[::1]80", "", "a:b:c"]
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _ADDRESSES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["ps", "worker", "x"]), inner)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    cluster=st.dictionaries(
        st.sampled_from(["ps", "worker", "chief", "gpu"]), _VALUES | st.lists(_ADDRESSES)
    ),
    job_id=st.text(max_size=70),
    classes=st.lists(st.sampled_from(["urgent", "bulk", "gold", ""]), max_size=3),
    ignore=st.lists(st.integers(-5, 70), max_size=3),
)
def test_registration_fuzz_rejects_only_with_job_error(
    cluster: dict, job_id: str, classes: list[str], ignore: list[int]
) -> None:
    # No DNS names in the pool (a resolver could stall the run): only literals and malformed text.
    try:
        job = make_job(job_id, cluster, default_classes(), classes, ignore)
    except JobError as e:
        assert str(e).split(":")[0]  # names a field
        return
    assert job.job_id == job_id and len(job.classes) >= 2
    assert {t.role for t in job.tasks} >= {"ps"}
