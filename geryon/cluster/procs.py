"""The cluster's processes, from the side that starts them: the environment they start in, a reader
of their stdout lines, waiting until every task printed READY, stopping one by its PID.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import geryon
from geryon.cluster.protocol import READY

DATA_PORT_OFFSET = 1000  # Geryon's data plane: gRPC port + this
REPO_ROOT = Path(geryon.__file__).resolve().parents[1]


class LineReader:
    """A thread that reads a process's stdout lines into a queue (reads with a timeout)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(proc,), daemon=True)
        self._thread.start()

    def _run(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output

    def get(self, timeout: float) -> str | None:
        """The next line; None at the end of the output; queue.Empty after `timeout` seconds."""
        return self.lines.get(timeout=max(timeout, 0.01))


def wait_ready(
    readers: Mapping[str, LineReader],
    procs: Mapping[str, subprocess.Popen[Any]],
    timeout_s: float,
    name: Callable[[str], str] = str,
    tail: Callable[[str], str] | None = None,
) -> None:
    """Returns once every host's task (geryon.cluster.task) has printed READY, the lines before it passed
    over; else RuntimeError "<name(host)> did not start within <timeout_s> s" or "<name(host)> exited
    <code> at start", with ": <tail(host)>" (its log's end) when `tail` is given."""
    deadline = time.monotonic() + timeout_s
    for host, reader in readers.items():
        while True:
            try:
                line = reader.get(deadline - time.monotonic())
            except queue.Empty:
                raise RuntimeError(f"{name(host)} did not start within {timeout_s:.0f} s") from None
            if line is None:
                log = f": {tail(host)}" if tail is not None else ""
                raise RuntimeError(f"{name(host)} exited {procs[host].wait()} at start{log}")
            if line.startswith(READY):
                break


def stop(proc: subprocess.Popen[Any]) -> None:
    """Kills one process we started, by its PID."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        KERAS_BACKEND="tensorflow",
        GERYON_DATA_PORT_OFFSET=str(DATA_PORT_OFFSET),
        # A failed task fails the step at once instead of TF re-running it (see the README).
        TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
        PYTHONUNBUFFERED="1",
    )
    return env
