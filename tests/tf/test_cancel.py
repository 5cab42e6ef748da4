"""Cancel frames (protocol 4, issue 16): an aborted receive tells its producer, which stops sending.

One process: a PS and a worker server (`grpc+geryon`); the worker reaches the PS's data plane through
a TCP proxy (a thread here) that passes the PS's bytes on at 16 MB/s, so a 128 MiB pull takes about
8 s. The step has a 1.5 s deadline: TF aborts it mid-transfer, the worker's receive is aborted, and
its cancel frame reaches the PS, whose writer drops the rest of the chunked response. Before protocol
4 the PS went on sending all 128 MiB into the flow, to be read and discarded by the worker.
"""

from __future__ import annotations

import json

import pytest
from tf.tf_cluster import run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]


SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, proxy_listener, step_outcome
from tcp_proxy import serve_in_background
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET, RATE = -7000, -7100, 16 << 20
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)
serve_in_background(listener, ps_port + PS_OFFSET, rate=RATE)  # the PS's bytes at RATE, the worker's at once
_, (ps, worker) = local_servers([ps_port, worker_port], PS_OFFSET, WORKER_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    big = tf.Variable(tf.zeros([32 << 20]))  # 128 MiB
    small = tf.Variable(tf.ones([1000]))
with tf.device("/job:worker/task:0"):
    big_sum = tf.reduce_sum(tf.identity(big))
    small_sum = tf.reduce_sum(tf.identity(small))

FIELDS = ("bytes_sent", "chunks_sent", "cancelled", "cancels_sent", "aborted")

def flow(role):
    rows = [c for c in geryon.tf.flow_counters() if c.role == role]
    return {k: sum(getattr(c, k) for c in rows) for k in FIELDS}

out = {}
with tf.compat.v1.Session(worker.target) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    out["warm"] = float(sess.run(small_sum))  # the flow is up: the pull below starts at once
    before = flow("producer")
    out["big"] = step_outcome(sess, big_sum, 1500)
    time.sleep(1.0)  # the cancel crosses; what the kernel and the proxy hold drains
    out["after_abort"] = flow("producer")
    time.sleep(2.0)
    out["later"] = flow("producer")
    out["consumer"] = flow("consumer")
    out["before"] = before
    out["small_again"] = float(sess.run(small_sum))  # the flow still serves
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_an_aborted_128_mib_pull_stops_crossing_its_flow() -> None:
    facts = run_script(SCRIPT, timeout=240)
    print(json.dumps(facts))
    assert facts["big"] == "DeadlineExceededError", facts
    sent = facts["later"]["bytes_sent"] - facts["before"]["bytes_sent"]
    # The PS stopped well before 128 MiB: about 1.5 s at 16 MB/s plus what socket buffers held.
    assert sent < 64 << 20, facts
    # ... and it stays stopped: nothing more in the 2 s after the cancel had crossed.
    assert facts["later"]["chunks_sent"] == facts["after_abort"]["chunks_sent"], facts
    assert facts["later"]["cancelled"] >= 1, facts
    assert facts["consumer"]["cancels_sent"] >= 1 and facts["consumer"]["aborted"] >= 1, facts
    assert facts["small_again"] == 1000.0, facts
