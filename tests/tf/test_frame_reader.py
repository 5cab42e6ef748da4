"""The consumer's buffered frame reader (native/rendezvous/frame_reader.cc) on a real socket.

A real TF worker (grpc+geryon) pulls tensors from a real PS, except that its data plane looks for the
PS's data port where a hand-written producer listens (a thread here, speaking the wire protocol of
native/rendezvous/README.md "Transport protocol"). That producer answers with the bytes each case
needs: responses cut into small pieces at random places (a header split across recv() calls), a
burst of responses in one write (several frames out of one refill), a 1 MiB body followed by a small
frame (the large body read straight into the tensor), a chunked response with another response
between its chunks, and malformed frames, each written a byte at a time. Good frames must give the
exact values; a malformed one must fail the step with an error naming the field, and the next step
must redial and work.
"""

from __future__ import annotations

import pytest
from tf.fake_producer import assert_flow_refused
from tf.tf_cluster import run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]


SCRIPT = r"""
import json, os, random, socket, struct, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, proxy_listener
from fake_producer import CHUNK, RESPONSE, read_request, serve_in_background, trickle
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET = -7000, -7100
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)
SMALL, BIG = 1024, 1 << 18  # floats: 4 KiB and 1 MiB
mode = {"case": None}
rng = random.Random(16)

def raw(request_id, values, kind=0, ndims=None, nbytes=None):
    # head: u32 magic, u64 id, u8 kind, u8 dead, u16 0; kind 0: u32 dtype, u32 ndims, i64 dims, u64 nbytes
    body = struct.pack(f"<{len(values)}f", *values)
    dims = [len(values)]
    head = struct.pack("<IQBBHII", RESPONSE, request_id, kind, 0, 0, 1, len(dims) if ndims is None else ndims)
    head += b"".join(struct.pack("<q", d) for d in dims)
    head += struct.pack("<Q", len(body) if nbytes is None else nbytes)
    return head, body

def value_of(key):
    # The edge name ("edge_<id>_<sending node>") names the PS-side identity this test created.
    edge = key.split(";")[3].split("#")[0]
    name = edge.split("_", 2)[2]
    if name.startswith("small"):
        return [float(int(name.split("_")[1]) + 1)] * SMALL
    return [0.5] * BIG

def answer(conn, requests, case):
    frames = []
    if case in ("pieces", "burst"):
        for request_id, key in reversed(requests):  # out of request order: matched by id
            head, body = raw(request_id, value_of(key))
            frames.append(head + body)
        blob = b"".join(frames)
        if case == "burst":
            conn.sendall(blob)
            return
        cuts = sorted(rng.sample(range(1, len(blob)), 60))
        for a, b in zip([0] + cuts, cuts + [len(blob)]):
            conn.sendall(blob[a:b]); time.sleep(0.002)
        return
    if case == "chunked":
        # The big tensor as a kind-3 head and 4 chunk frames, the small response between chunks 2 and 3.
        big = [(i, k) for i, k in requests if "big" in k][0]
        small = [(i, k) for i, k in requests if "big" not in k]
        head, body = raw(big[0], value_of(big[1]), kind=3)
        out = head
        step = len(body) // 4
        for n in range(4):
            out += struct.pack("<IQQI", CHUNK, big[0], n * step, step) + body[n * step:(n + 1) * step]
            if n == 1:
                for i, k in small:
                    h, b = raw(i, value_of(k)); out += h + b
        cuts = sorted(rng.sample(range(1, len(out)), 40))
        for a, b in zip([0] + cuts, cuts + [len(out)]):
            conn.sendall(out[a:b])
        return
    request_id = requests[0][0]
    if case == "ndims":
        bad = struct.pack("<IQBBHII", RESPONSE, request_id, 0, 0, 0, 1, 300)
    elif case == "magic":
        bad = struct.pack("<I", 0xDEADBEEF) + b"\0" * 20
    elif case == "nbytes":
        head, _ = raw(request_id, [0.0] * SMALL, nbytes=12345)
        bad = head
    elif case == "kind":
        bad = struct.pack("<IQBBH", RESPONSE, request_id, 9, 0, 0) + b"\0" * 8
    elif case == "orphan_chunk":
        bad = struct.pack("<IQQI", CHUNK, request_id, 0, 16) + b"\0" * 16
    elif case == "truncated":
        head, _ = raw(request_id, [0.0] * SMALL)
        trickle(conn, head[:11], 0.002)
        conn.close()
        return
    trickle(conn, bad, 0.001)
    time.sleep(0.5)

def answer_requests(conn):
    while True:
        conn.settimeout(None)
        requests = []
        while True:
            requests.append(read_request(conn))
            conn.settimeout(0.3)  # the rest of the step's requests come at once
            try:
                conn.recv(1, socket.MSG_PEEK) or None
            except socket.timeout:
                break
        answer(conn, requests, mode["case"])

serve_in_background(listener, answer_requests)
_, (ps, worker) = local_servers([ps_port, worker_port], PS_OFFSET, WORKER_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    smalls = [tf.identity(tf.Variable(tf.zeros([SMALL])), name=f"small_{i}") for i in range(4)]
    big = tf.identity(tf.Variable(tf.zeros([BIG])), name="big")
with tf.device("/job:worker/task:0"):
    four = tf.add_n([tf.reduce_sum(tf.identity(s)) for s in smalls])
    big_and_small = tf.reduce_sum(tf.identity(big)) + tf.reduce_sum(tf.identity(smalls[0]))
options = tf.compat.v1.RunOptions(timeout_in_ms=30000)
# Grappler off: it could fold the PS-side identities whose names the edges carry.
config = tf.compat.v1.ConfigProto()
config.graph_options.rewrite_options.disable_meta_optimizer = True
out = {}
with tf.compat.v1.Session(worker.target, config=config) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    cases = [("pieces", four), ("burst", four), ("burst", big_and_small), ("chunked", big_and_small),
             ("ndims", four), ("magic", four), ("nbytes", four), ("kind", four),
             ("orphan_chunk", four), ("truncated", four), ("pieces", big_and_small)]
    for case, fetch in cases:
        mode["case"] = case
        name = f"{case} {'four' if fetch is four else 'big_and_small'}"
        try:
            out[name] = float(sess.run(fetch, options=options))
        except tf.errors.OpError as e:
            out[name] = {"error": type(e).__name__, "message": e.message[:600]}
            time.sleep(1.2)  # past the fail-fast window after a failed flow
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_the_consumer_reads_split_bursty_chunked_frames_and_refuses_malformed_ones_by_field() -> None:
    facts = run_script(SCRIPT, timeout=240)
    four = 1024.0 * (1 + 2 + 3 + 4)
    big_and_small = (1 << 18) * 0.5 + 1024.0
    assert facts["pieces four"] == four, facts
    assert facts["burst four"] == four, facts
    assert facts["burst big_and_small"] == big_and_small, facts
    assert facts["chunked big_and_small"] == big_and_small, facts
    expected = {
        "ndims four": "malformed tensor frame (dtype 1, 300 dims)",
        "magic four": "malformed frame (bad magic 0xdeadbeef)",
        "nbytes four": "malformed tensor frame (12345 bytes do not match the shape)",
        "kind four": "malformed frame (unknown kind 9)",
        "orphan_chunk four": "has no chunked head",
        "truncated four": "connection closed by peer",
    }
    for case, words in expected.items():
        assert_flow_refused(case, facts[case], words)
    # After all that the flow is redialed and a header cut at random places still parses.
    assert facts["pieces big_and_small"] == big_and_small, facts
