"""The journal: first-ever "before" per target, atomic rewrites, survives a restart, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.agent.journal import FORMAT, MAX_BYTES, Busy, Journal, JournalError, exclusive
from geryon.agent.names import target_problem


def test_keeps_only_the_first_before_and_survives_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "journal.json"
    j = Journal.load(path)
    assert j.entries == {} and j.last_apply is None and not path.exists()
    assert j.record("linux", "eth0/qdisc", None)
    assert j.record("linux", "sysctl/net.ipv4.tcp_reflect_tos", "0")
    assert not j.record("linux", "eth0/qdisc", {"kind": "htb"})  # Geryon's own value: not the original
    j.mark_applied(1234.5)

    again = Journal.load(path)  # a new process reading the file
    assert list(again.entries) == ["eth0/qdisc", "sysctl/net.ipv4.tcp_reflect_tos"]  # first-write order
    assert again.entries["eth0/qdisc"].before is None
    assert again.entries["sysctl/net.ipv4.tcp_reflect_tos"].before == "0"
    assert again.last_apply == 1234.5
    again.forget("eth0/qdisc")
    assert list(Journal.load(path).entries) == ["sysctl/net.ipv4.tcp_reflect_tos"]
    again.clear()
    assert not path.exists()


def test_writes_are_atomic_renames(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    j = Journal(path)
    j.record("linux", "a0/qdisc", 1)
    inode = os.stat(path).st_ino
    j.record("linux", "b0/qdisc", 2)
    assert os.stat(path).st_ino != inode  # replaced, never rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json"]  # no temp files left
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and [e["target"] for e in data["entries"]] == ["a0/qdisc", "b0/qdisc"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other", "version": 1, "entries": []}', "not a Geryon agent journal"),
        ('{"format": "geryon.agent.journal", "version": 9, "entries": []}', "journal version 9"),
        ('{"format": "geryon.agent.journal", "version": 1, "entries": {}}', "entries: expected a list"),
        ('{"format": "geryon.agent.journal", "version": 1, "entries": [{"target": 1}]}', r"entries\[0\]"),
    ],
)
def test_malformed_journals_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "journal.json"
    path.write_text(text)
    with pytest.raises(JournalError, match=message):
        Journal.load(path)


def _journal_with(driver: str, target: str) -> str:
    entry = {"target": target, "driver": driver, "before": "0", "recorded_at": 1.0}
    return json.dumps({"format": FORMAT, "version": 1, "last_apply": None, "entries": [entry]})


@pytest.mark.parametrize(
    ("driver", "target"),
    [
        ("linux", "sysctl/x./../../../etc/passwd"),  # the write-any-file target
        ("linux", "sysctl/net..ipv4"),
        ("linux", "sysctl/net.ipv4/../../kernel.core_pattern"),
        ("linux", "sysctl/kernel.core_pattern"),  # not a network sysctl
        ("linux", "../qdisc"),
        ("linux", "eth0/../qdisc"),
        ("dcb", "../dcb/ets"),
        ("sysfs", "rdma/../1/roce_tos"),
        ("sysfs", "rdma/mlx5_0/1/../../roce_tos"),
        ("sysfs", "../ecn/cnp_dscp"),
        ("sysfs", "eth0/ecn/roce_rp/no_such_param"),
        ("shell", "eth0/qdisc"),
    ],
)
def test_journal_targets_that_could_leave_their_tree_are_refused(
    tmp_path: Path, driver: str, target: str
) -> None:
    path = tmp_path / "journal.json"
    path.write_text(_journal_with(driver, target))
    with pytest.raises(JournalError, match=r"entries\[0\]: .*refusing the journal"):
        Journal.load(path)
    with pytest.raises(JournalError, match="not journaling"):
        Journal(tmp_path / "j2.json").record(driver, target, None)


@pytest.mark.parametrize(
    ("driver", "target"),
    [
        ("linux", "sysctl/net.ipv4.tcp_reflect_tos"),
        ("linux", "eth0.100/qdisc"),
        ("dcb", "eth0/dcb/app/dscp/46"),
        ("sysfs", "rdma/mlx5_0/1/roce_tos"),
        ("sysfs", "eth0/ecn/roce_np/3"),
        ("sysfs", "eth0/ecn/roce_rp/rpg_ai_rate"),
        ("dcb", "eth0/dcb/pfc_storm_timeout"),
    ],
)
def test_every_target_the_drivers_make_is_accepted(tmp_path: Path, driver: str, target: str) -> None:
    path = tmp_path / "journal.json"
    path.write_text(_journal_with(driver, target))
    assert list(Journal.load(path).entries) == [target]


def test_not_utf8_or_oversized_journals_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(JournalError, match="not UTF-8"):
        Journal.load(path)
    path.write_bytes(b" " * (MAX_BYTES + 1))
    with pytest.raises(JournalError, match="over 4 MiB"):
        Journal.load(path)


def test_temp_files_of_a_crashed_save_are_swept_under_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    Journal(path).record("linux", "eth0/qdisc", None)
    crashed = tmp_path / ".journal.json.k2j3h4"  # what mkstemp left when the process died mid-save
    crashed.write_text("{")
    other = tmp_path / ".other.json.abc"
    other.write_text("x")
    with exclusive(path):
        assert not crashed.exists()
    assert other.exists() and list(Journal.load(path).entries) == ["eth0/qdisc"]


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    with exclusive(path), pytest.raises(Busy, match=r"journal\.json\.lock"), exclusive(path, timeout=0.2):
        pass
    with exclusive(path, timeout=0.2):  # released on exit
        pass


# -- fuzz: the reader answers a Journal whose every target is well-formed, or a JournalError ---------

_targets = st.sampled_from(
    [
        "eth0/qdisc",
        "sysctl/net.ipv4.tcp_reflect_tos",
        "eth0/dcb/ets",
        "rdma/mlx5_0/1/roce_tos",
        "eth0/ecn/cnp_dscp",
    ]
) | st.text(st.sampled_from("abnet./_0:-sysctl"), max_size=30)
_entries = st.lists(
    st.fixed_dictionaries(
        {"target": _targets | st.integers(), "driver": st.sampled_from(["linux", "dcb", "sysfs", "x"])},
        optional={"before": st.none() | st.integers() | st.text(max_size=5), "recorded_at": st.floats()},
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200).map(lambda b: b)
    | st.fixed_dictionaries(
        {
            "format": st.sampled_from([FORMAT, "x"]),
            "version": st.sampled_from([1, 2, "1"]),
            "entries": _entries,
        }
    ).map(lambda d: json.dumps(d).encode())
)
def test_fuzz_journal_reader(raw: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.json"
        path.write_bytes(raw)
        try:
            j = Journal.load(path)
        except JournalError:
            return
    for e in j.entries.values():
        assert target_problem(e.driver, e.target) is None
