"""The producer's writes are the event loop's (issue 16): a connection whose consumer reads slowly
does not hold up the others.

One process: a PS and two worker servers (`grpc+geryon`); both workers reach the PS's data plane
through a TCP proxy (threads here) that passes the PS's bytes on at 256 KiB/s per connection. Worker
0 pulls 64 MiB: its connection's socket fills within a second and stays full (the pull would take
about 4 minutes), so the PS's write pass for it waits for EPOLLOUT. Meanwhile worker 1 pulls a 4 KB
tensor ten times: each is read, served and written by the same loop thread and must come back,
while worker 0's pull is still stuck. A loop that blocked in a send (or waited for that socket
before going back to epoll_wait) would not read worker 1's requests at all: its pulls would hit
their 4 s deadline. Then worker 0's step ends at its own deadline.
"""

from __future__ import annotations

import json

import pytest
from tf.tf_cluster import run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]


SCRIPT = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, pick_ports, proxy_listener, step_outcome
from tcp_proxy import serve_in_background
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET, RATE = -7200, -7300, 256 << 10
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)
other_port = next(p for p in pick_ports(3, WORKER_OFFSET) if p not in (ps_port, worker_port))
serve_in_background(listener, ps_port + PS_OFFSET, rate=RATE)  # the PS's bytes at RATE, per connection
_, servers = local_servers([ps_port, worker_port, other_port], PS_OFFSET, WORKER_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    big = tf.Variable(tf.zeros([16 << 20]))  # 64 MiB
    small = tf.Variable(tf.ones([1000]))
with tf.device("/job:worker/task:0"):
    big_sum = tf.reduce_sum(tf.identity(big))
with tf.device("/job:worker/task:1"):
    small_sum = tf.reduce_sum(tf.identity(small))

def sent():
    return sum(c.bytes_sent for c in geryon.tf.flow_counters() if c.role == "producer")

out = {}
with tf.compat.v1.Session(servers[1].target) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    out["warm"] = float(sess.run(small_sum))  # worker 1's flow is up
    outcome = {}
    before = sent()
    big_step = threading.Thread(target=lambda: outcome.update(big=step_outcome(sess, big_sum, 20000)))
    big_step.start()
    until = time.monotonic() + 10  # bounded: the big response is under way (its socket filling)
    while sent() - before < (2 << 20) and time.monotonic() < until:
        time.sleep(0.05)
    out["big_sent"] = sent() - before
    pulls = []
    for _ in range(10):
        start = time.monotonic()
        try:
            value = float(sess.run(small_sum, options=tf.compat.v1.RunOptions(timeout_in_ms=4000)))
        except tf.errors.OpError as e:
            value = type(e).__name__
        pulls.append([value, round(time.monotonic() - start, 3)])
    out["pulls"] = pulls
    out["big_still_running"] = big_step.is_alive()
    out["big_sent_by_then"] = sent() - before
    big_step.join()
    out["big"] = outcome["big"]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_consumer_that_reads_slowly_does_not_hold_up_another_connection() -> None:
    facts = run_script(SCRIPT, timeout=240)
    print(json.dumps(facts))
    assert facts["warm"] == 1000.0, facts
    assert facts["big_sent"] >= 2 << 20, facts  # worker 0's 64 MiB response was under way ...
    # ... and stuck behind its slow consumer (far from all of it sent) while worker 1 was served:
    assert facts["big_still_running"] and facts["big_sent_by_then"] < 48 << 20, facts
    assert [value for value, _ in facts["pulls"]] == [1000.0] * 10, facts
    # Each within its 4 s deadline (milliseconds on an idle host; a generous bound for a loaded one).
    assert max(took for _, took in facts["pulls"]) < 4.0, facts
    assert facts["big"] == "DeadlineExceededError", facts
