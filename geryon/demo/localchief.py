"""The demo's training loop (`python -m geryon.demo.chief`) on a loopback LocalCluster (geryon.cluster.local).

`training_chief` starts it as a vanilla run (no partitioning, no classes) that trains until it is
killed; `step_times` reads its rounds back. Used by the in-cluster profiler's tests and benches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from geryon.cluster.local import REPO_ROOT, LocalCluster
from geryon.cluster.protocol import MARKER


def chief_spec(
    cluster: dict[str, list[str]], model: str, input_shape: Sequence[int], batch_size: int, steps: int
) -> dict[str, Any]:
    """The fields geryon.demo.defaults.chief_spec writes, for a vanilla run (unpartitioned, no classes)."""
    return {
        "cluster": cluster,
        "protocol": "grpc",
        "model": model,
        "input_shape": list(input_shape),
        "batch_size": batch_size,
        "partitioned": False,
        "slice_bytes": None,
        "classes_on": False,
        "classes": 2,
        "class_dscp": None,
        "thresholds": None,
        "search": None,
        "warmup": 2,
        "steps": steps,
        "rate_bits": 1e9,
        "want_params": False,
        "intra_threads": 1,
        "inter_threads": 2,
        "max_seconds": 600,
    }


def chief_env() -> dict[str, str]:
    """The environment of a demo chief started from here: this checkout's geryon first, TF quiet."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@contextmanager
def training_chief(
    lc: LocalCluster,
    workdir: Path,
    *,
    model: str,
    input_shape: Sequence[int],
    batch_size: int,
    timeout: float = 150.0,
) -> Iterator[Path]:
    """Starts the demo chief on `lc` (which needs `chief=True`), waits for its first step, yields the
    path of its log (its stdout: one JSON "step" line per round), then kills it by its PID."""
    if "chief" not in lc.cluster:
        raise ValueError("training_chief needs a cluster started with chief=True")
    spec_file, log = workdir / "chief.json", workdir / "chief.log"
    spec_file.write_text(json.dumps(chief_spec(lc.cluster, model, input_shape, batch_size, steps=1_000_000)))
    env = chief_env()
    # stdout to a file: a pipe nobody reads would fill up and stall the training loop.
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "geryon.demo.chief", str(spec_file)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + timeout
        while '"event": "step"' not in log.read_text():
            if proc.poll() is not None or '"event": "error"' in log.read_text():
                raise RuntimeError(f"demo chief (pid {proc.pid}) failed: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"demo chief (pid {proc.pid}) did not train within {timeout} s")
            time.sleep(0.5)
        yield log
    finally:
        proc.kill()  # this chief's PID only
        proc.wait()


def step_times(log: Path) -> list[float]:
    """Seconds of every measured (non-warm-up) round in a demo chief's log."""
    out = []
    for line in log.read_text().splitlines():
        if line.startswith(MARKER):
            event = json.loads(line[len(MARKER) :])
            if event.get("event") == "step" and not event.get("warmup"):
                out.append(float(event["seconds"]))
    return out
