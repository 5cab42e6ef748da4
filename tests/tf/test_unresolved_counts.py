"""Unresolved bytes (issue 16, item 7) counted per flow on both ends and shown by the host agent.

Real processes: a grpc+geryon PS and worker (tf_cluster.TfCluster), each reporting its flows to a real
agent (API on a unix socket, metrics on loopback): the PS to job GERYON_AGENT_JOB, the worker, with no job
set, to the registered job whose cluster spec lists it (registered after the tasks started, as a
launcher may); and a TF1 client
training a model whose PS sends the worker tensors the classes cannot be traced for: one computed on the
PS that carries no parameter, and a parameter read through an op on the PS (the edge's producer is that
op, not the read, so nothing binds it to the parameter). They take the least urgent class (bulk).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from tf.tf_cluster import REPO_ROOT, UNTRACEABLE_MODEL, TfCluster, agent_services

from geryon.agent.proto import agent_pb2 as pb
from geryon.agent.proto import agent_pb2_grpc as pb_grpc
from geryon.agent.service import Services

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]

STEPS = 3

CHIEF = (
    r"""
from geryon.tf.tf1 import Tf1Classes
"""
    + UNTRACEABLE_MODEL
    + r"""
with graph.as_default():
    with v1.device("/job:ps/task:0"):
        doubled = w2 * 2.0  # an op between the parameter's read and the Send: its edge is not traced
    with v1.device("/job:worker/task:0"):
        total += tf.reduce_sum(doubled)
classes = Tf1Classes(graph, cluster_spec, thresholds=[0.25])  # urgencies 0.5 and 0
target = "grpc://" + cluster_spec.task_address("worker", 0)
classes.install(target)
config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])  # no chief server runs
with v1.Session(target, graph=graph, config=config) as sess:
    sess.run(init)
    values = [float(sess.run(total, {x: [[1.0] * 1000]})) for _ in range(ARGS["steps"])]
emit({"values": values, "default": classes.map_table.default_class,
      "classes": {e.name: e.cls for e in classes.map_table.entries}})
"""
)


@pytest.fixture
def agent() -> Iterator[tuple[Services, str, str]]:
    """A real agent's services: the API on a private unix socket, metrics on a free loopback port."""
    with agent_services() as services:
        yield services


_SERIES = re.compile(r"^geryon_job_unresolved_(bytes|messages)_total\{([^}]*)\} (\S+)$", re.M)


def agent_series(base: str) -> dict[tuple[str, ...], dict[str, int]]:
    """(job, task, peer, class, direction) -> {"bytes": ..., "messages": ...} from the agent's /metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[tuple[str, ...], dict[str, int]] = {}
    for kind, labels, value in _SERIES.findall(text):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (kv["geryon_job"], kv["task"], kv["peer"], kv["class"], kv["direction"])
        out.setdefault(key, {})[kind] = int(float(value))
    return out


def counted(cluster: TfCluster, name: str) -> dict[tuple[str, ...], dict[str, int]]:
    """The same keys from a server's own geryon.tf.flow_counters() (written by the server every 0.2 s)."""
    task = {"ps0": "ps:0", "worker0": "worker:0"}
    out = {}
    for row in cluster.counters(name):
        if row["unresolved_messages"] == 0:
            continue
        peer = re.sub(r"^/job:(\w+)/replica:0/task:(\d+)$", r"\1:\2", row["peer_task"])
        direction = {"consumer": "received", "producer": "sent"}[row["role"]]
        key = ("ju", task[name], peer, ("urgent", "bulk")[row["klass"]], direction)
        out[key] = {"bytes": row["unresolved_bytes"], "messages": row["unresolved_messages"]}
    return out


def test_unresolved_bytes_are_counted_on_both_ends_and_reach_the_agents_metrics(
    agent: tuple[Services, str, str],
) -> None:
    svc, sock, base = agent
    env = {"GERYON_AGENT_SOCKET": sock, "GERYON_AGENT_REPORT_S": "0.2"}
    with TfCluster(num_ps=1, num_workers=1, env=env, job_env={"ps": {"GERYON_AGENT_JOB": "ju"}}) as cluster:
        ch = grpc.insecure_channel(f"unix:{sock}")
        with ch:  # what a launcher does: the job's cluster spec, the agent's default classes
            cluster_msg = {r: pb.TaskAddresses(addresses=a) for r, a in cluster.cluster.items()}
            pb_grpc.AgentStub(ch).RegisterJob(
                pb.RegisterJobRequest(job_id="ju", cluster=cluster_msg), timeout=5
            )
        result = cluster.run_chief(CHIEF, timeout=240, args={"steps": STEPS})
        # Settled when the servers' counters stop changing and the agent shows what they count.
        deadline = time.monotonic() + 60
        last: Any = None
        while True:
            mine = {**counted(cluster, "worker0"), **counted(cluster, "ps0")}
            shown = agent_series(base)
            if mine and shown == mine and mine == last:
                break
            assert time.monotonic() < deadline, (mine, shown, cluster.stderr("ps0")[-2000:])
            last = mine
            time.sleep(0.5)

    # 1e6 from the traced parameters, 250 values in [1, 2) from `made`, 2000 from `doubled`.
    assert all(1e6 + 2250 <= v <= 1e6 + 2500 for v in result["values"]), result
    assert result["classes"] == {"first/w": 0, "second/w": 1} and result["default"] == 1
    # The worker's own series: it found job "ju" by its place in the registered cluster spec.
    received = shown[("ju", "worker:0", "ps:0", "bulk", "received")]
    assert shown[("ju", "ps:0", "worker:0", "bulk", "sent")] == received  # the producer's end
    # Every step: `made` (1000 bytes) and `doubled` (4000), each with a 40-byte response head.
    assert received["messages"] >= 2 * STEPS and received["bytes"] >= STEPS * (1040 + 4040), received
    # Producer and consumer count the same responses, and the same bytes, on every flow.
    for (job, task, peer, cls, direction), value in shown.items():
        other = "sent" if direction == "received" else "received"
        assert shown.get((job, peer, task, cls, other)) == value, (task, peer, cls, shown)
    # Nothing of the parameters whose reads the pass traces counts: at most the install's tiny
    # transfers, which may cross before the table is in (the urgent class then).
    urgent = shown.get(("ju", "worker:0", "ps:0", "urgent", "received"), {"bytes": 0})
    assert urgent["bytes"] < 1000, shown
    assert svc.jobs.get("ju").reports == 0  # the tasks sent counts only, no iteration


def test_a_bad_agent_variable_fails_the_server_start_naming_it() -> None:
    script = (
        "import tensorflow as tf, geryon.tf\n"
        "geryon.tf.server(tf.train.ClusterSpec({'ps': ['127.0.0.1:1']}), 'ps', 0)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), GERYON_AGENT_JOB="job 17", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode != 0
    assert "UsageError: GERYON_AGENT_JOB: 'job 17' is not a job id the agent accepts" in proc.stderr, (
        proc.stderr[-3000:]
    )
