"""The run's state file: atomic rewrites, one writer at a time, nothing left after remove."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from geryon.testbed import state


def test_save_load_roundtrip_and_listing(private_state: Path) -> None:
    assert state.runs() == [] and state.load("r1") is None
    state.save("r1", {"hosts": ["a"], "procs": []})
    state.save("r2", {"hosts": ["b"]})
    (private_state / "notes.txt").write_text("not a run")
    (private_state / "Bad-Id.json").write_text("{}")
    assert state.runs() == ["r1", "r2"]
    data = state.load("r1")
    assert data is not None and data["hosts"] == ["a"] and data["run_id"] == "r1"
    assert data["format"] == state.FORMAT
    # Nothing but the two state files (and the stray ones above): no temp files left behind.
    assert sorted(p.name for p in private_state.iterdir()) == [
        "Bad-Id.json",
        "notes.txt",
        "r1.json",
        "r2.json",
    ]


def test_remove_takes_the_lock_file_too(private_state: Path) -> None:
    with state.locked("r1"):
        state.save("r1", {})
    assert (private_state / "r1.lock").exists()
    state.remove("r1")
    state.remove("r1")  # twice is fine
    assert list(private_state.iterdir()) == []


@pytest.mark.parametrize("text", ["{not json", "[]", json.dumps({"format": "other"})])
def test_a_malformed_file_is_refused_naming_it(private_state: Path, text: str) -> None:
    private_state.mkdir(parents=True, exist_ok=True)
    (private_state / "r1.json").write_text(text)
    with pytest.raises(state.StateError, match=r"r1\.json"):
        state.load("r1")


def test_concurrent_updates_lose_nothing() -> None:
    state.save("r1", {"procs": []})

    def add(i: int) -> None:
        for j in range(10):
            with state.locked("r1"):
                data = state.load("r1") or {}
                data["procs"].append({"pid": i * 100 + j})
                state.save("r1", data)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    data = state.load("r1")
    assert data is not None and sorted(p["pid"] for p in data["procs"]) == sorted(
        i * 100 + j for i in range(8) for j in range(10)
    )


def test_update_merges(private_state: Path) -> None:
    state.save("r1", {"a": 1})
    assert state.update("r1", b=2)["a"] == 1
    assert json.loads((private_state / "r1.json").read_text())["b"] == 2
