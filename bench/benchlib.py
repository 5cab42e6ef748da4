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
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from geryon.tf.ports import free_port_pairs

REPO_ROOT = Path(__file__).resolve().parents[1]


T = TypeVar("T")


def on_testbeds(name: str, measure: Callable[[], T]) -> T:
    """measure() with namespace testbeds in a state directory of their own, whatever it brought up torn
    down afterwards, even on error; as anyone else than root, a message naming the bench and exit 2."""
    if os.geteuid() != 0:
        print(f"{name}: needs root (network namespaces)", file=sys.stderr)
        raise SystemExit(2)
    from geryon.testbed import down

    os.environ["GERYON_TESTBED_STATE"] = tempfile.mkdtemp(prefix=f"{name.replace('_', '-')}-")
    try:
        return measure()
    finally:
        down()


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


# The start of a client script that times pulls from a PS (bench_rendezvous.py, bench_rendezvous_libs.py):
# one TF1 session per entry of BENCH_SPEC's `workers` (name -> that cluster's worker address), each on its
# own graph: a float32 variable of N MB per N in `pulls_mb` and `small` variables of `small_floats` floats
# on the PS, read on the worker (rows "pull N MB", "<small> x <small_label>", "1 x <small_label>"), every
# row run `warmups` times. Leaves `sessions` (name -> (session, fetches)) and `fetches` (row -> tensor)
# to the measuring loop the script goes on with.
PULL_SESSIONS = r"""
import json, os, sys, time
import tensorflow as tf
spec = json.loads(os.environ["BENCH_SPEC"])
tf.compat.v1.disable_eager_execution()
sessions = {}
for name, worker in spec["workers"].items():
    graph = tf.Graph()
    with graph.as_default():
        fetches = {}
        with tf.device("/job:ps/task:0"):
            big = {mb: tf.Variable(tf.zeros([mb * 262144]), name=f"v{mb}") for mb in spec["pulls_mb"]}
            n = spec["small_floats"]
            small = [tf.Variable(tf.zeros([n]), name=f"s{i}") for i in range(spec["small"])]
        with tf.device("/job:worker/task:0"):
            for mb, v in big.items():
                fetches[f"pull {mb} MB"] = tf.identity(v)[0]  # the whole tensor crosses, little compute
            label = spec["small_label"]
            fetches[f"{spec['small']} x {label}"] = tf.add_n([tf.identity(v)[0] for v in small])
            fetches[f"1 x {label}"] = tf.identity(small[0])[0]
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session("grpc://" + worker, graph=graph)
    sess.run(init)
    for _ in range(spec["warmups"]):
        for f in fetches.values():
            sess.run(f)  # warm-up: connections, graph registration, allocator pools
    sessions[name] = (sess, fetches)
"""


def ps_worker_clusters(names: Sequence[str], data_offset: int) -> dict[str, dict[str, list[str]]]:
    """Per name, a loopback cluster of one PS and one worker on free ports whose data ports (port +
    `data_offset`) are free too."""
    clusters = {}
    for name in names:
        ps_port, worker_port = free_port_pairs(2, data_offset)
        clusters[name] = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    return clusters


def mse_step(strategy: Any, model: Any, optimizer: Any) -> Any:
    """For chief scripts (bench_ps_kill.py's; test_strategy.py's chief body imports it as
    bench.benchlib): a tf.function step that trains `model` under the parameter-server `strategy` on
    one batch x, loss mean(model(x) ** 2), the gradients applied by `optimizer`; schedule it with a
    ClusterCoordinator."""
    import tensorflow as tf

    @tf.function
    def step(x: Any) -> Any:
        def replica(x: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica, args=(x,))

    return step


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


def run_client(
    script: str,
    env: Mapping[str, str],
    timeout: float = 900,
    servers: Sequence[subprocess.Popen[str]] = (),
) -> Any:
    """Runs the client script (dedented) and returns what its `RESULT <json>` line holds; RuntimeError
    with the end of its stderr when it printed none. `servers` (child_servers' processes) are
    watched meanwhile: one that exits ends the client (a TF session waits on a dead server without
    end) with a RuntimeError naming it and its exit status; TimeoutError after `timeout` seconds."""
    client = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                stdout, stderr = client.communicate(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                dead = [(i, s.returncode) for i, s in enumerate(servers) if s.poll() is not None]
                if dead:
                    i, code = dead[0]
                    raise RuntimeError(
                        f"server {i} exited (status {code}) while the client ran; the client was stopped"
                    ) from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the client ran past {timeout:g} s; it was stopped") from None
    finally:
        kill_child(client)
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"the client failed: {stderr[-3000:]}")
