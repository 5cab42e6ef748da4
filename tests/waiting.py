"""Bounded polling for tests that wait on something live (a page re-rendering, Prometheus evaluating)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    what: str,
    read: Callable[[], Any],
    done: Callable[[Any], bool] = bool,
    timeout: float = 30,
    interval: float = 0.25,
) -> Any:
    """Calls read() until done(answer) (default: the answer is truthy), at most `timeout` seconds; returns
    that answer, or fails naming `what` with the last answer read."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = read()
        if done(last):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last answer: {last!r}")
