"""The consumer's combined request writes (native/rendezvous/transport.cc, ClientConn::Send).

Requests issued while another thread writes to the flow go out with that thread's next sendmsg
(flat combining, counter `requests_combined`). Whatever the timing, every request must reach the
producer once, whole and answered: a TF1 step pulls 128 tensors of 4 KiB from one PS (TF's executor
issues the receives from its inter-op threads at once), 20 steps, and both ends of the flow must
agree byte for byte and message for message on what the consumer sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from tf.tf_cluster import run_script

from geryon.tf import sanitizers
from geryon.tf.build import build

pytestmark = pytest.mark.slow

PULLS, STEPS = 128, 20


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build(sanitizer=sanitizers.active())  # the variant a sanitizer run (test_sanitizers.py) loads


# One process: a PS and a worker server. Variable i holds 1024 floats of value i + 1, so a step's
# sum says whether every pull brought its own tensor (a request lost, duplicated or cut would hang
# the step, fail the flow, or give another sum).
SCRIPT = r"""
import json, os, sys
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, pick_ports
import tensorflow as tf
import geryon.tf

PULLS, STEPS = int(os.environ["PULLS"]), int(os.environ["STEPS"])
v1 = tf.compat.v1
spec, servers = local_servers(pick_ports(2))
graph = tf.Graph()
with graph.as_default():
    with v1.device("/job:ps/task:0"):
        vs = [v1.get_variable(f"v{i}", [1024], use_resource=True,
                              initializer=v1.constant_initializer(float(i + 1))) for i in range(PULLS)]
    with v1.device("/job:worker/task:0"):
        total = tf.add_n([tf.reduce_sum(v) for v in vs])
    init = v1.global_variables_initializer()

def rows(role):
    return {(c.local_task, c.peer_task, c.klass): c for c in geryon.tf.flow_counters() if c.role == role}

config = v1.ConfigProto(inter_op_parallelism_threads=8)
with v1.Session(servers[1].target, graph=graph, config=config) as sess:
    sess.run(init)
    sess.run(total)  # the flow is dialed here: its hello is not what this test counts
    before = rows("consumer"), rows("producer")
    values = [float(sess.run(total)) for _ in range(STEPS)]
after = rows("consumer"), rows("producer")
def delta(side, field):
    return sum(getattr(c, field) - getattr(before[side].get(k), field, 0) for k, c in after[side].items())
print(json.dumps({
    "values": values,
    "consumer": {f: delta(0, f) for f in ("bytes_sent", "messages_sent", "requests_combined", "errors")},
    "producer": {f: delta(1, f) for f in ("bytes_received", "messages_received", "errors")},
}), flush=True)
os._exit(0)
"""


def test_combined_requests_all_reach_the_producer_whole_and_each_is_answered() -> None:
    facts: dict[str, Any] = run_script(SCRIPT, timeout=240, env={"PULLS": str(PULLS), "STEPS": str(STEPS)})
    expected = 1024.0 * PULLS * (PULLS + 1) / 2
    assert facts["values"] == [expected] * STEPS, facts["values"]
    consumer, producer = facts["consumer"], facts["producer"]
    assert consumer["errors"] == 0 and producer["errors"] == 0, facts
    # Every request is one message, and whichever thread wrote it, the producer got all its bytes.
    assert consumer["messages_sent"] == producer["messages_received"] == PULLS * STEPS, facts
    assert consumer["bytes_sent"] == producer["bytes_received"] > 28 * PULLS * STEPS, facts
    # Combined requests are a subset of them (how many depends on the threads' timing).
    assert 0 <= consumer["requests_combined"] < consumer["messages_sent"], facts
