"""Errors keep TensorFlow's shapes and payloads across the data plane (issue 16; protocol 5).

TF's gRPC carries a Status's payloads with its code and text, and TF reads them: a RecvTensor to a
restarted task fails with the kWorkerPossiblyRestarted payload. The data plane's error frames carry
them too (native/rendezvous/error_frame.h), so an error is the same on grpc and grpc+geryon.

1. A PS restarted on the same port between two steps of a worker, in real TF processes, on grpc and
   on grpc+geryon: each step after the restart fails, and the errors are classified the same way
   (error type, ClusterCoordinator's _is_ps_failure / _is_worker_failure, and whether an error with
   TF's "different device incarnation" text has the payload), with the /job:ps remote-target tag.
2. The consumer's frame codec against a hand-written producer (fake_producer.py, as in
   test_frame_reader.py): an error frame's payloads come back on the step's error byte for byte (a
   frame larger than the consumer's 64 KiB reader, with a value at its 64 KiB bound, in uneven
   pieces, too; a value with a NUL is taken, and reaches Python cut there by TF itself); too many
   payloads, a type URL or value over its bound, and a frame cut inside its payloads fail the flow
   naming the field (no crash), and the next step redials and works. A hello of the previous
   protocol (4) gets a refusal frame naming both versions.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tf.fake_producer import assert_flow_refused
from tf.tf_cluster import TfCluster, run_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]

RESTARTED = "type.googleapis.com/tensorflow.distributed_runtime.WorkerPossiblyRestarted"
INCARNATION = "RecvTensor expects a different device incarnation"
PS_TAG = "GRPC error information from remote target /job:ps"


# The coordinator (job chief, eager, as in TF's testPSPreemptionErrorType): a worker function reads
# a variable of the PS. One step, then the test restarts the PS, then more steps, each error recorded
# with what TF's ClusterCoordinator makes of it.
RESTART_BODY = r"""
import os, time
from tensorflow.python.distribute.coordinator import cluster_coordinator as cc
tf.config.experimental_connect_to_cluster(cluster_spec, job_name="chief", protocol=cluster_resolver.rpc_layer)
with tf.device("/job:ps/replica:0/task:0"):
    v = tf.Variable(tf.random.uniform((2, 10), seed=1))

@tf.function
def worker_train_fn():
    y = tf.random.uniform((10, 2))
    return tf.reduce_mean(tf.matmul(v, y))

with tf.device("/job:worker/replica:0/task:0"):
    first = float(worker_train_fn())
open(ARGS["stepped"], "w").close()
deadline = time.time() + 120
while not os.path.exists(ARGS["restarted"]) and time.time() < deadline:
    time.sleep(0.1)
after = []
# Which error TF reports first in a step is a race (below), so steps go on until one has the
# incarnation text, or max_steps.
for _ in range(ARGS["max_steps"]):
    if len(after) >= 2 and any("different device incarnation" in str(a) for a in after):
        break
    try:
        with tf.device("/job:worker/replica:0/task:0"):
            after.append(float(worker_train_fn()))
    except tf.errors.OpError as e:
        after.append({
            "type": type(e).__name__,
            "message": e.message[:3000],
            "payloads": sorted(k.decode() if isinstance(k, bytes) else k for k in e.experimental_payloads),
            "ps_failure": cc._is_ps_failure(e),
            "worker_failure": cc._is_worker_failure(e),
        })
emit({"first": first, "after": after})
"""


def _restart_between_steps(protocol: str, max_steps: int) -> dict[str, Any]:
    with TfCluster(num_ps=1, num_workers=1, protocol=protocol) as cluster:
        stepped, restarted = cluster.tmp / "stepped", cluster.tmp / "restarted"
        result: dict[str, Any] = {}

        def chief() -> None:
            args = {"stepped": str(stepped), "restarted": str(restarted), "max_steps": max_steps}
            try:
                result.update(cluster.run_chief(RESTART_BODY, timeout=300, args=args))
            except Exception as e:  # reported by the test below, not lost in the thread
                result["chief_failed"] = str(e)

        thread = threading.Thread(target=chief)
        thread.start()
        deadline = time.monotonic() + 150
        while not stepped.exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if stepped.exists():
            # The same task, cluster spec and port: a new process, so new device incarnations.
            cluster.kill("ps0")
            cluster.start_task("ps", 0)
            proc = cluster.procs["ps0"]
            assert proc.stdout is not None
            line, deadline = "", time.monotonic() + 90
            while not line.startswith("READY") and proc.poll() is None and time.monotonic() < deadline:
                line = proc.stdout.readline()
            assert line.startswith("READY"), cluster.stderr("ps0")
            restarted.touch()
        thread.join(330)
        assert "chief_failed" not in result, result
        return result


def _text(error: dict[str, Any]) -> str:
    if INCARNATION in error["message"]:  # alone or beside the other ("2 root error(s) found")
        return "incarnation"
    return "context_id" if "Unable to find a context_id" in error["message"] else "other"


def _classes(errors: list[dict[str, Any]]) -> dict[str, set[tuple[Any, ...]]]:
    # Per kind of error: its type, ClusterCoordinator's verdicts, whether it has the payload.
    out: dict[str, set[tuple[Any, ...]]] = {}
    for e in errors:
        verdict = (e["type"], e["ps_failure"], e["worker_failure"], RESTARTED in e["payloads"])
        out.setdefault(_text(e), set()).add(verdict)
    return out


def test_a_ps_restarted_on_the_same_port_fails_the_worker_as_on_grpc() -> None:
    # Under load the PS's "context_id" error wins most steps on both layers: with 2 busy loops on this
    # 2-core machine, grpc's first incarnation error came at steps 3, 3, 1 and grpc+geryon's at 9, 2,
    # 11 and none in 20 (the fresh-clone CI failed so with 20). The steps stop at the first one (and
    # a second step), so a large bound costs nothing when the race goes the usual way.
    max_steps = 120
    runs = {protocol: _restart_between_steps(protocol, max_steps) for protocol in ("grpc", "grpc+geryon")}
    classes = {}
    for protocol, run in runs.items():
        assert isinstance(run["first"], float), (protocol, run)
        # Every step after the restart fails: the worker's function reads a tensor of the old PS.
        after = run["after"]
        assert after and all(isinstance(a, dict) for a in after), (protocol, run)
        # In each step TF reports whichever root error comes first: the restarted PS's eager service
        # not knowing the context ("Unable to find a context_id", on gRPC on both layers), or the
        # worker's receive of the old PS's tensor (on gRPC or on the data plane): a race on both.
        restarts = [e for e in after if _text(e) == "incarnation"]
        assert restarts, (protocol, after)
        for e in restarts:
            # TF's words with their payload and the /job:ps remote-target tag.
            assert RESTARTED in e["payloads"], (protocol, e)
            assert PS_TAG in e["message"], (protocol, e)
        classes[protocol] = _classes(after)
    # ClusterCoordinator classifies them alike: an Aborted error from the PS, a PS failure, not a
    # worker failure; an incarnation error has the payload on both layers.
    assert classes["grpc"]["incarnation"] == classes["grpc+geryon"]["incarnation"], classes
    assert classes["grpc+geryon"]["incarnation"] == {("AbortedError", True, False, True)}, classes
    # The other kinds alike in type and verdicts. Not in whether they carry the payload: TF reports a
    # step's one root error with the payloads of its derived errors merged in (StatusGroup::
    # GetPayloads, tensorflow/core/platform/status.cc), so a "context_id" error carries the
    # incarnation error's payload whenever that one arrived first as derived: the race above, on
    # both layers (seen once in 2 runs). The verdicts, TF's own reading of each error with whatever
    # payloads it carries, are what ClusterCoordinator acts on, and those are compared.
    for text in set(classes["grpc"]) & set(classes["grpc+geryon"]):
        verdicts = {protocol: {v[:3] for v in classes[protocol][text]} for protocol in classes}
        assert verdicts["grpc"] == verdicts["grpc+geryon"], (text, classes)
    # On grpc+geryon the incarnation error is the data plane's (the message names it; TF's text).
    geryon = [e for e in runs["grpc+geryon"]["after"] if _text(e) == "incarnation"]
    assert all("Geryon data plane: " + INCARNATION in e["message"] for e in geryon), geryon


# A real TF worker pulls from a real PS, but its data plane finds a hand-written producer at the PS's
# data port: it answers each step's requests with the error frame the case needs.
CODEC_SCRIPT = r"""
import json, os, socket, struct, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, proxy_listener
from fake_producer import HELLO, PS_TASK, RESPONSE, read_request, serve_in_background, trickle
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET = -7000, -7100
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)
N = 1024
mode = {"case": None}
RESTARTED = b"type.googleapis.com/tensorflow.distributed_runtime.WorkerPossiblyRestarted"
OURS = b"type.googleapis.com/geryon.test.Blob"
# Printable: TF hands payload values to Python as C strings (a NUL ends them; the "nul" case), not bytes.
BLOB = bytes(range(0x21, 0x7F)) * 8
LARGEST = (bytes(range(0x21, 0x7F)) * 700)[:64 << 10]  # a value at its bound: the frame outgrows the reader

def payload(url, value, url_len=None, value_len=None):
    # u16 url_len, url, u32 value_len, value
    return (struct.pack("<H", len(url) if url_len is None else url_len) + url +
            struct.pack("<I", len(value) if value_len is None else value_len) + value)

def error_frame(request_id, payloads, count=None, code=10):
    # head: u32 magic, u64 id, u8 kind (2), u8 dead, u16 0; u32 code, u32 n, message, u16 count, payloads
    msg = b"producer says no"
    head = struct.pack("<IQBBHII", RESPONSE, request_id, 2, 0, 0, code, len(msg)) + msg
    return head + struct.pack("<H", len(payloads) if count is None else count) + b"".join(payloads)

def value_frame(request_id):
    body = struct.pack(f"<{N}f", *([1.0] * N))
    return struct.pack("<IQBBHIIqQ", RESPONSE, request_id, 0, 0, 0, 1, 1, N, len(body)) + body

def answer(conn, request_id, case):
    if case == "good":
        conn.sendall(value_frame(request_id)); return
    if case == "payloads":
        frame = error_frame(request_id, [payload(RESTARTED, b""), payload(OURS, BLOB)])
    elif case == "no_payloads":
        frame = error_frame(request_id, [])
    elif case == "largest":
        # Larger than the consumer's 64 KiB reader: gathered across refills, in uneven pieces.
        frame = error_frame(request_id, [payload(RESTARTED, b""), payload(OURS, LARGEST)])
        for at in range(0, len(frame), 7919):
            conn.sendall(frame[at:at + 7919])
            time.sleep(0.002)
        return
    elif case == "nul":
        frame = error_frame(request_id, [payload(OURS, b"ab\x00cd"), payload(RESTARTED, b"\x00xyz")])
    elif case == "too_many":
        frame = error_frame(request_id, [payload(OURS, b"x")] * 17)
    elif case == "url_empty":
        frame = error_frame(request_id, [payload(b"", b"x")])
    elif case == "url_long":
        frame = error_frame(request_id, [payload(b"u" * 1025, b"x")])
    elif case == "value_long":
        frame = error_frame(request_id, [payload(OURS, b"", value_len=(64 << 10) + 1)])
    elif case == "truncated":
        trickle(conn, error_frame(request_id, [payload(OURS, BLOB)])[:-100], 0.0005)
        conn.close()
        return
    trickle(conn, frame, 0.0005)
    time.sleep(0.5)

def answer_requests(conn):
    while True:
        request_id, _ = read_request(conn)
        answer(conn, request_id, mode["case"])

serve_in_background(listener, answer_requests)
_, (ps, worker) = local_servers([ps_port, worker_port], PS_OFFSET, WORKER_OFFSET)

# The previous release's consumer at the real PS's data port: its hello (version 4, laid out as in
# version 5) is refused with a refusal frame, whose layout every version shares.
task, target = b"/job:worker/replica:0/task:0", PS_TASK.encode()
s = socket.create_connection(("127.0.0.1", ps_port + PS_OFFSET), timeout=10)
s.sendall(struct.pack("<IHHH", HELLO, 4, 0, len(task)) + task + struct.pack("<H", len(target)) + target)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk: break
    data += chunk
magic, rid, kind = struct.unpack_from("<IQB", data)
code, n = struct.unpack_from("<II", data, 16)
out = {"old_peer": {"magic": magic, "id": rid, "kind": kind, "code": code,
                    "message": data[24:24 + n].decode(), "trailing": len(data) - 24 - n}}

tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    v = tf.identity(tf.Variable(tf.zeros([N])), name="pulled")
with tf.device("/job:worker/task:0"):
    total = tf.reduce_sum(tf.identity(v))
options = tf.compat.v1.RunOptions(timeout_in_ms=30000)
with tf.compat.v1.Session(worker.target) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for case in ["good", "payloads", "no_payloads", "largest", "nul", "too_many", "url_empty", "url_long",
                 "value_long", "truncated", "good again"]:
        mode["case"] = case.split()[0]
        try:
            out[case] = float(sess.run(total, options=options))
        except tf.errors.OpError as e:
            # TF1's Session.run raises a new error without the payloads (session.py _do_call) from
            # inside its handler, so the error TF's runtime gave is its __context__.
            raw = e.__context__ if isinstance(e.__context__, tf.errors.OpError) else e
            payloads = {}
            for k, p in raw.experimental_payloads.items():
                value = p if isinstance(p, bytes) else p.encode()
                payloads[k.decode() if isinstance(k, bytes) else k] = value.hex()
            out[case] = {"error": type(e).__name__, "message": e.message[:600], "payloads": payloads}
            time.sleep(1.2)  # past the fail-fast window after a failed flow
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_error_frames_carry_payloads_within_bounds() -> None:
    facts = run_script(CODEC_SCRIPT, timeout=240)
    old = facts["old_peer"]
    # The refusal frame (id 0, kind 2, FailedPrecondition) and nothing after it: no payload section.
    head = (old["magic"], old["id"], old["kind"], old["code"], old["trailing"])
    assert head == (0x53595247, 0, 2, 9, 0), old
    assert "protocol version 4, this producer speaks version 5" in old["message"], old
    assert facts["good"] == 1024.0, facts
    # The producer's code, text and payloads, byte for byte; the consumer adds the remote-target tag.
    carried = facts["payloads"]
    assert carried["error"] == "AbortedError", carried
    assert (
        "producer says no [GRPC error information from remote target /job:ps/replica:0/task:0]"
        in (carried["message"])
    ), carried
    assert carried["payloads"] == {
        "type.googleapis.com/tensorflow.distributed_runtime.WorkerPossiblyRestarted": "",
        "type.googleapis.com/geryon.test.Blob": (bytes(range(0x21, 0x7F)) * 8).hex(),
    }, carried
    assert facts["no_payloads"]["payloads"] == {}, facts["no_payloads"]
    largest = facts["largest"]
    assert largest["error"] == "AbortedError" and "producer says no" in largest["message"], largest
    assert largest["payloads"] == {
        "type.googleapis.com/tensorflow.distributed_runtime.WorkerPossiblyRestarted": "",
        "type.googleapis.com/geryon.test.Blob": ((bytes(range(0x21, 0x7F)) * 700)[: 64 << 10]).hex(),
    }, {k: len(v) for k, v in largest["payloads"].items()}
    # Values with a NUL are taken (a payload value is bytes, not text), and the step's Status has them
    # whole; Python sees them cut at the first NUL: TF builds experimental_payloads with
    # PyBytes_FromString(value.c_str()) (tensorflow/python/lib/core/pybind11_status.h,
    # StatusPayloadToDict), on grpc as on grpc+geryon. Geryon's extension hands no payload to Python.
    nul = facts["nul"]
    assert nul["error"] == "AbortedError" and "producer says no" in nul["message"], nul
    assert nul["payloads"] == {
        "type.googleapis.com/geryon.test.Blob": b"ab".hex(),
        "type.googleapis.com/tensorflow.distributed_runtime.WorkerPossiblyRestarted": "",
    }, nul
    expected = {
        "too_many": "malformed error frame (17 payloads, at most 16)",
        "url_empty": "malformed error frame (payload 0: type URL of 0 bytes, expected 1..1024)",
        "url_long": "malformed error frame (payload 0: type URL of 1025 bytes, expected 1..1024)",
        "value_long": "malformed error frame (payload 0: value of 65537 bytes, at most 65536)",
        "truncated": "connection closed by peer",
    }
    for case, words in expected.items():
        assert_flow_refused(case, facts[case], words)
        assert facts[case]["payloads"] == {}, (case, facts[case])  # nothing of a refused frame is kept
    # After all that the flow is redialed and serves.
    assert facts["good again"] == 1024.0, facts
