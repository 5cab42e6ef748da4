"""The TCP data plane's own guarantees (native/rendezvous/transport.cc), on real sockets.

- A flow that breaks while a response's body is on the wire fails that receive at once (it used to
  be dropped: the step waited forever), and the next step redials and works.
- Request ids are unique per process, so a new connection never reuses an id of an old one.
- Socket options as the kernel reports them (getsockopt on the data plane's own descriptors):
  keepalive on, no TCP_USER_TIMEOUT, and a class-0 SO_PRIORITY that the kernel's own pfifo_fast/prio
  priority map puts in band 0 (read from a real pfifo_fast qdisc in a namespace this test creates).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from geryon.tf.build import build

pytestmark = pytest.mark.slow
TESTS_TF = str(Path(__file__).parent)


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build()


def _run(script: str, timeout: float = 180) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TESTS_TF": TESTS_TF},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    facts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    facts["stderr"] = result.stderr
    return facts


# One process: a PS server whose data plane listens on gRPC port + PS_OFFSET, and a worker server
# that looks for it at gRPC port + WORKER_OFFSET, where a TCP proxy (a thread here) forwards to the
# PS. The proxy cuts its first connection after CUT bytes of the PS's answer: the worker is then in
# the middle of reading a 16 MB tensor's body, with that receive the only one outstanding, while the
# PS (and TF's control plane) stay alive, so nothing but the data plane can end the receive.
CUT_SCRIPT = r"""
import json, os, socket, struct, sys, threading, time
sys.path.insert(0, os.environ["TESTS_TF"])
from geryon.tf.ports import free_port_pairs
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET, CUT = -7000, -7100, 1 << 20
for _ in range(50):
    ps_port, worker_port = free_port_pairs(2, PS_OFFSET)
    probe = []
    try:
        for port in (ps_port + WORKER_OFFSET, worker_port + WORKER_OFFSET):
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port)); probe.append(s)
    except OSError:
        continue
    finally:
        for s in probe: s.close()
    break
listener = socket.socket(); listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", ps_port + WORKER_OFFSET)); listener.listen(8)
first_ids = []  # the first request id seen on each proxied connection

def pump(src, dst, limit, log_ids):
    seen, buf = 0, b""
    try:
        while True:
            data = src.recv(65536)
            if not data: break
            if log_ids and len(buf) < 64:
                buf += data
                # hello: u32 magic, u16 version, u16 class, u16 n, n bytes; then request: u32, u64 id
                if len(buf) >= 10:
                    n = struct.unpack_from("<H", buf, 8)[0]
                    if len(buf) >= 10 + n + 12:
                        first_ids.append(struct.unpack_from("<Q", buf, 10 + n + 4)[0]); log_ids = False
            if limit is not None and seen + len(data) >= limit:
                dst.sendall(data[: limit - seen])
                break
            seen += len(data)
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass

def proxy():
    cut = True
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", ps_port + PS_OFFSET))
        threading.Thread(target=pump, args=(client, upstream, None, True), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, CUT if cut else None, False), daemon=True).start()
        cut = False

threading.Thread(target=proxy, daemon=True).start()
spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]})
ps = geryon.tf.server(spec, "ps", 0, data_port_offset=PS_OFFSET)
worker = geryon.tf.server(spec, "worker", 0, data_port_offset=WORKER_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    v = tf.Variable(tf.ones([4 << 20]))  # 16 MB
with tf.device("/job:worker/task:0"):
    total = tf.reduce_sum(tf.identity(v))
options = tf.compat.v1.RunOptions(timeout_in_ms=60000)
out = {}
with tf.compat.v1.Session(worker.target) as sess:
    sess.run(v.initializer)
    started = time.time()
    try:
        sess.run(total, options=options)
        out["first"] = "ran"
    except tf.errors.OpError as e:
        out["first"] = type(e).__name__
        out["first_message"] = e.message[:2000]
    out["first_seconds"] = time.time() - started
    time.sleep(1.2)  # past the fail-fast window after a failed flow
    out["second"] = float(sess.run(total, options=options))
out["first_ids"] = first_ids
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_flow_cut_mid_tensor_fails_that_receive_at_once_and_the_next_step_redials() -> None:
    facts = _run(CUT_SCRIPT)
    # Before the fix this receive was dropped and only the session's 60 s deadline ended the step.
    assert facts["first"] == "UnavailableError", facts
    assert facts["first_seconds"] < 10, facts
    assert "Geryon data plane: flow to /job:ps/replica:0/task:0 (class 0) failed" in facts["first_message"]
    assert "remote target /job:ps/replica:0/task:0" in facts["first_message"]
    assert facts["second"] == float(4 << 20)
    # Two connections; the second one's first request id continues the process-wide sequence.
    ids = facts["first_ids"]
    assert len(ids) == 2 and ids[1] > ids[0], ids


# Default marks; one pull, then getsockopt on every descriptor of this process connected to or from
# the PS's data port (both ends of the class-0 flow live in this process).
SOCKOPT_SCRIPT = r"""
import json, os, socket, sys
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import DATA_OFFSET, pick_ports
import tensorflow as tf
import geryon.tf

ps_port, worker_port = pick_ports(2)
spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]})
servers = [geryon.tf.server(spec, job, 0, data_port_offset=DATA_OFFSET) for job in ("ps", "worker")]
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    v = tf.Variable(tf.ones([1000]))
with tf.device("/job:worker/task:0"):
    total = tf.reduce_sum(tf.identity(v))
with tf.compat.v1.Session(servers[1].target) as sess:
    sess.run(v.initializer)
    value = float(sess.run(total))
data = ps_port + DATA_OFFSET
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)
ends = []
for name in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(name)))
    except OSError:
        continue
    try:
        if s.type != socket.SOCK_STREAM:
            continue
        try:
            local, peer = s.getsockname()[1], s.getpeername()[1]
        except OSError:
            continue
        if data not in (local, peer):
            continue
        ends.append({
            "role": "consumer" if peer == data else "producer",
            "priority": s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY),
            "keepalive": s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "keepidle": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "keepintvl": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "keepcnt": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout": s.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT),
        })
    finally:
        s.detach()
print(json.dumps({"value": value, "ends": ends, "marks": geryon.tf.class_marks()}), flush=True)
os._exit(0)
"""


def _kernel_priomap() -> list[int]:
    """pfifo_fast's priority -> band map as the kernel reports it (its prio2band table,
    net/sched/sch_generic.c), from a real pfifo_fast qdisc on a veth in a namespace made here."""
    ns = f"gryprio{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        return subprocess.run(list(args), check=True, capture_output=True, text=True, timeout=10).stdout

    try:
        run("ip", "netns", "add", ns)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot create a network namespace: {e}")
    try:
        run("ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        run("ip", "-n", ns, "link", "set", "v0", "up")
        run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "v0", "root", "pfifo_fast")
        shown = run("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "v0")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
    words = shown.split()
    at = words.index("priomap") + 1
    return [int(w) for w in words[at : at + 16]]


def test_flows_use_keepalive_not_user_timeout_and_class_0_is_pfifo_fast_band_0() -> None:
    priomap = _kernel_priomap()
    facts = _run(SOCKOPT_SCRIPT)
    assert facts["value"] == 1000.0
    ends = facts["ends"]
    assert {e["role"] for e in ends} == {"consumer", "producer"}, ends
    for end in ends:
        assert end["keepalive"] == 1, end
        assert (end["keepidle"], end["keepintvl"], end["keepcnt"]) == (4, 2, 3), end
        assert end["user_timeout"] == 0, end  # a starved class is not a dead peer
        assert end["priority"] == 6, end  # the pull is class 0 (no map_table installed)
        assert priomap[end["priority"]] == 0, (priomap, end)
    # Unmarked traffic (priority 0) is band 1: class 0 is ahead of it, class 1 beside it, the rest after.
    bands = [priomap[prio] for _dscp, prio in facts["marks"]]
    assert bands[0] == 0 and bands[1] == priomap[0] == 1 and all(b == 2 for b in bands[2:]), (priomap, bands)
