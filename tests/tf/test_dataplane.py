"""The data plane carries the tensors, on the flow of their class, with that class's DSCP on the wire.

Training runs on a real 1 PS + 2 workers + chief cluster while the test captures loopback packets
(AF_PACKET, root) and reads the flows' sockets with sock_diag (geryon.agent.flows). The workers
receive parameters on class 0 (the default); the PS is started with GERYON_DEFAULT_CLASS=1, so it
receives gradients on class 1: both classes and both directions are on the wire.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from tf.loopback_capture import LoopbackCapture
from tf.tf_cluster import CNN_BODY, TfCluster, data_port, run_script

from geryon.agent.flows import FlowDiscovery
from geryon.errors import UsageError
from geryon.tf import set_class_marks
from geryon.tf.build import build

pytestmark = pytest.mark.slow
STEPS = 5
EF, AF31 = 46, 26  # the default DSCP of class 0 and class 1


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build()


def test_tensors_travel_on_their_class_flow_with_its_dscp_in_both_directions() -> None:
    with (
        TfCluster(num_ps=1, num_workers=2, job_env={"ps": {"GERYON_DEFAULT_CLASS": "1"}}) as cluster,
        LoopbackCapture().running() as capture,
    ):
        result = cluster.run_chief(CNN_BODY, args={"steps": STEPS})
        assert "error" not in result, result
        time.sleep(0.6)  # the servers write their counters every 0.2 s
        counters = {name: cluster.counters(name) for name in ("ps0", "worker0", "worker1")}
        with FlowDiscovery() as discovery:
            sockets = discovery.flows()
        ps_port = data_port(cluster.cluster["ps"][0])
        worker_ports = [data_port(a) for a in cluster.cluster["worker"]]

    pulled = STEPS * result["model_bytes"]
    # Counters: the PS sent the parameters (pulls) on class 0, the workers the gradients on class 1.
    ps_sent = [c for c in counters["ps0"] if c["role"] == "producer" and "worker" in c["peer_task"]]
    assert ps_sent and all(c["klass"] == 0 and c["dscp"] == EF for c in ps_sent)
    assert pulled <= sum(c["bytes_sent"] for c in ps_sent) <= 1.5 * pulled
    ps_received = [c for c in counters["ps0"] if c["role"] == "consumer"]
    assert {c["peer_task"] for c in ps_received} == {
        "/job:worker/replica:0/task:0",
        "/job:worker/replica:0/task:1",
    }
    assert all(c["klass"] == 1 and c["dscp"] == AF31 and c["messages_received"] > 0 for c in ps_received)
    assert (
        pulled <= sum(c["bytes_received"] for c in ps_received) <= 1.5 * pulled
    )  # one gradient per parameter
    for name in ("worker0", "worker1"):
        pulls = [c for c in counters[name] if c["role"] == "consumer"]
        assert [c["peer_task"] for c in pulls] == ["/job:ps/replica:0/task:0"]
        assert pulls[0]["klass"] == 0 and pulls[0]["messages_received"] > 0
    for rows in counters.values():
        assert all(c["errors"] == 0 for c in rows)

    # On the wire: parameters leave the PS with EF only, gradients leave the workers with AF31 only,
    # and each side's requests carry the same mark as the flow they belong to.
    from_ps = capture.by_dscp(sport=ps_port)
    assert set(from_ps) == {EF} and from_ps[EF] >= pulled
    # (The workers also serve the chief a few bytes on class 0: look at the PS's own flows only.)
    ps_consumer_ports = {c["local_port"] for c in ps_received}
    grads: dict[int, int] = defaultdict(int)
    requests: dict[int, int] = defaultdict(int)
    for (sport, dport, dscp), n in capture.bytes.items():
        if sport in worker_ports and dport in ps_consumer_ports:
            grads[dscp] += n
        if sport in ps_consumer_ports and dport in worker_ports:
            requests[dscp] += n
    assert set(grads) == {AF31} and grads[AF31] >= pulled
    assert set(requests) == {AF31}
    assert set(capture.by_dscp(dport=ps_port)) == {EF}

    # The agent's flow discovery sees the same marks on the sockets of both ends of every flow.
    ports = {ps_port, *worker_ports}
    flows = [f for f in sockets if f.local_port in ports or f.peer_port in ports]
    assert len(flows) >= 2 * 4  # 2 pull flows and 2 push flows, each seen from both ends
    for flow in flows:
        port = flow.local_port if flow.local_port in ports else flow.peer_port
        other = flow.peer_port if flow.local_port in ports else flow.local_port
        if port == ps_port:
            assert flow.dscp == EF, flow
        elif other in ps_consumer_ports:
            assert flow.dscp == AF31, flow


# The CNN through geryon.tf.strategy: the tagger classifies its parameters (threshold 0.5 on the
# layer urgency), the graph pass tags their Send/Recv pairs, and each parameter's pull and gradient
# push go on the flow of its class.
STRATEGY_BODY = r"""
import numpy as np
import keras
import geryon.tf.strategy as gs
from tests.tf.tf_cluster import classifier_step

def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([
        keras.Input((12, 12, 1)),
        keras.layers.Conv2D(8, 3, activation="relu", name="conv1"),
        keras.layers.Conv2D(8, 3, activation="relu", name="conv2"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu", name="fc1"),
        keras.layers.Dense(10, name="fc2"),
    ])

g = gs.strategy(cluster_resolver, make_model, thresholds=[0.5])
coordinator = tf.distribute.coordinator.ClusterCoordinator(g.tf_strategy)
model = g.model
with g.scope():
    optimizer = keras.optimizers.SGD(0.05)
step = classifier_step(g.tf_strategy, model, optimizer)

rng = np.random.default_rng(0)
for i in range(ARGS["steps"]):
    x = tf.constant(rng.normal(size=(16, 12, 12, 1)), tf.float32)
    y = tf.constant(rng.integers(0, 10, size=(16,)), tf.int64)
    coordinator.schedule(step, args=(x, y)).fetch()
per_class = {}
for entry, v in zip(g.map_table.entries, model.trainable_variables, strict=True):
    per_class[entry.cls] = per_class.get(entry.cls, 0) + int(np.prod(v.shape)) * 4
emit({"bytes_per_class": per_class, "classes": {e.name: e.cls for e in g.map_table.entries}})
"""


def test_each_parameter_travels_with_the_dscp_of_its_map_table_class() -> None:
    with TfCluster(num_ps=1, num_workers=1) as cluster, LoopbackCapture().running() as capture:
        result = cluster.run_chief(STRATEGY_BODY, args={"steps": STEPS}, timeout=240)
        time.sleep(0.6)
        ps_rows = cluster.counters("ps0")
        ps_port = data_port(cluster.cluster["ps"][0])
        worker_port = data_port(cluster.cluster["worker"][0])
    per_class = {int(k): v for k, v in result["bytes_per_class"].items()}
    assert set(per_class) == {0, 1}, result["classes"]  # both classes hold parameters
    ps_consumer_ports = {c["local_port"] for c in ps_rows if c["role"] == "consumer"}
    pulls: dict[int, int] = defaultdict(int)
    pushes: dict[int, int] = defaultdict(int)
    for (sport, dport, dscp), n in capture.bytes.items():
        if sport == ps_port:
            pulls[dscp] += n
        elif sport == worker_port and dport in ps_consumer_ports:
            pushes[dscp] += n
    assert set(pulls) == {EF, AF31} and set(pushes) == {EF, AF31}
    for wire in (pulls, pushes):
        # Class 1 carries exactly its parameters (framing aside); class 0 carries its parameters
        # plus the tensors that carry none (they default to class 0).
        assert STEPS * per_class[1] <= wire[AF31] <= 1.1 * STEPS * per_class[1] + 4096, (wire, per_class)
        assert wire[EF] >= STEPS * per_class[0], (wire, per_class)


CLASS_MARKS_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import pull_once
import geryon.tf
from geryon.agent.flows import FlowDiscovery

geryon.tf.set_class_marks([40, 8], [6, 1])
value, data, servers = pull_once(os.environ["HOST"])
with FlowDiscovery() as discovery:
    marks = sorted({f.dscp for f in discovery.flows() if data in (f.local_port, f.peer_port)})
print(json.dumps({"value": value, "marks": marks, "table": geryon.tf.class_marks()[:2]}), flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])  # IP_TOS and IPV6_TCLASS
def test_class_marks_set_from_python_mark_new_flows(host: str) -> None:
    facts = run_script(CLASS_MARKS_SCRIPT, timeout=120, env={"HOST": host})
    assert facts["value"] == 1000.0
    assert facts["table"] == [[40, 6], [8, 1]]
    assert facts["marks"] == [40]  # the pull (class 0, the default) on both of its sockets


@pytest.mark.parametrize(
    ("dscp", "priority", "message"),
    [
        ([], None, "dscp: give 1 to 8 values"),
        ([46, 64], None, r"dscp\[1\] must be an int in 0..63, got 64"),
        ([46, 26], [5], r"priority: give one value per class \(2\), got 1"),
        ([46, 26], [5, 8], r"priority\[1\] must be an int in 0..7, got 8"),
        ([46, True], None, r"dscp\[1\] must be an int in 0..63, got True"),
    ],
)
def test_bad_class_marks_are_refused_naming_the_field(
    dscp: list, priority: list | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        set_class_marks(dscp, priority)
