"""Progress lines on stderr for long commands (stdout stays clean for tables and JSON)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Progress:
    def __init__(self, prefix: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr

    def say(self, message: str) -> None:
        if self.enabled:
            print(f"{self.prefix}: {message}", file=self.stream, flush=True)

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        """Announces a step, then how long it took."""
        self.say(f"{message} ...")
        start = time.perf_counter()
        yield
        self.say(f"{message}: done in {time.perf_counter() - start:.1f} s")
