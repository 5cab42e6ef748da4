"""A `geryon demo --quick` subprocess held at the moment training runs, for the tests that interrupt
it (SIGTERM, kill -9) and then check what it leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def demo_in_training(
    mode: str, out: Path, env: dict[str, str], timeout: float = 120
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Starts the quick demo of one mode and yields (process, testbed run id) once its first training
    step is reported; the process is killed on the way out if it is still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "geryon", "demo", "--quick", "--modes", mode, "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        run_id, seen = None, []
        deadline = time.monotonic() + timeout
        for line in proc.stderr:
            seen.append(line)
            if "testbed " in line and " up in " in line:
                run_id = line.split("testbed ")[1].split()[0]
            if f"mode {mode}: step " in line or (": round " in line and f" {mode} (" in line):
                break  # training runs (a single mode's step or a paired cluster's round)
            assert time.monotonic() < deadline, f"training did not start within {timeout:.0f} s"
        assert run_id, "".join(seen)
        yield proc, run_id
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
