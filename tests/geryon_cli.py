"""Runs the `geryon` command as a user does: a real subprocess of this interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def geryon(
    *args: str, cwd: Path | None = None, pythonpath: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [sys.executable, "-m", "geryon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
