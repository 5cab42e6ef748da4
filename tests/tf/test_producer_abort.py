"""The producer aborts its step when its consumer goes away or cancels (issue 16), as TF's worker does.

TF's gRPC worker aborts a step's rendezvous (Worker::AbortStep: "Step N cancelled.  Cancelling
rendezvous.", a second later) when a RecvTensor call of that step is cancelled, which gRPC does when
the consumer's connection goes. Geryon's producer does the same when an accepted connection ends
(EOF, reset, error) with requests still waiting for their tensor, or when a cancel frame names one.

One TF process (a PS and a worker server, `grpc+geryon`); the worker reaches the PS's data plane
through a proxy that is a process of its own, so that it can be killed by SIGKILL while a request is
outstanding, after it reset its PS side (SIGUSR1): the PS sees its consumer's connection reset, as
when the consumer's host or process dies, before the worker's failure can reach it through TF. The
PS's step waits for a tensor that is not there yet (a dequeue from an empty queue).
"""

from __future__ import annotations

import json
import re

import pytest
from tf.tf_cluster import run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]


SCRIPT = r"""
import json, os, signal, sys, threading, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, proxy_listener, step_outcome
from tcp_proxy import serve_in_process
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET = -7000, -7100
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)

# The proxy: a process of its own (killed by PID), accepting on the script's listening socket, so a
# second proxy can take over the same port after the first is killed.
def start_proxy():
    return serve_in_process(listener, ps_port + PS_OFFSET)

def kill(p):
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)

def producer(field):
    return sum(getattr(c, field) for c in geryon.tf.flow_counters() if c.role == "producer")

def wait_for(cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond(): return True
        time.sleep(0.02)
    return cond()

proxy = start_proxy()
_, (ps, worker) = local_servers([ps_port, worker_port], PS_OFFSET, WORKER_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    queue = tf.queue.FIFOQueue(10, tf.float32, shapes=[[1000]])
    enqueue = queue.enqueue(tf.ones([1000]))
    item = queue.dequeue()  # the PS's tensor: there only once something was enqueued
with tf.device("/job:worker/task:0"):
    total = tf.reduce_sum(tf.identity(item))

out = {}
with tf.compat.v1.Session(worker.target) as sess:
    # 1. A step answered in full, then the consumer's connection goes with nothing outstanding.
    sess.run(enqueue)
    out["clean"] = float(sess.run(total))
    kill(proxy)
    time.sleep(2.0)  # past TF's 1 s delay
    out["aborted_after_clean_close"] = producer("steps_aborted")
    proxy = start_proxy()

    # 2. The cancel frame: the step's deadline aborts the worker's receive, which is still waiting on
    # the PS (the queue is empty), so the worker cancels it and the PS aborts its part of the step.
    # The deadline also makes TF's master cancel the PS's part itself (over gRPC, at the same time);
    # when that wins, the PS's wait has ended before the cancel frame comes and nothing is left for
    # the data plane to abort (about 1 run in 5 here). So up to 3 tries for the cancel frame's abort.
    out["cancel_tries"] = 0
    while out["cancel_tries"] < 3 and producer("steps_aborted") == 0:
        out["cancel_tries"] += 1
        before = producer("messages_received")
        out["deadline_step"] = step_outcome(sess, total, 4000)
        out["request_reached_ps"] = producer("messages_received") > before
        wait_for(lambda: producer("steps_aborted") >= 1, 5)
    out["aborted_by_cancel"] = producer("steps_aborted")

    # 3. The consumer's connection reset mid-request: while the worker's receive waits on the PS, the
    # proxy resets its PS side (the PS sees what it sees when its consumer's host dies), then dies.
    # Killed outright, it would close both sides at once, and the worker's failure could reach the PS
    # first through TF's own cancellation of the step (TF aborts it then, not the data plane).
    before = producer("messages_received")
    result = {}
    def run():
        started = time.monotonic()
        result["step"] = step_outcome(sess, total, 60000)
        result["seconds"] = time.monotonic() - started
    thread = threading.Thread(target=run)
    thread.start()
    out["request_outstanding"] = wait_for(lambda: producer("messages_received") > before, 30)
    time.sleep(0.3)
    aborted_before_kill = producer("steps_aborted")
    killed_at = time.monotonic()
    os.kill(proxy.pid, signal.SIGUSR1)
    out["aborted_by_kill"] = wait_for(lambda: producer("steps_aborted") > aborted_before_kill, 15)
    out["abort_seen_after_s"] = time.monotonic() - killed_at
    kill(proxy)  # now the worker's side goes too: its receive fails, the step ends
    time.sleep(1.5)  # TF's delay, then the abort itself (logged before it is scheduled)
    thread.join(timeout=60)
    out["kill_step"] = result.get("step", "hung")
    out["steps_aborted"] = producer("steps_aborted")
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_the_producer_aborts_a_step_whose_consumer_went_away_or_cancelled() -> None:
    facts = run_script(SCRIPT, timeout=240, env={"TF_CPP_MIN_LOG_LEVEL": "0"}, keep_stderr=True)
    stderr = facts.pop("stderr")
    print(json.dumps(facts))
    logged = re.findall(r"Geryon data plane: the consumer (\S+) (.*); aborting step (\d+) in 1 s", stderr)
    assert facts["clean"] == 1000.0, facts
    # A connection that ended with every request answered aborts nothing. (Seen once at 1 under load,
    # 2026-12-02, not reproduced: the abort's own log line, printed here, names its step and cause.)
    assert facts["aborted_after_clean_close"] == 0, (facts, logged)
    # The cancel frame of a receive still waiting on the PS aborted the PS's step.
    assert facts["deadline_step"] == "DeadlineExceededError", facts
    assert facts["request_reached_ps"], facts
    assert facts["aborted_by_cancel"] == 1, facts
    # The consumer's connection reset while its request waited: aborted at once (the abort runs 1 s
    # later, TF's delay), and the step did not hang.
    assert facts["request_outstanding"] and facts["aborted_by_kill"], facts
    assert facts["abort_seen_after_s"] < 10, facts  # at once (0.02 s here), not the 60 s deadline
    assert facts["kill_step"] != "hung" and facts["kill_step"] != "ran", facts
    assert facts["steps_aborted"] == 2, facts
    assert len(logged) == 2, stderr[-4000:]
    (_, cancel_why, cancel_step), (_, kill_why, kill_step) = logged
    assert "cancelled a request of the step" in cancel_why, logged
    assert "went away" in kill_why, logged
    assert cancel_step != kill_step, logged
