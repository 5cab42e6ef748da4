"""The job record (pure): every malformed field refused with a message naming it; the cluster checks
(unknown host, a job claiming another's tasks, the earlier registration keeping them)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from geryon.jobs.registration import (
    Registered,
    RegistrationError,
    check_cluster,
    make_record,
    parse_record,
)

GOOD: dict[str, Any] = {
    "format": "geryon.job",
    "version": 1,
    "job": "resnet-a",
    "classes": 2,
    "tasks": {
        "chief:0": "hostA:2222",
        "worker:0": "hostA:2223",
        "ps:0": "10.0.0.2:2222",
        "ps:1": "[::1]:2224",
    },
    "intensity": {"compute_s": 0.15, "iteration_s": 0.25, "bytes": 102400000},
}


def test_a_good_record_round_trips() -> None:
    record = parse_record(GOOD)
    assert record.hosts == ("10.0.0.2", "::1", "hosta")
    assert record.intensity.gpu == pytest.approx(0.6)
    assert parse_record(record.dumps()) == record
    assert parse_record(json.dumps(GOOD).encode()) == record


def with_field(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("format", "geryon.map_table", "format: 'geryon.map_table'; must be 'geryon.job'"),
        ("version", 2, "version: 2; this Geryon reads version 1"),
        ("job", "", "job: '' is not a job id"),
        ("job", "a/b", "job: 'a/b' is not a job id"),
        ("job", 7, "job: 7 is not a job id"),
        ("classes", 0, "classes: 0; give the job's number of classes, 1 to 8"),
        ("classes", 9, "classes: 9"),
        ("classes", True, "classes: True"),
        ("tasks", {}, "tasks: give an object"),
        ("tasks", ["worker:0"], "tasks: give an object"),
        ("tasks", {"trainer:0": "h:1"}, "tasks: 'trainer:0' is not ROLE:INDEX"),
        ("tasks", {"worker:01": "h:1"}, "tasks: 'worker:01' is not ROLE:INDEX"),
        ("tasks", {"worker:0": "h"}, "tasks.worker:0: 'h' is not HOST:PORT"),
        ("tasks", {"worker:0": "h:0"}, "tasks.worker:0: port '0'"),
        ("tasks", {"worker:0": "h:99999"}, "tasks.worker:0: port '99999'"),
        ("tasks", {"worker:0": "bad_host:1"}, "tasks.worker:0: 'bad_host' is not a host name"),
        ("tasks", {"worker:0": "[::1:1"}, r"tasks.worker:0: '\[::1:1' is not \[IPv6\]:PORT"),
        (
            "tasks",
            {"worker:0": "h:1", "worker:1": "h:1"},
            "tasks.worker:1: 'h:1' is also tasks.worker:0's address",
        ),
        ("intensity", KeyError, "intensity: missing"),
        ("intensity", 0.5, "intensity: give an object with compute_s, iteration_s, bytes"),
        ("intensity.compute_s", KeyError, "intensity.compute_s: missing"),
        ("intensity.compute_s", "0.1", "intensity.compute_s: '0.1' is not a finite number"),
        ("intensity.compute_s", float("nan"), "intensity.compute_s: nan is not a finite number"),
        ("intensity.compute_s", 0, "intensity.compute_s: 0.0 s; compute time per iteration must be > 0"),
        (
            "intensity.compute_s",
            0.3,
            r"intensity.compute_s: 0.3 s is more than intensity.iteration_s \(0.25 s\)",
        ),
        ("intensity.iteration_s", -1, "intensity.iteration_s: -1.0 s; iteration time must be > 0"),
        ("intensity.iteration_s", float("inf"), "intensity.iteration_s: inf is not a finite number"),
        ("intensity.bytes", 1.5, "intensity.bytes: 1.5 is not a whole number of bytes >= 0"),
        ("intensity.bytes", -1, "intensity.bytes: -1"),
        ("intensity.bytes", False, "intensity.bytes: False"),
        ("intensity.gpus", 4, "intensity.gpus: unknown field; allowed: compute_s, iteration_s, bytes"),
        ("priority", 0, "priority: unknown field; allowed: format, version, job, classes, tasks, intensity"),
    ],
)
def test_each_malformed_field_is_named(path: str, value: Any, match: str) -> None:
    with pytest.raises(RegistrationError, match=match):
        parse_record(with_field(path, value))


def test_not_json_and_not_an_object() -> None:
    with pytest.raises(RegistrationError, match="record: not JSON"):
        parse_record("{")
    with pytest.raises(RegistrationError, match="record: give a JSON object"):
        parse_record("[]")


def reg(record: Any, revision: int, job: str | None = None) -> Registered:
    return Registered(job or record.job, record.dumps().encode(), revision)


def test_cluster_refuses_unknown_hosts() -> None:
    a = make_record("a", {"worker:0": "h1:1", "ps:0": "h3:1"}, 0.1, 0.2, 0)
    accepted, refused = check_cluster([reg(a, 5)], {"h1", "h2"})
    assert accepted == []
    assert refused["a"].startswith("tasks: host 'h3' is unknown") and "known: h1, h2" in refused["a"]
    _, refused = check_cluster([reg(a, 5)], set())
    assert "known: none" in refused["a"]


def test_cluster_refuses_a_job_claiming_anothers_tasks_the_earlier_keeps_them() -> None:
    first = make_record("first", {"worker:0": "h1:2222"}, 0.1, 0.2, 0)
    thief = make_record("thief", {"worker:0": "h2:2222", "worker:1": "H1:2222"}, 0.1, 0.2, 0)
    accepted, refused = check_cluster([reg(thief, 9), reg(first, 3)], {"h1", "h2"})
    assert [r.job for r in accepted] == ["first"]
    assert refused == {
        "thief": "tasks.worker:1: H1:2222 is job 'first''s worker:0; a job cannot claim another's tasks"
    }


def test_cluster_refuses_malformed_values_and_a_record_under_another_id() -> None:
    a = make_record("a", {"worker:0": "h1:1"}, 0.1, 0.2, 0)
    bad = Registered("b", b'{"format": "geryon.job"}', 4)
    accepted, refused = check_cluster([reg(a, 3, job="z"), bad], {"h1"})
    assert accepted == []
    assert refused["z"] == "job: 'a' registered under jobs/z; they must match"
    assert refused["b"].startswith("version: None")
