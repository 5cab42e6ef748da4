"""The data plane follows TF's cluster updates and finds data ports without collisions.

TF's own layout: the servers' cluster spec lists the PS and the worker only; the coordinator adds
itself as "chief" when it connects (`connect_to_cluster`, the eager context's server-def update).
The PS's first data-port candidate is held by another program that accepts and never answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geryon.tf.build import build

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, socket
import tensorflow as tf
import geryon.tf
from geryon.tf.ports import free_port_pairs
from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver

ps_port, worker_port = free_port_pairs(2, 1000)
# Another program on the PS's first data-port candidate: it accepts connections and says nothing.
blocker = socket.socket()
blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
blocker.bind(("0.0.0.0", ps_port + 1000))
blocker.listen(16)
spec = tf.train.ClusterSpec({"ps": [f"localhost:{ps_port}"], "worker": [f"localhost:{worker_port}"]})
ps = geryon.tf.server(spec, "ps", 0)
worker = geryon.tf.server(spec, "worker", 0)
resolver = SimpleClusterResolver(spec, rpc_layer=geryon.tf.PROTOCOL)
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)  # joins as "chief"
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(tf.ones([4096]))  # its initial value goes from the chief to the PS

@tf.function
def step():
    v.assign_add(tf.ones([4096]))
    return tf.reduce_sum(v)

results = [coordinator.schedule(step) for _ in range(3)]
coordinator.join()
flows = [
    {"local": f.local_task, "peer": f.peer_task, "peer_port": f.peer_port, "received": f.messages_received}
    for f in geryon.tf.flow_counters() if f.role == "consumer"
]
print("RESULT " + json.dumps({
    "sums": sorted(float(r.fetch()) for r in results),
    "value": float(tf.reduce_sum(v)),
    "ps_port": ps_port,
    "flows": flows,
}), flush=True)
os._exit(0)
"""


def test_chief_added_by_connect_to_cluster_and_a_taken_data_port() -> None:
    build()
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="1")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    facts = json.loads(lines[0][len("RESULT ") :])
    # Same numbers as on grpc: 4096 ones, +1 per step.
    assert facts["sums"] == [4096.0 * 2, 4096.0 * 3, 4096.0 * 4], facts
    assert facts["value"] == 4096.0 * 4, facts
    flows = facts["flows"]
    # The chief fetched the steps' results from the worker on the data plane: the worker accepted the
    # chief's hello, though its own cluster spec does not list the chief (before, it was refused as
    # a stranger); it learned the chief from the chief's session (the eager CreateContext).
    ps = "/job:ps/replica:0/task:0"
    chief = [f for f in flows if f["local"].startswith("/job:chief") and f["peer"].startswith("/job:worker")]
    assert chief and sum(f["received"] for f in chief) > 0, flows
    # Readers of the PS reached it on its second candidate (first + 1009), past the silent blocker.
    to_ps = [f for f in flows if f["peer"] == ps and f["received"] > 0]
    assert to_ps, flows
    assert {f["peer_port"] for f in to_ps} == {facts["ps_port"] + 1000 + 1009}, flows
