"""A real TensorFlow PS cluster on loopback: one `python -m geryon.cluster.task` process per PS and worker.

geryon.demo.localchief.training_chief adds the demo's own training loop (`python -m geryon.demo.chief`,
a vanilla run: no partitioning, no classes) as a process that trains until it is killed.

Used by the calibration benchmarks (bench/bench_tf_order.py, bench/bench_ps_costs.py) and by the
in-cluster profiler's tests: the tasks are the demo's own task processes (same thread limits, same
server), so what is measured here is what the demo runs, minus the emulated fabric. The caller is the
client (a TF1 session to a worker, or a ClusterCoordinator). Every task is killed by its PID when the
context ends, whatever happened.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from geryon.cluster.procs import REPO_ROOT
from geryon.cluster.protocol import READY


@dataclass
class LocalCluster:
    cluster: dict[str, list[str]]
    pids: list[int] = field(default_factory=list)
    profiler_ports: dict[str, int] = field(default_factory=dict)  # "worker:0" -> port

    @property
    def worker_target(self) -> str:
        return f"grpc://{self.cluster['worker'][0]}"


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all sockets held until every one is picked)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@contextmanager
def local_cluster(
    num_ps: int,
    num_workers: int = 1,
    *,
    chief: bool = False,
    profile_workers: bool = False,
    intra_threads: int = 1,
    inter_threads: int = 2,
    timeout: float = 120.0,
) -> Iterator[LocalCluster]:
    """Starts the tasks, waits until each prints READY, yields, then kills them (by PID).

    `chief=True` adds a "chief" job address for a ClusterCoordinator in the calling process (no task
    is started for it). `profile_workers=True` starts TF's profiler server in every worker task.
    """
    if num_ps < 1 or num_workers < 1:
        raise ValueError(f"num_ps and num_workers must be >= 1, got {num_ps} and {num_workers}")
    ports = free_ports(num_ps + num_workers + 1 + (num_workers if profile_workers else 0))
    cluster: dict[str, list[str]] = {
        "worker": [f"127.0.0.1:{p}" for p in ports[:num_workers]],
        "ps": [f"127.0.0.1:{p}" for p in ports[num_workers : num_workers + num_ps]],
    }
    if chief:
        cluster["chief"] = [f"127.0.0.1:{ports[num_workers + num_ps]}"]
    result = LocalCluster(cluster)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    procs: list[subprocess.Popen[str]] = []
    try:
        for job, count in (("ps", num_ps), ("worker", num_workers)):
            for index in range(count):
                spec: dict[str, Any] = {
                    "cluster": cluster,
                    "job": job,
                    "index": index,
                    "protocol": "grpc",
                    "intra_threads": intra_threads,
                    "inter_threads": inter_threads,
                }
                if job == "worker" and profile_workers:
                    port = ports[num_workers + num_ps + 1 + index]
                    spec["profiler_port"] = port
                    result.profiler_ports[f"worker:{index}"] = port
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "geryon.cluster.task", json.dumps(spec)],
                        cwd=REPO_ROOT,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                    )
                )
        result.pids = [p.pid for p in procs]
        deadline = time.monotonic() + timeout
        for proc in procs:
            _wait_ready(proc, deadline)
        yield result
    finally:
        for proc in procs:
            proc.kill()  # this task's PID only
        for proc in procs:
            proc.wait()
            if proc.stdout:
                proc.stdout.close()


def _wait_ready(proc: subprocess.Popen[str], deadline: float) -> None:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"task pid {proc.pid} did not print {READY} in time")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"task pid {proc.pid} exited with code {proc.wait()} before {READY}")
            if line.startswith(READY):
                return
