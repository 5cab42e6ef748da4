"""`grpc+geryon` trains exactly as TF's `grpc` does: 1 PS, 2 workers and a chief, separate processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tf.tf_cluster import CNN_BODY, DATA_OFFSET, TfCluster, pick_ports

from geryon.tf.build import build

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]
STEPS = 6


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build()  # once, before the clusters' processes would race to build it


def _train(protocol: str, job_env: dict[str, dict[str, str]] | None = None) -> dict:
    with TfCluster(num_ps=1, num_workers=2, protocol=protocol, job_env=job_env) as cluster:
        result = cluster.run_chief(CNN_BODY, args={"steps": STEPS})
    assert "error" not in result, result
    return result


def test_same_loss_trajectory_as_grpc_with_both_classes_in_use() -> None:
    reference = _train("grpc")
    # Pulls (the workers receive) on class 0, gradient pushes (the PS receives) on class 1.
    geryon_run = _train("grpc+geryon", job_env={"ps": {"GERYON_DEFAULT_CLASS": "1"}})
    assert len(reference["losses"]) == STEPS
    assert geryon_run["losses"] == pytest.approx(reference["losses"], rel=1e-6, abs=1e-7)
    # It really trained: the loss moved.
    assert reference["losses"][0] != reference["losses"][-1]


def _server_script(body: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


def test_every_data_port_candidate_taken_is_a_clear_error() -> None:
    # A task listens on the first free of 8 candidates (first + i * 1009, wrapping in 1024..65535;
    # DataPortCandidate in transport.cc); with all of them taken the server's start names the rule.
    port = pick_ports(1)[0]
    first = port + DATA_OFFSET
    candidates = [1024 + (first - 1024 + i * 1009) % (65536 - 1024) for i in range(8)]
    result = _server_script(
        f"""
        import socket
        import tensorflow as tf
        import geryon.tf
        blockers = []
        for p in {candidates}:
            b = socket.socket()
            try:
                b.bind(("0.0.0.0", p))
                b.listen(1)
            except OSError:
                pass  # taken already: as good
            blockers.append(b)
        spec = tf.train.ClusterSpec({{"ps": ["127.0.0.1:{port}"]}})
        try:
            geryon.tf.server(spec, "ps", 0, data_port_offset={DATA_OFFSET})
        except Exception as e:
            print("ERROR", type(e).__name__, e)
        """
    )
    assert f"cannot listen on data port {first} for /job:ps/replica:0/task:0" in result.stdout, (
        result.stdout + result.stderr[-2000:]
    )
    assert "every candidate is taken" in result.stdout and "first + i * 1009" in result.stdout
    assert "GERYON_DATA_PORT_OFFSET" in result.stdout


def test_a_data_port_candidate_that_is_another_tasks_grpc_port_is_left_to_it() -> None:
    # TF's tests pick gRPC ports with portpicker; two of them 1000 apart put one task's first data-port
    # candidate (gRPC port + offset) on the other's gRPC port. Found by TF's own fault_tolerance_test
    # on grpc+geryon: the worker's data plane, started first, took the port, and the PS's gRPC server
    # failed to bind it ("Failed to add port to server"), hanging the test. The worker started first
    # here must leave it to the PS, listen on its next candidate, and be found there by the PS's
    # consumer, which tries the PS's own gRPC port first (its server closes on the hello).
    for _ in range(50):
        worker = pick_ports(1)[0]
        ps = worker + DATA_OFFSET
        second = _candidates(ps)[1]
        free = all(_bindable(p) for p in (ps, ps + DATA_OFFSET, second))
        if free and ps + DATA_OFFSET > 1024:
            break
    else:
        pytest.skip("no free ports for the layout")
    result = _server_script(
        f"""
        import tensorflow as tf
        import geryon.tf
        spec = tf.train.ClusterSpec({{"ps": ["127.0.0.1:{ps}"], "worker": ["127.0.0.1:{worker}"]}})
        w = geryon.tf.server(spec, "worker", 0, data_port_offset={DATA_OFFSET})
        p = geryon.tf.server(spec, "ps", 0, data_port_offset={DATA_OFFSET})  # its gRPC port is free
        tf.compat.v1.disable_eager_execution()
        with tf.device("/job:ps/task:0"):
            v = tf.compat.v1.get_variable("v", initializer=tf.ones([1000]))
        with tf.device("/job:worker/task:0"):
            pulled = tf.reduce_sum(v)  # the worker receives from the PS
            doubled = v * 2.0
        with tf.device("/job:ps/task:0"):
            pushed = tf.reduce_sum(doubled)  # the PS receives from the worker
        with tf.compat.v1.Session(w.target) as sess:
            sess.run(v.initializer)
            print("RESULT", *sess.run([pulled, pushed]))
        for f in geryon.tf.flow_counters():
            if f.role == "consumer" and f.messages_received > 0:
                print("FLOW", f.local_task, f.peer_task, f.peer_port)
        """
    )
    assert "RESULT 1000.0 2000.0" in result.stdout, result.stdout + result.stderr[-3000:]
    flows = [line.split() for line in result.stdout.splitlines() if line.startswith("FLOW")]
    ports = {(local, peer): int(port) for _, local, peer, port in flows}
    ps_task, worker_task = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
    # The worker left its first candidate (the PS's gRPC port) and listens on a later one: the second,
    # unless another test's process took that port between the check above and the bind (the suite runs
    # in parallel), when the data plane rightly moves on to the third, and so on.
    assert ports[(ps_task, worker_task)] in _candidates(ps)[1:], flows
    assert ports[(worker_task, ps_task)] in _candidates(ps + DATA_OFFSET), flows


def _candidates(first: int, count: int = 8) -> list[int]:
    """A task's first `count` data-port candidates (native/rendezvous/sockets.cc DataPortCandidate)."""
    return [1024 + (first - 1024 + i * 1009) % (65536 - 1024) for i in range(count)]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_bad_offsets_are_refused_naming_the_setting() -> None:
    port = pick_ports(1)[0]
    result = _server_script(
        f"""
        import os
        import tensorflow as tf
        import geryon.tf
        from geryon.errors import UsageError
        spec = tf.train.ClusterSpec({{"ps": ["127.0.0.1:{port}"]}})
        try:
            geryon.tf.server(spec, "ps", 0, data_port_offset=0)
        except UsageError as e:
            print("USAGE", e)
        os.environ["GERYON_DATA_PORT_OFFSET"] = "lots"
        try:
            geryon.tf.server(spec, "ps", 0)
        except Exception as e:
            print("ENV", type(e).__name__, e)
        os.environ["GERYON_DATA_PORT_OFFSET"] = "60000"
        try:
            geryon.tf.server(spec, "ps", 0)
        except Exception as e:
            print("RANGE", type(e).__name__, e)
        """
    )
    out = result.stdout
    assert "USAGE data_port_offset must be a non-zero int in -65535..65535, got 0" in out, out + result.stderr
    assert "ENV InvalidArgumentError" in out and "GERYON_DATA_PORT_OFFSET must be a non-zero integer" in out
    assert "RANGE InvalidArgumentError" in out and "out of range" in out


# TF1 between-graph training: variables placed by replica_device_setter on the PS, the worker's
# client runs a MonitoredTrainingSession; fixed data, so both protocols must give the same losses.
TF1_BODY = r"""
import numpy as np
tf.compat.v1.disable_eager_execution()
tf.compat.v1.set_random_seed(1)
jobs = {job: cluster_spec.job_tasks(job) for job in ("ps", "worker")}
ps_only = tf.train.ClusterSpec(jobs)
setter = tf.compat.v1.train.replica_device_setter(cluster=ps_only, worker_device="/job:worker/task:0")
with tf.compat.v1.device(setter):
    x = tf.compat.v1.placeholder(tf.float32, [16, 20])
    y = tf.compat.v1.placeholder(tf.int64, [16])
    glorot = tf.compat.v1.glorot_uniform_initializer
    w1 = tf.compat.v1.get_variable("w1", [20, 32], initializer=glorot(seed=1))
    w2 = tf.compat.v1.get_variable("w2", [32, 10], initializer=glorot(seed=2))
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    step = tf.compat.v1.train.get_or_create_global_step()
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
rng = np.random.default_rng(0)
xs = rng.normal(size=(ARGS["steps"], 16, 20)).astype("float32")
ys = rng.integers(0, 10, size=(ARGS["steps"], 16))
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
losses = []
with tf.compat.v1.train.MonitoredTrainingSession(
    master="grpc://" + cluster_spec.task_address("worker", 0), is_chief=True, config=config,
    save_checkpoint_secs=None, save_summaries_steps=None, log_step_count_steps=None,
) as sess:
    for i in range(ARGS["steps"]):
        losses.append(float(sess.run([loss, train], {x: xs[i], y: ys[i]})[0]))
emit({"losses": losses})
"""


def test_tf1_between_graph_training_matches_grpc() -> None:
    results = {}
    for protocol in ("grpc", "grpc+geryon"):
        with TfCluster(num_ps=1, num_workers=1, protocol=protocol) as cluster:
            results[protocol] = cluster.run_chief(TF1_BODY, args={"steps": STEPS})
            time.sleep(0.6)  # the servers write their counters every 0.2 s
            counters = cluster.counters("worker0")
    assert len(results["grpc"]["losses"]) == STEPS
    assert results["grpc+geryon"]["losses"] == pytest.approx(results["grpc"]["losses"], rel=1e-6, abs=1e-7)
    assert results["grpc"]["losses"][0] != results["grpc"]["losses"][-1]
    pulls = [c for c in counters if c["role"] == "consumer" and "ps" in c["peer_task"]]
    assert pulls and pulls[0]["bytes_received"] >= STEPS * (20 * 32 + 32 * 10) * 4
