"""Shared by the bench tests: run a script under bench/ as a user would (a fresh interpreter, this
checkout's geryon on PYTHONPATH), capturing its table and errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RunBench = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_bench() -> RunBench:
    """run_bench(script, *flags, timeout=400): bench/<script> with flags, from the repo root. TF's C++
    logging is quieted (TF_CPP_MIN_LOG_LEVEL=2) so stderr holds the script's own errors."""

    def run(script: str, *flags: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REPO / "bench" / script), *flags],
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
