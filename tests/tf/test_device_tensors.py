"""Tensors in accelerator memory through `grpc+geryon`, on the GERYONTEST PluggableDevice.

GERYONTEST (native/test_device) is a real TensorFlow PluggableDevice whose memory happens to be host
memory: TF places Identity/_Send/_Recv on it, allocates its tensors with its allocator and copies
through its DeviceContext, exactly the path a GPU takes. So the pulls below land in device memory
and the gradient pushes leave from it, with no GPU on this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from tf.tf_cluster import REPO_ROOT, TfCluster

from geryon.tf.build import build, build_test_device

pytestmark = pytest.mark.slow
STEPS = 5
DEVICE = "/job:worker/replica:0/task:0/device:GERYONTEST:0"


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build()  # once, before the clusters' processes would race to build them
    build_test_device()


# A two-layer regression under ParameterServerStrategy whose parameters are pulled into, and whose
# updates are pushed from, the worker's GERYONTEST memory (the Identity ops on the device).
DEVICE_BODY = r"""
import numpy as np
strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
rng = np.random.default_rng(0)
with strategy.scope():
    w1 = tf.Variable(rng.normal(size=(64, 256)).astype("float32") * 0.1)
    w2 = tf.Variable(rng.normal(size=(256, 1)).astype("float32") * 0.1)
steps = ARGS["steps"]
xs = rng.normal(size=(steps, 32, 64)).astype("float32")
ys = rng.normal(size=(steps, 32, 1)).astype("float32")

@tf.function
def step(x, y):
    with tf.device("/device:GERYONTEST:0"):
        a, b = tf.identity(w1), tf.identity(w2)  # pulls: PS CPU -> worker device memory
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, a)), b) - y))
    ga, gb = tape.gradient(loss, [a, b])
    ua, ub = ga * 0.05, gb * 0.05
    with tf.device("/device:GERYONTEST:0"):
        ua, ub = tf.identity(ua), tf.identity(ub)  # pushes leave from device memory
    w1.assign_sub(ua)
    w2.assign_sub(ub)
    return loss

losses = []
for i in range(steps):
    losses.append(float(coordinator.schedule(step, args=(tf.constant(xs[i]), tf.constant(ys[i]))).fetch()))
emit({"losses": losses})
"""


def _train(protocol: str) -> tuple[dict, dict, dict, list[dict]]:
    env = {"GERYON_TEST_DEVICE": "1"}
    # Pulls (the worker receives) on class 0, pushes (the PS receives) on class 1.
    job_env = {"ps": {"GERYON_DEFAULT_CLASS": "1"}}
    with TfCluster(num_ps=1, num_workers=1, protocol=protocol, env=env, job_env=job_env) as cluster:
        result = cluster.run_chief(DEVICE_BODY, args={"steps": STEPS})
        time.sleep(0.6)  # the servers write their counters every 0.2 s
        device = cluster.device_counters("worker0")
        staging = cluster.staging_stats("worker0")
        flows = cluster.counters("worker0") + cluster.counters("ps0")
    assert "error" not in result, result
    return result, device, staging, flows


def test_device_tensors_train_as_under_grpc_through_the_device_context_and_the_staging_pool() -> None:
    reference, grpc_device, _, _ = _train("grpc")
    result, device, staging, flows = _train("grpc+geryon")
    assert len(reference["losses"]) == STEPS
    assert result["losses"] == pytest.approx(reference["losses"], rel=1e-6, abs=1e-7)
    assert reference["losses"][0] != reference["losses"][-1]  # it trained
    # Both classes carried bytes: pulls into device memory on 0, pushes from device memory on 1.
    received = {c["klass"]: 0 for c in flows}
    for c in flows:
        if c["role"] == "consumer":
            received[c["klass"]] += c["bytes_received"]
    model_bytes = (64 * 256 + 256) * 4
    assert received[0] >= STEPS * model_bytes and received[1] >= STEPS * model_bytes, received
    # Every pull and push of the worker went through staging and the device context.
    assert staging["staged_receives"] >= 2 * STEPS and staging["staged_sends"] >= 2 * STEPS, staging
    assert staging["copy_failures"] == 0
    # The plugin saw each of them as a real host<->device copy, as many as under TF's own grpc.
    assert device["htod"] >= staging["staged_receives"] and device["dtoh"] >= staging["staged_sends"], device
    assert device["htod_bytes"] == grpc_device["htod_bytes"], (device, grpc_device)
    assert device["dtoh_bytes"] == grpc_device["dtoh_bytes"], (device, grpc_device)
    # The hot path allocates nothing: after the first step every staging buffer came from the pool.
    (pool,) = staging["pools"]
    assert pool["device"] == DEVICE
    assert pool["misses"] <= 4 and pool["over_bound"] == 0, pool
    assert pool["hits"] >= staging["staged_receives"] + staging["staged_sends"] - pool["misses"], pool


SLOW_FLOATS, FAIL_FLOATS = 777, 617  # sizes no other tensor of the graph has
# TF1 between-graph on one PS and one worker: a pull whose host->device copy is slow is aborted by the
# session's deadline mid-copy; a pull whose copy fails fails alone; the flow goes on serving.
FAULT_BODY = r"""
import time
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    weights = tf.compat.v1.get_variable("w", initializer=tf.ones([1000]))
    slow = tf.compat.v1.get_variable("slow", initializer=tf.ones([ARGS["slow"]]))
    failing = tf.compat.v1.get_variable("failing", initializer=tf.ones([ARGS["fail"]]))
with tf.device("/job:worker/task:0/device:GERYONTEST:0"):
    on_device = [tf.identity(v, name=f"{v.op.name}_on_device") for v in (weights, slow, failing)]
with tf.device("/job:worker/task:0/device:CPU:0"):
    total, slow_sum, failing_sum = [tf.reduce_sum(t) for t in on_device]
# A dead tensor into device memory: the PS's Switch sends `taken` dead unless `flag`; exactly one of
# the Merge's inputs is alive.
with tf.device("/job:ps/task:0/device:CPU:0"):
    flag = tf.compat.v1.placeholder(tf.bool, [], name="flag")
    _, taken = tf.raw_ops.Switch(data=weights.value(), pred=flag)
with tf.device("/job:worker/task:0/device:GERYONTEST:0"):
    taken_on_device = tf.identity(taken, name="taken_on_device")
with tf.device("/job:worker/task:0/device:CPU:0"):
    not_taken, _ = tf.raw_ops.Switch(data=tf.zeros([1000]), pred=flag)
    merged, _ = tf.raw_ops.Merge(inputs=[taken_on_device, not_taken])
    merged_sum = tf.reduce_sum(merged)
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
target = "grpc://" + cluster_spec.task_address("worker", 0)
out = {}
with tf.compat.v1.Session(target, config=config) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    out["first"] = float(sess.run(total))
    started = time.time()
    try:
        sess.run(slow_sum, options=tf.compat.v1.RunOptions(timeout_in_ms=500))
        out["slow"] = "ran"
    except tf.errors.DeadlineExceededError as e:
        out["slow"] = "deadline"
    out["slow_waited"] = time.time() - started
    out["after_abort"] = float(sess.run(total))
    try:
        sess.run(failing_sum)
        out["failing"] = "ran"
    except tf.errors.OpError as e:
        out["failing"] = type(e).__name__
        out["failing_message"] = e.message
    out["after_failure"] = float(sess.run(total))
    out["slow_again"] = float(sess.run(slow_sum))  # no deadline: the slow copy completes
    out["dead"] = float(sess.run(merged_sum, {flag: False}))
    out["alive"] = float(sess.run(merged_sum, {flag: True}))
emit(out)
"""


def test_abort_mid_copy_and_a_failed_copy_fail_only_their_receive() -> None:
    worker_env = {
        "GERYON_TEST_DEVICE_SLOW_BYTES": str(SLOW_FLOATS * 4),
        "GERYON_TEST_DEVICE_SLOW_MS": "2000",
        "GERYON_TEST_DEVICE_FAIL_HTOD_BYTES": str(FAIL_FLOATS * 4),
        # A pool that may cache nothing: every staging buffer is allocated and freed, nothing breaks.
        "GERYON_STAGING_POOL_BYTES": "0",
    }
    with TfCluster(
        num_ps=1, num_workers=1, env={"GERYON_TEST_DEVICE": "1"}, job_env={"worker": worker_env}
    ) as c:
        result = c.run_chief(FAULT_BODY, timeout=150, args={"slow": SLOW_FLOATS, "fail": FAIL_FLOATS})
        time.sleep(0.6)
        staging = c.staging_stats("worker0")
        device = c.device_counters("worker0")
        alive = {name: proc.poll() is None for name, proc in c.procs.items()}
    assert "error" not in result, result
    assert result["first"] == pytest.approx(1000.0)
    # The deadline aborted the receive while its copy was running; the step ended with the copy.
    assert result["slow"] == "deadline" and result["slow_waited"] < 10, result
    assert result["after_abort"] == pytest.approx(1000.0)
    # The failed host->device copy: DataLoss naming the device and the tensor's rendezvous key.
    assert result["failing"] == "DataLossError", result
    message = result["failing_message"]
    assert "Geryon data plane: copying tensor" in message and DEVICE in message, message
    # (The PS has the device too, and TF1 puts the variable's read on the PS's GERYONTEST: so this
    # pull is also sent from device memory, through the PS's staging pool.)
    key = (
        r"/job:ps/replica:0/task:0/device:\w+:0;[0-9a-f]+;"
        + re.escape(DEVICE)
        + r";edge_\d+_failing_on_device/"
    )
    assert re.search(key, message), message
    assert result["after_failure"] == pytest.approx(1000.0)
    assert result["slow_again"] == pytest.approx(float(SLOW_FLOATS))
    # A dead tensor into device memory arrives dead (no copy); the live one arrives copied.
    assert result["dead"] == 0.0 and result["alive"] == pytest.approx(1000.0), result
    assert staging["copy_failures"] == 1 and device["injected_failures"] == 1, (staging, device)
    # The session gave up at its 0.5 s deadline while the 2 s copy ran: the abort reached the receive
    # mid-copy, and the receive ended with it once the copy was done.
    assert result["slow_waited"] < 1.5 and staging["aborted_during_copy"] == 1, (result, staging)
    (pool,) = staging["pools"]
    assert pool["limit_bytes"] == 0 and pool["cached_bytes"] == 0 and pool["hits"] == 0, pool
    assert pool["over_bound"] >= staging["staged_receives"] >= 5, (pool, staging)
    assert all(alive.values()), alive


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_staging_pool_size_is_a_clear_error_at_server_start(value: str) -> None:
    script = """
import tensorflow as tf, geryon.tf
from geryon.tf.ports import free_port_pairs
(port,) = free_port_pairs(1, 1000)
try:
    geryon.tf.server(tf.train.ClusterSpec({"ps": [f"127.0.0.1:{port}"]}), "ps", 0)
    print("STARTED")
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""
    env = {
        **os.environ,
        "GERYON_STAGING_POOL_BYTES": value,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(REPO_ROOT),
    }
    env.pop("GERYON_DATA_PORT_OFFSET", None)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT
    )
    assert "ERROR InvalidArgumentError" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "GERYON_STAGING_POOL_BYTES must be a whole number of bytes >= 0" in out.stdout
    assert f"got '{value}'" in out.stdout
