"""How fast a PS killed mid-transfer fails the chief, over N tries (issue 16's target: 20 of 20 within 10 s).

    .venv/bin/python bench/bench_ps_kill.py [--tries 20] [--out out/bench/ps_kill.json]

Each try starts a fresh cluster on loopback (1 PS, 1 worker, `grpc+geryon`), and a chief that trains
a model with one 16 MB dense kernel under ParameterServerStrategy + ClusterCoordinator, so every
step pulls and pushes 16 MB through the data plane and a transfer is in flight most of the time.
After 3 steps the PS is killed (SIGKILL by PID) at a random moment within a step (uniform over the
median step time so far). The chief runs with TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES=0, as in
tests/tf/test_faults.py, so the time measured is the failure's own, not TF's retry policy. A try
whose chief has not failed 30 s after the kill counts as a hang. Prints one row per try and a
summary (median, max, how many within 10 s); writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    GERYON_SERVER,
    child_env,
    child_process,
    child_servers,
    kill_child,
    print_table,
    write_json,
)

from geryon.tf.build import build
from geryon.tf.ports import free_port_pairs

DATA_OFFSET = -7000
HANG_SECONDS = 30.0
TARGET_SECONDS = 10.0

# The training step is benchlib's mse_step (the same one the strategy tests run).
_CHIEF = r"""
import json, os, sys, time
import numpy as np
import tensorflow as tf
import keras
import geryon.tf
from bench.benchlib import mse_step
geryon.tf.load()
spec = json.loads(os.environ["BENCH_SPEC"])
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(spec["cluster"]), rpc_layer="grpc+geryon")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.001)
step = mse_step(strategy, model, optimizer)
x = tf.constant(np.ones((4, 2048), dtype="float32"))
try:
    for i in range(100000):
        started = time.time()
        coordinator.schedule(step, args=(x,)).fetch()
        print(json.dumps({"step": i + 1, "seconds": time.time() - started}), flush=True)
except Exception as error:
    row = {"error": f"{type(error).__name__}: {str(error)[:300]}", "error_at": time.time(),
           "names_ps": "GRPC error information from remote target /job:ps" in str(error)}
    print(json.dumps(row), flush=True)
os._exit(0)
"""


def one_try(index: int, rng: random.Random, tmp: Path) -> dict[str, Any]:
    ports = free_port_pairs(3, DATA_OFFSET)
    cluster = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{ports[1]}"],
        "ps": [f"127.0.0.1:{ports[2]}"],
    }
    extra = {"KERAS_BACKEND": "tensorflow", "GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    jobs = ("ps", "worker")
    envs = [child_env({"cluster": cluster, "job": job}, **extra) for job in jobs]
    logs = [tmp / f"{index}-{job}.stderr" for job in jobs]
    with child_servers(GERYON_SERVER, envs, logs) as (ps, _worker):
        chief_log = tmp / f"{index}-chief.stderr"
        chief_env = child_env({"cluster": cluster}, TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES="0", **extra)
        chief = child_process(_CHIEF, chief_env, chief_log)
        try:
            return _kill_and_time(index, rng, chief, ps, chief_log)
        finally:
            kill_child(chief)


def _kill_and_time(
    index: int, rng: random.Random, chief: subprocess.Popen[str], ps: subprocess.Popen[str], chief_log: Path
) -> dict[str, Any]:
    """Lets the chief run 3 steps, kills the PS at a random moment of the next, times the chief's error."""
    stdout = chief.stdout
    assert stdout is not None
    step_seconds: list[float] = []
    while len(step_seconds) < 3:
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"chief ended: {chief_log.read_text()[-2000:]}")
        row = json.loads(line)
        if "error" in row:
            raise RuntimeError(f"chief failed before the kill: {row['error']}")
        step_seconds.append(row["seconds"])
    delay = rng.uniform(0, statistics.median(step_seconds))
    time.sleep(delay)
    killed_at = time.time()
    kill_child(ps)
    # The chief prints one line per step and one with the error; a hang prints nothing more.
    found: list[dict[str, Any]] = []

    def read_lines() -> None:
        for line in stdout:
            row = json.loads(line) if line.startswith("{") else {}
            if "error" in row:
                found.append(row)
                return

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    reader.join(timeout=max(0.0, killed_at + HANG_SECONDS - time.time()))
    error = found[0]["error"] if found else None
    error_at = found[0]["error_at"] if found else None
    seconds = None if error_at is None else error_at - killed_at
    return {
        "try": index + 1,
        "step_ms": 1000 * statistics.median(step_seconds),
        "kill_after_ms": 1000 * delay,
        "seconds": seconds,
        "hang": error is None,
        "names_ps": bool(found and found[0].get("names_ps")),  # judged on the whole message
        "error": (error or "")[:200],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/bench/ps_kill.json")
    args = parser.parse_args(argv)
    if args.tries < 1:
        parser.error("--tries must be at least 1")
    build()
    rng = random.Random(args.seed)
    load_before = os.getloadavg()  # the machine is shared: say how busy it was
    rows = []
    with tempfile.TemporaryDirectory(prefix="geryon-ps-kill-") as tmp:
        for i in range(args.tries):
            row = one_try(i, rng, Path(tmp))
            rows.append(row)
            outcome = "hang" if row["hang"] else f"{row['seconds']:.2f} s"
            print(f"try {row['try']}: {outcome}", flush=True)
    print_table(
        rows,
        [
            ("try", "try", "d"),
            ("step_ms", "step ms", ".0f"),
            ("kill_after_ms", "kill at ms", ".0f"),
            ("seconds", "chief error after s", ".2f"),
            ("names_ps", "names /job:ps", ""),
        ],
    )
    failed = [r["seconds"] for r in rows if not r["hang"]]
    within = sum(1 for s in failed if s < TARGET_SECONDS)
    summary = {
        "tries": len(rows),
        "within_10_s": within,
        "hangs": sum(r["hang"] for r in rows),
        "median_s": statistics.median(failed) if failed else None,
        "max_s": max(failed) if failed else None,
        "min_s": min(failed) if failed else None,
    }
    print(
        f"\n{within}/{len(rows)} tries failed the chief within {TARGET_SECONDS:.0f} s "
        f"(hangs: {summary['hangs']}; median {summary['median_s']}, min {summary['min_s']}, "
        f"max {summary['max_s']} s)"
    )
    load = {"before": load_before, "after": os.getloadavg()}  # 1, 5 and 15 min averages
    print(f"load average before {load['before'][0]:.2f}, after {load['after'][0]:.2f} (1 min)")
    write_json(args.out, {"summary": summary, "rows": rows, "hang_after_s": HANG_SECONDS, "load": load})
    return 0 if within == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
