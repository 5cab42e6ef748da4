"""A task that only a session named leaves the data plane's allow-list when that session ends.

TF's own layout: the servers' cluster spec lists the PS and the worker; a coordinator adds itself as
"chief" when it connects (the eager context's CreateContext, a session on every server). Real processes:
the PS and worker servers in one, the coordinator in another. This test plays the chief's data plane
itself, with a hello naming the chief sent to the PS's data port (README "Transport protocol"): while the
coordinator's session lives the PS acks it; once the session ended (the coordinator is gone and its
context's keep-alive ran out on the servers, which then delete its session) the PS answers with the
refusal every stranger gets, and the tasks of its own cluster spec are still acked. A flow the test
opened as the chief while the session lived is closed by the PS when the session ends (the PS's accepted
connection goes: the test reads EOF on it), while its flow opened as the worker is still served.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tf.fake_producer import ACK, HELLO, REQUEST, RESPONSE, read_exact
from tf.tf_cluster import DATA_OFFSET, pick_ports

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]
ROOT = Path(__file__).resolve().parents[2]
PS = "/job:ps/replica:0/task:0"
WORKER = "/job:worker/replica:0/task:0"
CHIEF = "/job:chief/replica:0/task:0"
EVALUATOR = "/job:evaluator/replica:0/task:0"
VERSION = 5  # kProtocolVersion

SERVERS = r"""
import json, os, time
import tensorflow as tf
import geryon.tf
spec = tf.train.ClusterSpec(json.loads(os.environ["SPEC"]))
servers = [geryon.tf.server(spec, "ps", 0), geryon.tf.server(spec, "worker", 0)]
print("READY", flush=True)
while True:
    time.sleep(3600)
"""

# The coordinator joins as task 0 of job JOB ("chief"; its own keep-alive, so that a killed one's session
# expires soon), runs a function whose PS half sends a tensor to it (its data plane pulls it from the PS),
# then waits until it is killed.
COORDINATOR = r"""
import json, os, sys
import tensorflow as tf
import geryon.tf
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.eager import context
geryon.tf.load()
cluster = tf.train.ClusterSpec(json.loads(os.environ["SPEC"]))
server_def = tensorflow_server_pb2.ServerDef(
    cluster=cluster.as_cluster_def(), job_name=os.environ["JOB"], task_index=0, protocol=geryon.tf.PROTOCOL)
# The context starts with the server def (its first op), with the module's keep-alive, not set_server_def's.
context._KEEP_ALIVE_SECS = int(os.environ["KEEP_ALIVE_S"])
context.context().set_server_def(server_def)
with tf.device("/job:ps/task:0"):
    v = tf.Variable(tf.ones([1024]))

@tf.function
def step():
    with tf.device("/job:ps/task:0"):
        doubled = v * 2.0
    with tf.device(f"/job:{os.environ['JOB']}/task:0"):
        return tf.reduce_sum(doubled)

total = float(step())
pulled = sum(f.messages_received for f in geryon.tf.flow_counters()
             if f.role == "consumer" and f.local_task.startswith(f"/job:{os.environ['JOB']}/")
             and f.peer_task == "/job:ps/replica:0/task:0")
print("CONNECTED " + json.dumps({"total": total, "pulled": pulled}), flush=True)
sys.stdin.readline()  # killed by the test
os._exit(0)
"""


def hello_frame(task: str, target: str = PS) -> bytes:
    """A hello naming `task` (class 0), for `target`."""
    return (
        struct.pack("<IHHH", HELLO, VERSION, 0, len(task))
        + task.encode()
        + struct.pack("<H", len(target))
        + target.encode()
    )


def hello(port: int, task: str, target: str = PS) -> tuple[str, str]:
    """Sends a hello naming `task` to the data port; ("ack", producer's task) or ("refused", why)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(hello_frame(task, target))
        magic = struct.unpack("<I", read_exact(s, 4))[0]
        if magic == ACK:
            n = struct.unpack("<H", read_exact(s, 2))[0]
            return "ack", read_exact(s, n).decode()
        assert magic == RESPONSE, hex(magic)
        request_id, kind, _dead, _pad = struct.unpack("<QBBH", read_exact(s, 12))
        assert (request_id, kind) == (0, 2)  # a refusal frame: id 0, kind error
        code, n = struct.unpack("<II", read_exact(s, 8))
        assert code == 9, code  # FailedPrecondition: permanent
        return "refused", read_exact(s, n).decode()


def open_flow(port: int, task: str) -> socket.socket:
    """A data-plane flow from `task` to the PS, acked: an accepted connection the PS serves."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(hello_frame(task))
    assert struct.unpack("<I", read_exact(s, 4))[0] == ACK
    n = struct.unpack("<H", read_exact(s, 2))[0]
    assert read_exact(s, n).decode() == PS
    return s


def ask(flow: socket.socket, request_id: int) -> int:
    """One request on `flow` whose key the PS cannot parse, and its answer: the error's code (3,
    InvalidArgument, from the PS's Serve: the PS still serves the flow)."""
    key = b"not a rendezvous key"
    flow.settimeout(10)
    flow.sendall(struct.pack("<IQqiI", REQUEST, request_id, 1, 0, len(key)) + key)  # id, step, rank
    magic, answered, kind, _dead, _pad = struct.unpack("<IQBBH", read_exact(flow, 16))
    assert (magic, answered, kind) == (RESPONSE, request_id, 2)  # an error response to this request
    code, n = struct.unpack("<II", read_exact(flow, 8))
    read_exact(flow, n)
    for _ in range(struct.unpack("<H", read_exact(flow, 2))[0]):  # payloads: u16 url, u32 value
        read_exact(flow, struct.unpack("<H", read_exact(flow, 2))[0])
        read_exact(flow, struct.unpack("<I", read_exact(flow, 4))[0])
    return int(code)


def closed_within(flow: socket.socket, seconds: float) -> bool:
    """Whether the PS closes `flow` within `seconds` (EOF or a reset), sending nothing before."""
    flow.settimeout(seconds)
    try:
        data = flow.recv(1)
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    assert data == b"", data
    return True


def wait_for(port: int, task: str, want: str, timeout: float) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        answer = hello(port, task)
        if answer[0] == want or time.monotonic() > deadline:
            return answer
        time.sleep(0.25)


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, script: str, env: dict[str, str]) -> subprocess.Popen[str]:
        err = (self.tmp / f"{name}.stderr").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        self.procs[name] = proc
        return proc

    def line(self, name: str, prefix: str, timeout: float = 180) -> str:
        proc = self.procs[name]
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise AssertionError(f"{name}: no {prefix!r} line; stderr: {self.stderr(name)}")

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name}.stderr").read_text()[-4000:]

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        for name in list(p.procs):
            p.kill(name)


def start_servers(procs: Procs, ports: list[int]) -> tuple[dict[str, str], dict[str, list[str]], int]:
    """The PS and worker servers (spec: those two only): (environment, their spec, the PS's data port)."""
    servers_spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="0",  # the data plane's "learned" / "forgot" lines are INFO
        GERYON_DATA_PORT_OFFSET=str(DATA_OFFSET),
        GERYON_AGENT_REPORT_S="off",
    )
    procs.start("servers", SERVERS, dict(env, SPEC=json.dumps(servers_spec)))
    procs.line("servers", "READY")
    return env, servers_spec, ports[0] + DATA_OFFSET


def test_a_task_named_only_by_an_ended_session_is_refused_again(procs: Procs) -> None:
    ps_port, worker_port, chief_port = pick_ports(3)
    env, servers_spec, data_port = start_servers(procs, [ps_port, worker_port])
    assert hello(data_port, CHIEF)[0] == "refused"  # no session names the chief yet
    assert hello(data_port, WORKER) == ("ack", PS)

    # A coordinator that goes away: its session ends when its context's keep-alive runs out on the
    # servers (TF's client sends KeepAlive while its process lives; it closes its remote contexts only
    # when its C++ context is destroyed, which resetting the Python context does not do).
    procs.start(
        "coordinator",
        COORDINATOR,
        dict(
            env,
            JOB="chief",
            KEEP_ALIVE_S="3",
            SPEC=json.dumps({**servers_spec, "chief": [f"127.0.0.1:{chief_port}"]}),
        ),
    )
    facts = json.loads(procs.line("coordinator", "CONNECTED "))
    assert facts["total"] == 2048.0 and facts["pulled"] > 0, facts  # the chief pulled on the data plane
    assert hello(data_port, CHIEF) == ("ack", PS)  # the live session names it
    # Flows opened while the session lives, as the chief's data plane opens them, and one as the worker.
    with open_flow(data_port, CHIEF) as chief_flow, open_flow(data_port, WORKER) as worker_flow:
        assert ask(chief_flow, 1) == 3 and ask(worker_flow, 2) == 3  # both served
        time.sleep(8)  # past the keep-alive: the live coordinator's KeepAlive holds its session
        assert hello(data_port, CHIEF) == ("ack", PS)
        assert ask(chief_flow, 3) == 3
        procs.kill("coordinator")
        killed = time.monotonic()
        kind, why = wait_for(data_port, CHIEF, "refused", timeout=60)
        print(f"refused {time.monotonic() - killed:.1f} s after the kill (keep-alive 3 s)")
        assert kind == "refused", (why, procs.stderr("servers"))
        assert why == f"Geryon data plane: {PS} refused: {CHIEF} is not a task of the cluster spec", why
        # The flow accepted while the session named the chief is closed by the PS (before, it stayed
        # open and served); the worker's flow is still served.
        assert closed_within(chief_flow, 10), procs.stderr("servers")
        print(f"the chief's flow closed {time.monotonic() - killed:.1f} s after the kill")
        assert ask(worker_flow, 4) == 3
        assert not closed_within(worker_flow, 0.5)
    assert hello(data_port, WORKER) == ("ack", PS)  # the server def's tasks stay
    stderr = procs.stderr("servers")
    assert f"forgot {CHIEF}" in stderr
    # Our flow only: the coordinator's own flows ended with its process, seconds before its session.
    assert f"closes 1 connection(s) from {CHIEF}" in stderr, stderr
    assert f"closes 1 connection(s) from {WORKER}" not in stderr


def test_a_task_stays_while_another_live_session_names_it(procs: Procs) -> None:
    ps_port, worker_port, chief_port, evaluator_port = pick_ports(4)
    env, servers_spec, data_port = start_servers(procs, [ps_port, worker_port])
    chief_spec = {**servers_spec, "chief": [f"127.0.0.1:{chief_port}"]}
    procs.start("chief", COORDINATOR, dict(env, JOB="chief", KEEP_ALIVE_S="3", SPEC=json.dumps(chief_spec)))
    assert json.loads(procs.line("chief", "CONNECTED "))["pulled"] > 0
    # A second session whose cluster names the chief too: an evaluator that joins the same cluster.
    evaluator_spec = {**chief_spec, "evaluator": [f"127.0.0.1:{evaluator_port}"]}
    procs.start(
        "evaluator",
        COORDINATOR,
        dict(env, JOB="evaluator", KEEP_ALIVE_S="3", SPEC=json.dumps(evaluator_spec)),
    )
    assert json.loads(procs.line("evaluator", "CONNECTED "))["pulled"] > 0
    assert hello(data_port, CHIEF) == ("ack", PS) and hello(data_port, EVALUATOR) == ("ack", PS)

    with open_flow(data_port, CHIEF) as chief_flow:
        procs.kill("chief")  # its own session ends 3 s later; the evaluator's still names the chief
        time.sleep(10)
        assert hello(data_port, CHIEF) == ("ack", PS), procs.stderr("servers")
        assert f"forgot {CHIEF}" not in procs.stderr("servers")
        assert ask(chief_flow, 1) == 3  # still served: a live session names the chief

        procs.kill("evaluator")  # the last session that names either ends
        for task in (CHIEF, EVALUATOR):
            kind, why = wait_for(data_port, task, "refused", timeout=60)
            assert kind == "refused", (task, why, procs.stderr("servers"))
        assert closed_within(chief_flow, 10), procs.stderr("servers")
    assert hello(data_port, WORKER) == ("ack", PS)
