"""The trial log: one JSON object per line, appended as the search runs, enough to resume it.

Line 1 is a header (strategy, classes, every option). Then one line per event: `report` (one per
reported iteration, with the searcher's state after it), `rank` (the guided strategy's predictions,
so a resumed search does not depend on re-running the simulator) and `resume` (a new process took
over). A process killed mid-write leaves at most a torn last line; reading drops it and appending
first cuts it off, so the file stays valid JSON lines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

FORMAT = "geryon.threshold-search"
VERSION = 1


class SearchLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None

    def read(self) -> list[dict[str, Any]]:
        """Every complete event in the file (none if it does not exist); a torn last line is dropped."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._good_bytes = 0
            return []
        except OSError as error:
            raise ValueError(f"log_path: cannot read {str(self.path)!r}: {error.strerror or error}") from None
        events: list[dict[str, Any]] = []
        good = 0
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, 1):
            last = number == len(lines)
            if not raw.strip():
                good += len(raw) + (0 if last else 1)
                continue
            try:
                event = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                if last:  # killed mid-write: the rest of the line never made it to the file
                    break
                raise ValueError(f"log_path: {self.path}:{number}: not valid JSON ({error})") from None
            if not isinstance(event, dict) or not isinstance(event.get("event"), str):
                raise ValueError(f"log_path: {self.path}:{number}: expected an object with an 'event' field")
            events.append(event)
            good += len(raw) + (0 if last else 1)
        self._good_bytes = good
        return events

    def open(self) -> None:
        """Opens for appending, first cutting off a torn last line that `read` dropped."""
        if self.path.exists():
            size = self.path.stat().st_size
            good = getattr(self, "_good_bytes", size)
            with self.path.open("r+b") as f:
                if good < size:
                    f.truncate(good)
                if good:
                    f.seek(good - 1)
                    needs_newline = f.read(1) != b"\n"
                    if needs_newline:
                        f.seek(good)
                        f.write(b"\n")
        try:
            self._file = self.path.open("a")
        except OSError as error:
            raise ValueError(
                f"log_path: cannot write {str(self.path)!r}: {error.strerror or error}"
            ) from None

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def write(self, event: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"log_path: {self.path} is not open for writing")
        # One write per line and a flush: a killed process loses at most the line being written.
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
