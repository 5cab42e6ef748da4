"""The TCP data plane's own guarantees (native/rendezvous/transport.cc), on real sockets.

- A flow that breaks while a response's body is on the wire fails that receive at once (it used to
  be dropped: the step waited forever), and the next step redials and works.
- Request ids are unique per process, so a new connection never reuses an id of an old one.
- Socket options as the kernel reports them (getsockopt on the data plane's own descriptors):
  keepalive on, TCP_USER_TIMEOUT only on the consumer (10 s), and a class-0 SO_PRIORITY that the
  kernel's pfifo_fast priority map puts in band 0 (read from a real pfifo_fast qdisc in a namespace
  this test creates).
"""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

import pytest
from tf.tf_cluster import UNTRACEABLE_MODEL, run_script

from geryon.tf import sanitizers
from geryon.tf.build import build

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build(sanitizer=sanitizers.active())  # the variant a sanitizer run (test_sanitizers.py) loads


def _run(script: str) -> dict[str, Any]:
    return run_script(script, timeout=180, keep_stderr=True)


# One process: a PS server whose data plane listens on gRPC port + PS_OFFSET, and a worker server
# that looks for it at gRPC port + WORKER_OFFSET, where a TCP proxy (a thread here) forwards to the
# PS. The proxy cuts its first connection after CUT bytes of the PS's answer: the worker is then in
# the middle of reading a 16 MB tensor's body, with that receive the only one outstanding, while the
# PS (and TF's control plane) stay alive, so nothing but the data plane can end the receive.
CUT_SCRIPT = r"""
import json, os, struct, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, proxy_listener
from tcp_proxy import serve_in_background
import tensorflow as tf
import geryon.tf

PS_OFFSET, WORKER_OFFSET, CUT = -7000, -7100, 1 << 20
ps_port, worker_port, listener = proxy_listener(PS_OFFSET, WORKER_OFFSET)
first_ids = []  # the first request id seen on each proxied connection

def first_id_tap():  # per connection: the worker's bytes up to its first request's id
    buf = b""
    def tap(data):
        nonlocal buf
        if buf is None or len(buf) >= 256:
            return
        buf += data
        # hello: u32 magic, u16 version, u16 class, u16 n, n bytes, u16 m, m bytes (the task it is
        # for); then request: u32, u64 id
        if len(buf) >= 12:
            n = struct.unpack_from("<H", buf, 8)[0]
            if len(buf) >= 12 + n:
                head = 12 + n + struct.unpack_from("<H", buf, 10 + n)[0]
                if len(buf) >= head + 12:
                    first_ids.append(struct.unpack_from("<Q", buf, head + 4)[0]); buf = None
    return tap

serve_in_background(listener, ps_port + PS_OFFSET, cut_first_after=CUT, tap=first_id_tap)
_, (ps, worker) = local_servers([ps_port, worker_port], PS_OFFSET, WORKER_OFFSET)
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
from tf_cluster import pull_once
import geryon.tf

value, data, servers = pull_once()
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


def test_flows_use_keepalive_no_producer_user_timeout_and_class_0_is_pfifo_fast_band_0() -> None:
    priomap = _kernel_priomap()
    facts = _run(SOCKOPT_SCRIPT)
    assert facts["value"] == 1000.0
    ends = facts["ends"]
    assert {e["role"] for e in ends} == {"consumer", "producer"}, ends
    for end in ends:
        assert end["keepalive"] == 1, end
        assert (end["keepidle"], end["keepintvl"], end["keepcnt"]) == (4, 2, 3), end
        # The producer's tensor bytes may wait for ACKs as long as priority makes them (a starved
        # class is not a dead peer); the consumer bounds its requests' wait at 10 s of silence.
        assert end["user_timeout"] == (10000 if end["role"] == "consumer" else 0), end
        assert end["priority"] == 6, end  # the pull is class 0 (no map_table installed)
        assert priomap[end["priority"]] == 0, (priomap, end)
    # Unmarked traffic (priority 0) is band 1: class 0 is ahead of it, class 1 beside it, the rest after.
    bands = [priomap[prio] for _dscp, prio in facts["marks"]]
    assert bands[0] == 0 and bands[1] == priomap[0] == 1 and all(b == 2 for b in bands[2:]), (priomap, bands)


# TF1 in one process (PS and worker servers), classes from Tf1Classes with its default: the PS sends
# the worker reads of `w` (consumed first: class 0) and `w2` (class 1), and a tensor computed on the
# PS that carries no parameter (unresolved: the least urgent class, 1, counted per flow).
UNRESOLVED_SCRIPT = (
    r"""
import json, os, sys
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import local_servers, pick_ports
import tensorflow as tf
import geryon.tf
from geryon.tf.tf1 import Tf1Classes

spec, servers = local_servers(pick_ports(2))
"""
    + UNTRACEABLE_MODEL
    + r"""
classes = Tf1Classes(graph, spec, thresholds=[0.25])  # urgencies 0.5 and 0
target = servers[1].target
classes.install(target)
def consumer_rows():
    counters = [c for c in geryon.tf.flow_counters() if c.role == "consumer"]
    return {(c.peer_task, c.klass, c.local_port): dict(c.__dict__) for c in counters}
with v1.Session(target, graph=graph) as sess:
    sess.run(init)
    # Counted from here: the install's own tiny transfers may cross before the worker's table is in
    # (class 0 then, timing-dependent), and the initializers are not what this test is about.
    before = consumer_rows()
    value = float(sess.run(total, {x: [[1.0] * 1000]}))
rows = []
for key, row in consumer_rows().items():
    old = before.get(key, {})
    rows.append({**row, **{f: row[f] - old.get(f, 0) for f in
                           ("bytes_received", "unresolved_bytes", "unresolved_messages")}})
print(json.dumps({"value": value, "rows": rows, "default": classes.map_table.default_class,
                  "classes": {e.name: e.cls for e in classes.map_table.entries}}), flush=True)
os._exit(0)
"""
)


def test_unresolved_edges_take_the_least_urgent_class_and_their_bytes_are_counted_per_flow() -> None:
    facts = _run(UNRESOLVED_SCRIPT)
    assert 1e6 + 250 <= facts["value"] <= 1e6 + 500  # `made` is 250 values in [1, 2)
    assert (
        facts["classes"] == {"first/w": 0, "second/w": 1} and facts["default"] == 1
    )  # k = 2: 1 is the least urgent
    by_class: dict[int, dict[str, int]] = {}
    for row in facts["rows"]:
        slot = by_class.setdefault(row["klass"], {"bytes": 0, "unresolved": 0, "messages": 0})
        slot["bytes"] += row["bytes_received"]
        slot["unresolved"] += row["unresolved_bytes"]
        slot["messages"] += row["unresolved_messages"]
    # The parameter's pull (4000 bytes and a header) on class 0, counted as resolved.
    assert 4000 <= by_class[0]["bytes"] < 4200 and by_class[0]["unresolved"] == 0, by_class
    # Class 1: w2's pull (resolved) and the tensor that carries no parameter (1000 bytes and a header,
    # the only bytes counted as unresolved).
    assert 1000 <= by_class[1]["unresolved"] < 1200, by_class
    assert 5000 <= by_class[1]["bytes"] < 5400, by_class
    assert by_class[1]["messages"] >= 1


# A worker the PS's cluster spec does not list: the PS refuses its hello with a refusal frame, and the
# worker's receive fails with FailedPrecondition (permanent), not Unavailable (which TF's
# ClusterCoordinator would take for a lost PS and retry forever).
REFUSED_SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import DATA_OFFSET, pick_ports
import tensorflow as tf
import geryon.tf

ps_port, w0_port, w1_port = pick_ports(3)
ps, w0, w1 = (f"127.0.0.1:{p}" for p in (ps_port, w0_port, w1_port))
ps_server = geryon.tf.server(tf.train.ClusterSpec({"ps": [ps], "worker": [w0]}), "ps", 0,
                             data_port_offset=DATA_OFFSET)
worker = geryon.tf.server(tf.train.ClusterSpec({"ps": [ps], "worker": [w0, w1]}), "worker", 1,
                          data_port_offset=DATA_OFFSET)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    v = tf.Variable(tf.ones([1000]))
with tf.device("/job:worker/task:1"):
    total = tf.reduce_sum(tf.identity(v))
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:1"])
out = {}
with tf.compat.v1.Session(worker.target, config=config) as sess:
    sess.run(v.initializer)
    for attempt in range(2):  # the second meets the failed flow (fail-fast) or redials: same error
        started = time.time()
        try:
            sess.run(total, options=tf.compat.v1.RunOptions(timeout_in_ms=30000))
            out[f"error{attempt}"] = None
        except tf.errors.OpError as e:
            out[f"error{attempt}"] = [type(e).__name__, e.message[:1500], time.time() - started]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_refused_consumer_gets_a_permanent_error_naming_the_ps() -> None:
    facts = _run(REFUSED_SCRIPT)
    for attempt in ("error0", "error1"):
        kind, message, seconds = facts[attempt]
        assert kind == "FailedPreconditionError", facts
        assert "refused: /job:worker/replica:0/task:1 is not a task of the cluster spec" in message
        assert "GRPC error information from remote target /job:ps/replica:0/task:0" in message
        assert seconds < 10
