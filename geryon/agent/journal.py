"""The journal: each target's value from before Geryon's first write to it, so `restore` can undo
everything, even after the agent restarted or the host rebooted (the file lives on disk).

One JSON file, rewritten atomically (temp file, fsync, rename), so a crash mid-write leaves either
the old or the new journal, never a torn one. Only the FIRST "before" of a target is kept: a second
apply must not overwrite the original state with Geryon's own earlier values.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geryon.agent.names import target_problem

FORMAT = "geryon.agent.journal"
VERSION = 1
DEFAULT_PATH = "/var/lib/geryon/journal.json"
# A real journal holds a few hundred small entries (a few KiB); anything this large is not one, and
# reading it whole would cost the agent its memory.
MAX_BYTES = 4 * 1024 * 1024


class JournalError(ValueError):
    """The journal file is unreadable or malformed; the message names the file and the problem."""


class Busy(RuntimeError):
    """Another geryon agent process is applying or restoring with the same journal."""


@contextmanager
def exclusive(journal_path: str | Path, timeout: float = 10.0) -> Iterator[None]:
    """Holds `<journal>.lock` so that a CLI apply/restore and the daemon never write the host (and
    the journal) at the same time; each would otherwise journal the other's values as "before"."""
    lock_path = Path(f"{journal_path}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"another geryon agent process holds {lock_path} (a running daemon or apply); "
                        f"waited {timeout:g} s"
                    ) from None
                time.sleep(0.05)
        # Every journal write happens under this lock, so a temp file seen now is a crashed save's.
        sweep_temp_files(journal_path)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def sweep_temp_files(journal_path: str | Path) -> list[Path]:
    """Removes temp files a save left when the process died between mkstemp and rename. Call it only
    holding `exclusive`: a live save's temp file looks the same."""
    p = Path(journal_path)
    removed: list[Path] = []
    try:
        names = os.listdir(p.parent)
    except OSError:
        return removed
    for name in names:
        if name.startswith(_temp_prefix(p)) and name != p.name:
            tmp = p.parent / name
            try:
                if tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink()
                    removed.append(tmp)
            except OSError:
                pass  # not ours to remove (permissions): leave it
    return removed


@dataclass
class Entry:
    target: str
    driver: str
    before: Any
    recorded_at: float


@dataclass
class Journal:
    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)  # insertion order = first-write order
    last_apply: float | None = None

    @classmethod
    def load(cls, path: str | Path) -> Journal:
        """The journal at `path`; an empty one when the file does not exist yet."""
        p = Path(path)
        try:
            with open(p, "rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return cls(path=p)
        except OSError as e:
            raise JournalError(f"{p}: cannot read the journal: {e.strerror}") from None
        if len(raw) > MAX_BYTES:
            raise JournalError(f"{p}: over {MAX_BYTES // 2**20} MiB; not a Geryon agent journal")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JournalError(f"{p}: the journal is not UTF-8 text ({e.reason} at byte {e.start})") from None
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise JournalError(f"{p}: the journal is not valid JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise JournalError(f"{p}: not a Geryon agent journal (format must be {FORMAT!r})")
        if data.get("version") != VERSION:
            raise JournalError(f"{p}: journal version {data.get('version')!r}; this agent reads {VERSION}")
        entries: dict[str, Entry] = {}
        raw_entries = data.get("entries")
        if not isinstance(raw_entries, list):
            raise JournalError(f"{p}: entries: expected a list")
        for i, item in enumerate(raw_entries):
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("target"), str)
                or not isinstance(item.get("driver"), str)
            ):
                raise JournalError(f"{p}: entries[{i}]: expected target, driver and before")
            # Targets become paths written as root on restore: only the shapes the drivers make.
            problem = target_problem(item["driver"], item["target"])
            if problem is not None:
                raise JournalError(f"{p}: entries[{i}]: {problem}; refusing the journal")
            at = item.get("recorded_at")
            entries[item["target"]] = Entry(
                target=item["target"],
                driver=item["driver"],
                before=item.get("before"),
                recorded_at=float(at) if isinstance(at, int | float) else 0.0,
            )
        last = data.get("last_apply")
        return cls(path=p, entries=entries, last_apply=float(last) if isinstance(last, int | float) else None)

    def record(self, driver: str, target: str, before: Any) -> bool:
        """Remembers `before` for `target` unless it already has one, and saves. True when recorded."""
        problem = target_problem(driver, target)
        if problem is not None:
            raise JournalError(f"{self.path}: not journaling {problem}")
        if target in self.entries:
            return False
        self.entries[target] = Entry(target=target, driver=driver, before=before, recorded_at=time.time())
        self.save()
        return True

    def mark_applied(self, when: float | None = None) -> None:
        self.last_apply = time.time() if when is None else when
        self.save()

    def forget(self, target: str) -> None:
        if self.entries.pop(target, None) is not None:
            self.save()

    def save(self) -> None:
        data = {
            "format": FORMAT,
            "version": VERSION,
            "last_apply": self.last_apply,
            "entries": [
                {"target": e.target, "driver": e.driver, "before": e.before, "recorded_at": e.recorded_at}
                for e in self.entries.values()
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(self.path), dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        # The rename is durable only once the directory entry is.
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def clear(self) -> None:
        """After a full restore: nothing left to undo."""
        self.entries.clear()
        self.last_apply = None
        self.path.unlink(missing_ok=True)
