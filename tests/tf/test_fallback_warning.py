"""No silent fallback (issue 36, item 3), from real TensorFlow processes (tf_cluster.TfCluster).

(a) TF2 ParameterServerStrategy on `grpc+geryon` alone (no geryon.tf.strategy(), so no map_table): the
    PS and the worker each log one line within the first 10 steps, naming the missing map_table, and
    report it to a real agent, which exports it;
(b) the same model through geryon.tf.strategy(), one step per function: every parameter resolves, and no
    task logs anything, though control edges and the iteration counter carry no parameter id; each
    task's classification report (read through the GeryonClassificationReport op) sums to what its flow
    counters say it sent and lists those parameter-free edges;
(c) a TF1 graph whose PS sends tensors the pass cannot trace (tf_cluster.UNTRACEABLE_MODEL plus an op
    between a read and its Send), with the TF1 bindings installed: the PS logs one line naming the
    unresolved share and its top edges, which its report (read through a session) lists too.

The servers log at TF_CPP_MIN_LOG_LEVEL=1 here (TfCluster's default 2 hides warnings).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import grpc
import pytest
from tf.tf_cluster import UNTRACEABLE_MODEL, TfCluster, agent_services

from geryon.agent.proto import agent_pb2 as pb
from geryon.agent.proto import agent_pb2_grpc as pb_grpc
from geryon.tf.report import parse_report

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]

LOUD = {"TF_CPP_MIN_LOG_LEVEL": "1"}
JOB_ENV = {"ps": LOUD, "worker": LOUD}
LINE = re.compile(r"^.*Geryon: .*$", re.M)  # the fallback line (fallback.cc), one per condition
NO_TABLE = "the protocol is grpc+geryon but no map_table is installed: use geryon.tf.strategy() or adopt()"
UNTRACED = "the graph pass could not trace these tensors to a parameter"

# A small regression model, 10 steps scheduled one at a time. ARGS["geryon"]: through
# geryon.tf.strategy() (map_table installed) or plain ParameterServerStrategy on the protocol alone.
TF2_BODY = r"""
import time
import numpy as np
import keras
from geryon.tf.report import report_json, task_reports
from tests.tf.tf_cluster import classifier_step

def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                             keras.layers.Dense(10, name="out")])

if ARGS["geryon"]:
    from geryon.tf.strategy import strategy
    g = strategy(cluster_resolver, make_model, thresholds=[0.5])
    ps_strategy, model = g.tf_strategy, g.model
else:
    ps_strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
    with ps_strategy.scope():
        model = make_model()
coordinator = tf.distribute.coordinator.ClusterCoordinator(ps_strategy)
with ps_strategy.scope():
    optimizer = keras.optimizers.SGD(0.05)
step = classifier_step(ps_strategy, model, optimizer)
rng = np.random.default_rng(0)
xs = rng.normal(size=(ARGS["steps"], 16, 20)).astype("float32")
ys = rng.integers(0, 10, size=(ARGS["steps"], 16)).astype("int64")
times = []
for i in range(ARGS["steps"]):
    started = time.perf_counter()
    coordinator.schedule(step, args=(tf.constant(xs[i]), tf.constant(ys[i]))).fetch()
    times.append(time.perf_counter() - started)
reports = {}
if ARGS["geryon"]:
    from geryon.tf.strategy import native_ops
    ops = native_ops()
    for name, device in g.devices.items():
        with tf.device(device):
            reports[name] = ops.geryon_classification_report().numpy().decode()
parsed = {name: str(r) for name, r in task_reports(g.devices).items()} if ARGS["geryon"] else {}
emit({"times": times, "reports": reports, "parsed": parsed, "coordinator": report_json()})
"""


def wait_for_lines(cluster: TfCluster, name: str, settle_s: float = 3.0) -> list[str]:
    """The task's fallback lines, once its stderr stopped growing for a moment."""
    time.sleep(settle_s)
    return LINE.findall(cluster.stderr(name))


def agent_fallback(base: str) -> dict[str, str]:
    """task -> 'cause warnings' from the agent's geryon_job_fallback_warnings_total series."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for labels, value in re.findall(r"^geryon_job_fallback_warnings_total\{([^}]*)\} (\S+)$", text, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[kv["task"]] = f"{kv['cause']} {int(float(value))}"
    return out


def test_protocol_without_a_map_table_warns_within_ten_steps_on_every_task() -> None:
    # Each task also reports its warnings to a real agent (geryon.tf.agent_report), as its unresolved
    # flows: the PS to GERYON_AGENT_JOB, the worker to the registered job that lists it.
    with agent_services() as (_, sock, base):
        env = {"GERYON_AGENT_SOCKET": sock, "GERYON_AGENT_REPORT_S": "0.2"}
        job_env = {"ps": {**LOUD, "GERYON_AGENT_JOB": "ju"}, "worker": LOUD}
        with TfCluster(num_ps=1, num_workers=1, env=env, job_env=job_env) as cluster:
            with grpc.insecure_channel(f"unix:{sock}") as ch:
                tasks = {r: pb.TaskAddresses(addresses=a) for r, a in cluster.cluster.items()}
                pb_grpc.AgentStub(ch).RegisterJob(
                    pb.RegisterJobRequest(job_id="ju", cluster=tasks), timeout=5
                )
            result = cluster.run_chief(TF2_BODY, timeout=300, args={"geryon": False, "steps": 10})
            # Nothing flows after the 10th step, and the line is logged by a response being sent: a
            # line now came from one of the first 10 steps.
            lines = {name: wait_for_lines(cluster, name) for name in ("ps0", "worker0")}
            deadline = time.monotonic() + 60
            while (shown := agent_fallback(base)) != {"ps:0": "no_map_table 1", "worker:0": "no_map_table 1"}:
                assert time.monotonic() < deadline, (shown, cluster.stderr("worker0")[-2000:])
                time.sleep(0.3)
    for name, found in lines.items():
        assert len(found) == 1, (name, found, cluster.stderr(name)[-3000:])
        [line] = found
        assert NO_TABLE in line and "rode the default class" in line, line
        assert re.search(
            r"\d+\.\d% of \d+(\.\d)? [kMG]?B that /job:\w+/replica:0/task:0 sent in the last", line
        )
        assert "Top unresolved edges: edge_" in line and "GRAPH_PASS.md" in line
    print("step times (s):", [round(t, 3) for t in result["times"]])
    print("lines:", lines)


WINDOW = re.compile(r"Geryon fallback window: .*$", re.M)  # GERYON_FALLBACK_WARN=verbose


def test_a_run_where_everything_resolves_logs_nothing_and_reports_add_up() -> None:
    # verbose: every window's numbers are logged too, so the run shows how far under 1% it stays.
    verbose = {job: {**env, "GERYON_FALLBACK_WARN": "verbose"} for job, env in JOB_ENV.items()}
    with TfCluster(num_ps=1, num_workers=1, job_env=verbose) as cluster:
        result = cluster.run_chief(TF2_BODY, timeout=300, args={"geryon": True, "steps": 30})
        time.sleep(3)  # the servers write their flow counters every 0.2 s
        stderr = {name: cluster.stderr(name) for name in ("ps0", "worker0")}
        counters = {name: cluster.counters(name) for name in ("ps0", "worker0")}
    for name, text in stderr.items():
        assert LINE.findall(text) == [], (name, text[-3000:])
        print(name, "windows:", [m.group(0) for m in WINDOW.finditer(text)])
    reports = {name: parse_report(text) for name, text in result["reports"].items()}
    for name in ("ps0", "worker0"):
        report = reports[{"ps0": "ps:0", "worker0": "worker:0"}[name]]
        assert report.map_table_version >= 1 and report.warnings == 0, report
        producers = [c for c in counters[name] if c["role"] == "producer"]
        # Read after the last step; what the task sent since is the two reports' own replies (eager copies
        # to the coordinator: this one, then task_reports'), each the JSON and a frame head.
        sent = sum(c["bytes_sent"] for c in producers)
        text = result["reports"][{"ps0": "ps:0", "worker0": "worker:0"}[name]]
        assert 0 < report.bytes <= sent <= report.bytes + 2 * (len(text) + 256), (str(report), sent)
        assert sum(c.bytes for c in report.classes) == report.bytes
        later = sent - report.bytes  # unresolved too: an eager copy carries no parameter id
        assert (
            report.unresolved_bytes
            <= sum(c["unresolved_bytes"] for c in producers)
            <= report.unresolved_bytes + later
        )
        # The parameter-free edges are listed: scalars (a frame head and at most 8 bytes: control edges'
        # dummies, the iteration counter) and eager copies ("<random>_<n>": the reports' own replies).
        assert sum(e.bytes for e in report.edges) + report.other_edges_bytes == report.unresolved_bytes
        assert report.edges and report.other_edges_bytes == 0
        for e in report.edges:
            assert e.bytes <= 64 * e.messages or re.fullmatch(r"\d+_\d+", e.edge), str(report)
        print(name, "\n" + str(report))
    assert sorted(result["parsed"]) == sorted(result["reports"])  # task_reports reads every task
    coordinator = parse_report(result["coordinator"])
    print("coordinator\n" + str(coordinator))
    assert coordinator.warnings == 0


TF1_CHIEF = (
    r"""
import time
from geryon.tf.tf1 import Tf1Classes
from geryon.tf.strategy import native_ops
"""
    + UNTRACEABLE_MODEL
    + r"""
with graph.as_default():
    with v1.device("/job:ps/task:0"):
        doubled = w2 * 2.0  # an op between the parameter's read and the Send: its edge is not traced
        report = native_ops().geryon_classification_report()
    with v1.device("/job:worker/task:0"):
        total += tf.reduce_sum(doubled)
classes = Tf1Classes(graph, cluster_spec, thresholds=[0.25])
target = "grpc://" + cluster_spec.task_address("worker", 0)
classes.install(target)
config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
with v1.Session(target, graph=graph, config=config) as sess:
    sess.run(init)
    for _ in range(ARGS["steps"]):
        sess.run(total, {x: [[1.0] * 1000]})
        time.sleep(0.02)  # steps of a small model (~20 ms)
    text = sess.run(report).decode()
emit({"report": text})
"""
)


def test_an_untraceable_tf1_graph_warns_naming_its_top_edges() -> None:
    with TfCluster(num_ps=1, num_workers=1, job_env=JOB_ENV) as cluster:
        result = cluster.run_chief(TF1_CHIEF, timeout=300, args={"steps": 10})
        lines = wait_for_lines(cluster, "ps0")
        worker_lines = LINE.findall(cluster.stderr("worker0"))
    report = parse_report(result["report"])
    assert len(lines) == 1, (lines, cluster.stderr("ps0")[-3000:])
    [line] = lines
    assert UNTRACED in line and NO_TABLE not in line, line
    # `doubled` (4000 bytes a step) and `made` (1000) go to the worker unresolved: a third of what the
    # PS sends, and its top edges by name, the same the report lists.
    assert (
        report.warnings == report.warnings_unresolved_share == 1 and report.last_cause == "unresolved_share"
    )
    assert 0.2 < report.unresolved_share < 0.6, str(report)
    top = [e.edge for e in report.edges[:2]]
    assert all(f"{edge} (" in line for edge in top), (top, line)
    assert report.edges[0].bytes >= 10 * 4040 and report.edges[1].bytes >= 10 * 1040, str(report)
    assert worker_lines == []  # the worker sends the PS nothing it could not trace
    assert json.loads(result["report"])["fallback"]["last_warning"] == line.split("] ", 1)[-1]
    print(str(report))
