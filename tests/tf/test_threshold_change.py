"""A threshold change at run time moves a parameter's bytes from one flow to the other between steps.

Real separate processes (tests/tf/tf_cluster.py: one PS, one worker and the chief, protocol
`grpc+geryon`). The chief builds the model through geryon.tf.strategy: the layer `big` (64 KiB
kernel) starts in class 1 and moves to class 0 when the threshold drops. The per-flow counters of
the PS and worker processes show where its pulls and pushes went before and after, the tables read
back from every task show the new version, and the step function is not traced again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.tf.tf_cluster import TfCluster

pytest.importorskip("tensorflow")

STEPS = 3
# Layer urgencies under the tagger's "layer" function (1 - l/L): first 0.67, big 0.33, last 0.
BEFORE, AFTER = [0.5], [0.2]

CHIEF_BODY = r"""
import os, time
from pathlib import Path
import numpy as np
import keras
import geryon.tf.strategy as gs

def make_model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(64, name="first"),
        keras.layers.Dense(256, name="big"),
        keras.layers.Dense(1, name="last"),
    ])

g = gs.strategy(cluster_resolver, make_model, thresholds=ARGS["before"])
coordinator = tf.distribute.coordinator.ClusterCoordinator(g.tf_strategy)
model = g.model
with g.scope():
    optimizer = keras.optimizers.SGD(0.001)

@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return g.tf_strategy.run(replica, args=(x, y))

rng = np.random.default_rng(0)
x = tf.constant(rng.normal(size=(8, 64)), tf.float32)
y = tf.constant(rng.normal(size=(8, 1)), tf.float32)
sync = Path(ARGS["sync"])

def phase(name):
    losses = [float(coordinator.schedule(step, args=(x, y)).fetch()) for _ in range(ARGS["steps"])]
    (sync / name).write_text("done")
    deadline = time.time() + 60
    while not (sync / (name + ".ack")).exists():  # the test reads the counters meanwhile
        if time.time() > deadline:
            raise TimeoutError("the test did not acknowledge phase " + name)
        time.sleep(0.05)
    return losses

classes_before = {e.name: e.cls for e in g.map_table.entries}
losses = phase("before")
traces = step.experimental_get_tracing_count()
table = g.set_thresholds(ARGS["after"])
losses += phase("after")
emit({
    "losses": losses,
    "classes_before": classes_before,
    "classes_after": {e.name: e.cls for e in table.entries},
    "bytes": {e.name: int(np.prod(v.shape)) * 4
              for e, v in zip(g.map_table.entries, model.trainable_variables)},
    "retraced": step.experimental_get_tracing_count() - traces,
    "tables": {k: [t.version, list(t.classes)] for k, t in g.task_tables().items()},
})
"""


def bytes_sent_per_class(cluster: TfCluster) -> dict[int, int]:
    """Bytes every PS and worker process sent on its flows, per class (pulls and pushes)."""
    totals: dict[int, int] = {}
    for name in ("ps0", "worker0"):
        for row in cluster.counters(name):
            if row["role"] == "producer":
                totals[row["klass"]] = totals.get(row["klass"], 0) + row["bytes_sent"]
    return totals


def snapshot_after(cluster: TfCluster, sync: Path, phase: str, out: dict[str, dict[int, int]]) -> None:
    deadline = time.monotonic() + 120
    while not (sync / phase).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    time.sleep(0.6)  # the servers write their counters every 0.2 s
    out[phase] = bytes_sent_per_class(cluster)
    (sync / f"{phase}.ack").write_text("ok")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sync = tmp_path_factory.mktemp("sync")
    seen: dict[str, dict[int, int]] = {}
    with TfCluster(num_ps=1, num_workers=1, protocol="grpc+geryon") as cluster:

        def watch() -> None:
            for phase in ("before", "after"):
                snapshot_after(cluster, sync, phase, seen)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        result = cluster.run_chief(
            CHIEF_BODY,
            timeout=240,
            args={"steps": STEPS, "before": BEFORE, "after": AFTER, "sync": str(sync)},
        )
        watcher.join(timeout=10)
    result["seen"] = seen
    return result


def test_the_threshold_moves_the_big_layer_to_class_0(run: dict[str, Any]) -> None:
    before, after = run["classes_before"], run["classes_after"]
    assert before["sequential/first/kernel"] == 0 and after["sequential/first/kernel"] == 0
    assert before["sequential/big/kernel"] == 1 and after["sequential/big/kernel"] == 0
    assert before["sequential/last/kernel"] == 1 and after["sequential/last/kernel"] == 1


def test_every_task_runs_the_new_version_without_retracing(run: dict[str, Any]) -> None:
    order = sorted(run["classes_after"])  # entries are in parameter-id order, as the tables are
    assert set(run["tables"]) == {"coordinator", "ps:0", "worker:0"}
    for version, classes in run["tables"].values():
        assert version == 2
        assert len(classes) == len(order)
    assert run["retraced"] == 0
    assert len(run["losses"]) == 2 * STEPS and run["losses"][-1] < run["losses"][0]


def test_the_big_layer_bytes_leave_the_class_1_flow_between_two_steps(run: dict[str, Any]) -> None:
    seen = run["seen"]
    assert set(seen) == {"before", "after"}, "the counters were not read after both phases"
    size = run["bytes"]
    big = size["sequential/big/kernel"] + size["sequential/big/bias"]
    last = size["sequential/last/kernel"] + size["sequential/last/bias"]
    # Per step every parameter is pulled once (PS -> worker) and pushed once (worker -> PS).
    class1_before = seen["before"].get(1, 0)
    class1_after = seen["after"].get(1, 0) - class1_before
    class0_after = seen["after"].get(0, 0) - seen["before"].get(0, 0)
    first = size["sequential/first/kernel"] + size["sequential/first/bias"]
    assert 2 * STEPS * (big + last) <= class1_before <= 1.2 * 2 * STEPS * (big + last)
    assert 2 * STEPS * last <= class1_after < 2 * STEPS * last + big // 4
    # After the change class 0 carried the big layer as well as the first one.
    assert class0_after >= 2 * STEPS * (big + first)


HOOK_BODY = r"""
import numpy as np
import keras
import geryon.tf.strategy as gs
from geryon.threshold.search import make_searcher

def make_model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([
        keras.Input((16,)),
        keras.layers.Dense(16, name="a"),
        keras.layers.Dense(16, name="b"),
        keras.layers.Dense(16, name="c"),
        keras.layers.Dense(1, name="d"),
    ])

g = gs.strategy(cluster_resolver, make_model, thresholds=[0.5])
coordinator = tf.distribute.coordinator.ClusterCoordinator(g.tf_strategy)
model = g.model
with g.scope():
    optimizer = keras.optimizers.SGD(0.001)

@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return g.tf_strategy.run(replica, args=(x, y))

x = tf.ones([4, 16]); y = tf.ones([4, 1])
ops = gs.native_ops()
searcher = make_searcher("sweep", budget=ARGS["budget"], warmup=0)
hook = gs.ThresholdHook(searcher, g)
steps = []
for _ in range(ARGS["budget"] + 2):
    thresholds = hook.begin()
    coordinator.schedule(step, args=(x, y))
    coordinator.join()
    hook.end()
    edges = [row[3] for row in ops.geryon_annotated_edges().numpy().tolist()]
    ids = ops.geryon_class_for_edge(edges)[1].numpy().tolist()
    classes = ops.geryon_class_for_edge(edges)[0].numpy().tolist()
    steps.append({
        "thresholds": list(thresholds),
        "tables": {k: [t.version, list(t.classes)] for k, t in g.task_tables().items()},
        "expected": [e.cls for e in g.map_table.entries],
        "edge_classes": sorted(set(zip(ids, classes))),
    })

# Bad thresholds are refused before anything is sent; an unreachable task is named.
errors = {}
before = {k: t.version for k, t in g.task_tables().items()}
try:
    g.set_thresholds([1.5])
except ValueError as e:
    errors["bad"] = str(e)
errors["versions_unchanged"] = before == {k: t.version for k, t in g.task_tables().items()}
errors["reinstalled"] = g.reinstall() == before  # the same version again is accepted unchanged
try:
    gs.install_map_table(g.map_table, {**g.devices, "ps:7": "/job:ps/replica:0/task:7/device:CPU:0"})
except gs.InstallError as e:
    errors["unreachable"] = str(e)
emit({"steps": steps, "iterations": searcher.iterations, "best": searcher.best,
      "retraces": step.experimental_get_tracing_count(), "errors": errors})
"""


@pytest.fixture(scope="module")
def hooked() -> dict[str, Any]:
    from tests.ps_cluster import run_in_ps_cluster

    return run_in_ps_cluster(HOOK_BODY, num_ps=1, num_workers=1, timeout=240, args={"budget": 5})


def test_threshold_hook_installs_each_searched_threshold_before_its_step(hooked: dict[str, Any]) -> None:
    steps = hooked["steps"]
    assert hooked["iterations"] == len(steps)  # every step was reported
    assert len({tuple(s["thresholds"]) for s in steps}) >= 3  # the sweep tried several settings
    version, previous = 1, [0.5]  # what geryon.tf.strategy installed
    for current in steps:
        if current["thresholds"] != previous:
            version += 1  # a new version exactly when the thresholds changed
        previous = current["thresholds"]
        for task_version, classes in current["tables"].values():
            assert task_version == version
            assert classes == current["expected"]
        # What the rendezvous would do with each annotated edge is the table's class of its id.
        pairs = current["edge_classes"]
        assert {i for i, _ in pairs} == set(range(len(current["expected"])))
        assert all(cls == current["expected"][i] for i, cls in pairs)
    assert hooked["retraces"] == 1


def test_bad_thresholds_change_nothing_and_unreachable_tasks_are_named(hooked: dict[str, Any]) -> None:
    errors = hooked["errors"]
    assert "[1.5]" in errors["bad"] or "1.5" in errors["bad"]
    assert errors["versions_unchanged"] is True
    assert errors["reinstalled"] is True
    assert "ps:7" in errors["unreachable"]
    assert "succeeded on ['coordinator', 'ps:0', 'worker:0']" in errors["unreachable"]


def test_tasks_without_the_extension_are_named_with_what_to_do() -> None:
    # Servers started with plain tf.distribute.Server have no GeryonSetMapTable op.
    body = """
import keras
from geryon.tf.strategy import InstallError, strategy
try:
    strategy(cluster_resolver, lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
except InstallError as e:
    emit({"error": str(e)})
emit({"error": None})
"""
    with TfCluster(num_ps=1, num_workers=1, protocol="grpc") as cluster:
        error = cluster.run_chief(body, timeout=120)["error"]
    assert error is not None
    assert "failed on ['ps:0', 'worker:0']" in error
    assert "start that task with geryon.tf.server()" in error
    assert "succeeded on ['coordinator']" in error


TF1_BODY = r"""
import time
from pathlib import Path
import numpy as np
from geryon.tf.tf1 import Tf1Classes

v1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    setter = v1.train.replica_device_setter(
        ps_tasks=1, worker_device="/job:worker/task:0", cluster=cluster_spec)
    with v1.device(setter):
        x = v1.placeholder(tf.float32, [8, 64], name="x")
        h = x
        for name, width in (("first", 64), ("big", 256), ("last", 1)):
            with v1.variable_scope(name):
                w = v1.get_variable("w", [h.shape[1], width], use_resource=True,
                                    initializer=v1.glorot_uniform_initializer(seed=1))
            h = tf.matmul(h, w)
        loss = tf.reduce_mean(h ** 2)
        train = v1.train.GradientDescentOptimizer(0.001).minimize(loss)
        init = v1.global_variables_initializer()
target = "grpc://" + cluster_spec.task_address("worker", 0)
classes = Tf1Classes(graph, cluster_spec, thresholds=ARGS["before"])
classes.install(target)
sync = Path(ARGS["sync"])
feed = {x: np.ones([8, 64], np.float32)}

def phase(session, name):
    losses = [float(session.run([loss, train], feed)[0]) for _ in range(ARGS["steps"])]
    (sync / name).write_text("done")
    deadline = time.time() + 60
    while not (sync / (name + ".ack")).exists():
        if time.time() > deadline:
            raise TimeoutError("the test did not acknowledge phase " + name)
        time.sleep(0.05)
    return losses

config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])  # no chief server runs
with v1.Session(target, graph=graph, config=config) as session:
    session.run(init)
    before = {e.name: e.cls for e in classes.map_table.entries}
    losses = phase(session, "before")
    after = {e.name: e.cls for e in classes.set_thresholds(target, ARGS["after"]).entries}
    losses += phase(session, "after")
emit({"losses": losses, "before": before, "after": after, "bindings": classes.bindings})
"""


def test_tf1_between_graph_parameters_take_their_class_flow_and_move() -> None:
    # TF1 edges are resolved through producer bindings (the pass cannot annotate them): the big
    # layer's pulls and pushes go on flow 1, then on flow 0 after the threshold drops.
    import tempfile

    sync = Path(tempfile.mkdtemp(prefix="geryon-tf1-sync-"))
    seen: dict[str, dict[int, int]] = {}
    with TfCluster(num_ps=1, num_workers=1, protocol="grpc+geryon") as cluster:
        watcher = threading.Thread(
            target=lambda: [snapshot_after(cluster, sync, p, seen) for p in ("before", "after")], daemon=True
        )
        watcher.start()
        result = cluster.run_chief(
            TF1_BODY, timeout=240, args={"steps": STEPS, "before": BEFORE, "after": AFTER, "sync": str(sync)}
        )
        watcher.join(timeout=10)
    assert result["before"] == {"first/w": 0, "big/w": 1, "last/w": 1}
    assert result["after"] == {"first/w": 0, "big/w": 0, "last/w": 1}
    assert set(result["bindings"].values()) == {0, 1, 2}  # every variable has a pull and a push binding
    big, last, first = 64 * 256 * 4, 256 * 4, 64 * 64 * 4
    class1_before = seen["before"].get(1, 0)
    class1_after = seen["after"].get(1, 0) - class1_before
    class0_after = seen["after"].get(0, 0) - seen["before"].get(0, 0)
    assert 2 * STEPS * (big + last) <= class1_before <= 1.2 * 2 * STEPS * (big + last)
    assert 2 * STEPS * last <= class1_after < 2 * STEPS * last + big // 4
    assert class0_after >= 2 * STEPS * (big + first)
    assert result["losses"][-1] < result["losses"][0]
