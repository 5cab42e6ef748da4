"""The run's state file: what a later `down` (from any process, after any crash) needs to clean up.

`<state dir>/<run>.json` lists the run's namespaces, the processes it started (PID + start time) and
its mode. It is written before anything is created and rewritten atomically (temp file, fsync,
rename) after every change, so a crash leaves either the old or the new file, never a torn one. A
`<run>.lock` (flock) serializes writers across processes: popen in one, down in another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_DIR = "/run/geryon/testbed"
ENV = "GERYON_TESTBED_STATE"
FORMAT = "geryon.testbed.state"
_RUN_FILE = re.compile(r"^([a-z0-9]{1,10})\.json$")
_thread_lock = threading.RLock()  # flock is per open file: threads of one process need their own lock


class StateError(RuntimeError):
    pass


def state_dir() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_DIR)


def is_default_dir() -> bool:
    return state_dir() == Path(DEFAULT_DIR)


def path(run_id: str) -> Path:
    return state_dir() / f"{run_id}.json"


def runs() -> list[str]:
    """Run ids with a state file, sorted."""
    try:
        names = os.listdir(state_dir())
    except FileNotFoundError:
        return []
    return sorted(m.group(1) for n in names if (m := _RUN_FILE.match(n)))


def load(run_id: str) -> dict[str, Any] | None:
    p = path(run_id)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StateError(
            f"{p}: unreadable state file ({e}); remove it and run `geryon testbed down`"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StateError(f"{p}: not a testbed state file")
    return data


def save(run_id: str, data: dict[str, Any]) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    data = {**data, "format": FORMAT, "run_id": run_id}
    fd, tmp = tempfile.mkstemp(prefix=f".{run_id}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path(run_id))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove(run_id: str) -> None:
    for p in (path(run_id), state_dir() / f"{run_id}.lock"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def locked(run_id: str) -> Iterator[None]:
    """Holds the run's lock: one writer of its state (and its namespaces) at a time."""
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    with _thread_lock:
        fd = os.open(d / f"{run_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def update(run_id: str, **changes: Any) -> dict[str, Any]:
    """Reads, changes and writes the state under the lock; returns the new state."""
    with locked(run_id):
        data = load(run_id) or {}
        data.update(changes)
        save(run_id, data)
        return data
