"""A receive whose flow is not connected yet does not connect on TensorFlow's executor thread.

Issue 16 item 4: the consumer used to dial the producer on the thread that called Recv (one of TF's
inter-op threads), under the flow's lock: about 3 s for a refused port, and for a silent host as
long as the kernel retries its SYNs (minutes), while that thread pool could run nothing else. Now
the first receive of an unconnected flow starts the connect on a thread of the transport and
waits in the flow's queue with every receive that follows; the connect sends them all, or fails
them all with its error, and gives up after 10 s in all (kConnectDeadline in transport.cc).

One process runs the servers (grpc+geryon). The far step issues 64 receives toward PS 1 at once
(the worker's server is configured with one inter-op thread, and 64 is more than any pool it might
get instead): a receive that blocked its thread (the first in the connect, the rest on the flow's
lock) would leave no thread for any other receive of the worker. The worker
looks for the PSes' data planes at gRPC port + WORKER_OFFSET: PS 0 listens there, PS 1 listens
elsewhere (PS_OFFSET) and in its place is either
- "silent": a socket whose accept queue is full (listen(0), filled), so the kernel drops the
  worker's SYNs: a host that never answers, without a network namespace; or
- "refused": nothing (every connect is refused at once).
"""

from __future__ import annotations

from typing import Any

import pytest
from tf.tf_cluster import run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]


SCRIPT = r"""
import json, os, socket, sys, threading, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import pick_ports
import tensorflow as tf
import geryon.tf

WORKER_OFFSET, PS_OFFSET, MODE = -7000, -7100, os.environ["MODE"]
FAR = 64  # receives in the far step: more than the threads of any inter-op pool they could block
ps0_port, ps1_port, w_port = pick_ports(3, WORKER_OFFSET)
silent, fillers = None, []
if MODE == "silent":
    silent = socket.socket()
    silent.bind(("127.0.0.1", ps1_port + WORKER_OFFSET))
    silent.listen(0)
    for _ in range(3):  # fill the accept queue: the kernel then drops every further SYN
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", ps1_port + WORKER_OFFSET))
        fillers.append(c)
    time.sleep(0.2)
spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps0_port}", f"127.0.0.1:{ps1_port}"],
                             "worker": [f"127.0.0.1:{w_port}"]})
one_thread = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
servers = [geryon.tf.server(spec, "ps", 0, data_port_offset=WORKER_OFFSET),
           geryon.tf.server(spec, "ps", 1, data_port_offset=PS_OFFSET),
           geryon.tf.server(spec, "worker", 0, config=one_thread, data_port_offset=WORKER_OFFSET)]
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    near = [tf.Variable(tf.fill([1000], float(i + 1))) for i in range(8)]
with tf.device("/job:ps/task:1"):
    far = [tf.Variable(tf.ones([10])) for _ in range(FAR)]
with tf.device("/job:worker/task:0"):
    near_total = tf.add_n([tf.reduce_sum(tf.identity(v)) for v in near])
    one_near = tf.reduce_sum(tf.identity(near[0]))
    far_total = tf.add_n([tf.reduce_sum(tf.identity(v)) for v in far])
options = tf.compat.v1.RunOptions(timeout_in_ms=60000)
out = {}
with tf.compat.v1.Session(servers[2].target) as sess:
    sess.run([v.initializer for v in near + far])
    # Eight receives from PS 0 in one step on a flow not connected yet, issued by one thread.
    out["near_total"] = float(sess.run(near_total, options=options))
    out["near_flows"] = [[c.klass, c.connections, c.messages_received] for c in geryon.tf.flow_counters()
                         if c.role == "consumer" and c.peer_task == "/job:ps/replica:0/task:0"]
    sess.run(one_near, options=options)  # this step's graph is registered before it is timed

    far_result = {}
    def pull_far():
        started = time.time()
        try:
            sess.run(far_total, options=options)
            far_result["error"] = None
        except tf.errors.OpError as e:
            far_result["error"] = [type(e).__name__, e.message[:2000]]
        far_result["seconds"] = time.time() - started
    t = threading.Thread(target=pull_far)
    t.start()
    time.sleep(0.5)  # the far receive is issued and connecting
    started = time.time()
    out["one_near"] = float(sess.run(one_near, options=options))
    out["near_seconds"] = time.time() - started
    out["far_still_running"] = t.is_alive()
    t.join(90)
    out["far"] = far_result
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _run(mode: str) -> dict[str, Any]:
    return run_script(SCRIPT, timeout=240, env={"MODE": mode})


def test_a_silent_peer_holds_back_no_other_receive_and_its_connect_gives_up_naming_peer_and_time() -> None:
    facts = _run("silent")
    # Eight receives queued on one connect all completed, on one connection.
    assert facts["near_total"] == 1000.0 * sum(range(1, 9)), facts
    assert sum(row[1] for row in facts["near_flows"]) == len(facts["near_flows"]) >= 1, facts
    assert sum(row[2] for row in facts["near_flows"]) >= 8, facts
    # The far connect was still running (its SYNs dropped) while the other receive, through the
    # same one-thread pool, came in well under a second.
    assert facts["far_still_running"], facts
    assert facts["one_near"] == 1000.0, facts
    assert facts["near_seconds"] < 1.0, facts
    # Then the far receive failed as an unreachable PS does (Unavailable, gRPC's words, the remote
    # target's tag), within the connect deadline, and the message says the peer and the time.
    kind, message = facts["far"]["error"]
    assert kind == "UnavailableError", facts
    assert "cannot reach /job:ps/replica:0/task:1" in message, message
    assert "failed to connect to all addresses" in message, message
    assert "no answer to the connect" in message and "after 10 s" in message, message
    assert "GRPC error information from remote target /job:ps/replica:0/task:1" in message, message
    assert 9.0 < facts["far"]["seconds"] < 20.0, facts


def test_a_refused_port_fails_fast_with_the_usual_error() -> None:
    facts = _run("refused")
    assert facts["near_total"] == 1000.0 * sum(range(1, 9)), facts
    assert facts["near_seconds"] < 1.0, facts
    kind, message = facts["far"]["error"]
    assert kind == "UnavailableError", facts
    assert "cannot reach /job:ps/replica:0/task:1" in message, message
    assert "failed to connect to all addresses; last error: port" in message, message
    assert "Connection refused" in message, message
    assert "GRPC error information from remote target /job:ps/replica:0/task:1" in message, message
    # The backoff (25 ms doubling, 8 attempts: about 3.2 s), not the 10 s deadline.
    assert facts["far"]["seconds"] < 6.0, facts
