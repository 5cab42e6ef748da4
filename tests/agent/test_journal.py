"""The journal: first-ever "before" per target, atomic rewrites, survives a restart, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from geryon.agent.journal import FORMAT, Busy, Journal, JournalError, exclusive


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
    j.record("linux", "a", 1)
    inode = os.stat(path).st_ino
    j.record("linux", "b", 2)
    assert os.stat(path).st_ino != inode  # replaced, never rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json"]  # no temp files left
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and [e["target"] for e in data["entries"]] == ["a", "b"]


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


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    with exclusive(path), pytest.raises(Busy, match=r"journal\.json\.lock"), exclusive(path, timeout=0.2):
        pass
    with exclusive(path, timeout=0.2):  # released on exit
        pass
