"""What the benchmark scripts share: a plain-text table on stdout, a JSON file under out/bench/, a median
timer, and the child-process skeleton of the TF cluster benches (servers that print READY, one client
script that prints RESULT <json>)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]) -> None:
    """Prints `rows` as a table; `columns` are (key, header, format spec) like ("t", "time s", ".3f")."""
    cells = [
        [format(row[key], spec) if row.get(key) is not None else "-" for key, _, spec in columns]
        for row in rows
    ]
    # A list, not max(a, *rest): with no rows max() would get a lone int (every paired mode failed).
    widths = [max([len(header), *(len(c[i]) for c in cells)]) for i, (_, header, _) in enumerate(columns)]
    print("  ".join(header.rjust(w) for (_, header, _), w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def write_json(path: str | Path, payload: Any) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"JSON: {out}")
    return out


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn`, in seconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def child_env(spec: Mapping[str, Any], **extra: str) -> dict[str, str]:
    """The environment of a child script: ours, the repo on PYTHONPATH (the children import geryon from
    this checkout), TF's C++ logging quiet, the child's spec as JSON in BENCH_SPEC, then `extra`."""
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "BENCH_SPEC": json.dumps(spec),
        "PYTHONPATH": str(REPO_ROOT),
        **extra,
    }


# A grpc+geryon server of BENCH_SPEC's cluster (task `job`, `index`, default 0): prints READY once it
# serves, then serves until it is killed.
GERYON_SERVER = r"""
import json, os, time
import tensorflow as tf
import geryon.tf
spec = json.loads(os.environ["BENCH_SPEC"])
server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), spec["job"], spec.get("index", 0))
print("READY", flush=True)
while True:
    time.sleep(1)
"""


def child_process(script: str, env: Mapping[str, str], stderr: Path | None = None) -> subprocess.Popen[str]:
    """`python -c script` with its stdout piped (text) and its stderr written to the file `stderr`
    (dropped without one)."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if stderr is None else stderr.open("w"),
        text=True,
    )


def kill_child(proc: subprocess.Popen[str]) -> None:
    """SIGKILL by PID (a TF server has no clean stop) unless it has ended, then reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def child_servers(
    script: str, envs: Sequence[Mapping[str, str]], logs: Sequence[Path] | None = None
) -> Iterator[list[subprocess.Popen[str]]]:
    """Runs `python -c script` once per environment, yields the processes once every one has printed
    READY, and kills them all when the block ends, also when a start failed. `logs`: a stderr file
    per server (the end of it is in the error of a server that did not start)."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, env in enumerate(envs):
            procs.append(child_process(script, env, logs[i] if logs else None))
        for i, proc in enumerate(procs):
            assert proc.stdout is not None
            if not proc.stdout.readline().startswith("READY"):
                log = f": {logs[i].read_text()[-2000:]}" if logs else ""
                raise RuntimeError(f"server {i} did not start{log}")
        yield procs
    finally:
        for proc in procs:
            kill_child(proc)


def run_client(script: str, env: Mapping[str, str], timeout: float = 900) -> Any:
    """Runs the client script (dedented) and returns what its `RESULT <json>` line holds; RuntimeError
    with the end of its stderr when it printed none."""
    client = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for line in client.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"the client failed: {client.stderr[-3000:]}")
