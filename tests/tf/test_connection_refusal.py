"""A consumer refused because the producer is at its connection limit gets a transient error.

Issue 16: a refusal must keep TensorFlow's meaning. A task that is not in the cluster is refused for
good (FailedPrecondition, tests/tf/test_transport.py); a process that has as many data-plane
connections open as it accepts refuses a new one only for now, so the consumer's receive fails with
Unavailable (TF retries it) and a message that names the limit and how to raise it. The limit is
made tiny with GERYON_MAX_ACCEPTED_CONNECTIONS, which a bad value refuses at server start.

One process runs a PS and two workers (grpc+geryon): worker 0 pulls a variable (its flow takes the
PS's one allowed connection and stays open), then worker 1 pulls it and is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]
TESTS_TF = str(Path(__file__).parent)


def _run(script: str, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TESTS_TF": TESTS_TF, **env},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    facts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    facts["stderr"] = result.stderr
    return facts


AT_LIMIT_SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import DATA_OFFSET, pick_ports
import tensorflow as tf
import geryon.tf

ps_port, w0_port, w1_port = pick_ports(3)
spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                             "worker": [f"127.0.0.1:{w0_port}", f"127.0.0.1:{w1_port}"]})
servers = [geryon.tf.server(spec, job, i, data_port_offset=DATA_OFFSET)
           for job, i in (("ps", 0), ("worker", 0), ("worker", 1))]
out = {"limit": geryon.tf.load().cdll.geryon_accepted_connection_limit()}
graph = tf.Graph()
with graph.as_default():
    with tf.device("/job:ps/task:0"):
        v = tf.Variable(tf.ones([1000]))
    totals = []
    for w in (0, 1):
        with tf.device(f"/job:worker/task:{w}"):
            totals.append(tf.reduce_sum(tf.identity(v)))
options = tf.compat.v1.RunOptions(timeout_in_ms=30000)
# One session per worker, each fetching on its own master: the limit counts every connection this
# process accepts (all three servers'), so no other flow may cross (e.g. a fetch from worker 1).
with tf.compat.v1.Session(servers[1].target, graph=graph) as sess0, \
        tf.compat.v1.Session(servers[2].target, graph=graph) as sess1:
    sess0.run(v.initializer)
    out["worker0"] = float(sess0.run(totals[0], options=options))
    for attempt in range(2):  # the second within the fail-fast window, or a redial: same answer
        started = time.time()
        try:
            out[f"worker1_{attempt}"] = float(sess1.run(totals[1], options=options))
        except tf.errors.OpError as e:
            out[f"worker1_{attempt}"] = [type(e).__name__, e.message[:2000], time.time() - started]
    out["worker0_again"] = float(sess0.run(totals[0], options=options))  # its flow is still served
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_consumer_refused_at_the_connection_limit_gets_unavailable_naming_the_limit() -> None:
    facts = _run(AT_LIMIT_SCRIPT, {"GERYON_MAX_ACCEPTED_CONNECTIONS": "1"})
    assert facts["limit"] == 1
    assert facts["worker0"] == 1000.0 and facts["worker0_again"] == 1000.0, facts
    for attempt in ("worker1_0", "worker1_1"):
        kind, message, seconds = facts[attempt]
        assert kind == "UnavailableError", facts  # transient: TF retries it, not a permanent refusal
        refusal = "/job:ps/replica:0/task:0 refused the connection: this process has 1 data-plane connections"
        assert refusal in message, message
        assert "set by GERYON_MAX_ACCEPTED_CONNECTIONS=1" in message and "raise or unset it" in message
        assert "GRPC error information from remote target /job:ps/replica:0/task:0" in message
        assert seconds < 10  # answered at once, not after the dial's retries
    assert "refused a connection from 127.0.0.1" in facts["stderr"]


ENV_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import DATA_OFFSET, pick_ports
import tensorflow as tf
import geryon.tf
(port,) = pick_ports(1)
try:
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{port}"]})
    geryon.tf.server(spec, "ps", 0, data_port_offset=DATA_OFFSET)
    error = None
except Exception as e:
    error = str(e)[:2000]
print(json.dumps({"error": error}), flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("value", ["0", "many", "8193", "-4"])
def test_a_bad_connection_limit_fails_the_server_start_naming_the_variable(value: str) -> None:
    facts = _run(ENV_SCRIPT, {"GERYON_MAX_ACCEPTED_CONNECTIONS": value})
    expected = f"GERYON_MAX_ACCEPTED_CONNECTIONS='{value}' is not a whole number of connections in [1, 8192]"
    assert facts["error"] is not None and expected in facts["error"], facts
