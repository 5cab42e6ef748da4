"""Parameter ids through the control flow of the training code users write (issue 36, items 1 and 2).

A step inside a loop in the scheduled function (a Keras 3 custom loop over `tf.range`, tf_keras'
`steps_per_execution`), a step under `tf.cond`: TF lowers the While/If to Enter/Merge/Switch/Exit
before partitioning, and the pass follows those ops to the captured variable (GRAPH_PASS.md). Real
processes: a grpc+geryon cluster of 2 PSes and a worker (tf_cluster.TfCluster) trains; the tasks' flow
counters say how many bytes went on each class and how many carried no parameter id, and the worker's
own pass log (GeryonAnnotatedEdges run on its device) says which edges it named and on which class
the data plane sends them. The same job on plain grpc gives the reference losses.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tf.tf_cluster import TfCluster

from tests.ps_cluster import run_in_ps_cluster

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]

# ARGS: api ("keras3" custom loop | "fit" tf_keras model.fit), steps (per scheduled function or
# steps_per_execution), model ("cnn" | "cnn_bn" | an application of tf_keras.applications), geryon.
BODY = r"""
import os, tempfile
import numpy as np

api, spe, name = ARGS["api"], ARGS["steps"], ARGS["model"]
strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
rng = np.random.default_rng(0)
shape = (16, 16, 1) if name.startswith("cnn") else (32, 32, 3)
batch = 8 if name.startswith("cnn") else 2
xs = rng.normal(size=(batch * 4, *shape)).astype("float32")
ys = rng.integers(0, 10, size=(batch * 4,)).astype("int64")

if api == "keras3":
    import keras as K
else:
    import tf_keras as K

def make_model():
    K.utils.set_random_seed(3)
    if not name.startswith("cnn"):
        return getattr(K.applications, name)(weights=None, input_shape=shape, classes=10)
    layers = [K.Input(shape), K.layers.Conv2D(16, 3, activation="relu", name="conv1")]
    if name == "cnn_bn":
        layers.append(K.layers.BatchNormalization(name="bn"))
    layers += [K.layers.Conv2D(32, 3, activation="relu", name="conv2"), K.layers.Flatten(name="flat"),
               K.layers.Dense(64, activation="relu", name="hidden"), K.layers.Dense(10, name="out")]
    return K.Sequential(layers)

with strategy.scope():
    model = make_model()
g = None
if ARGS["geryon"]:
    import geryon.tf.strategy as gs
    g = gs.adopt(strategy, model, [0.5])

if api == "keras3":
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        optimizer = K.optimizers.SGD(0.01)
    loss_fn = K.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def steps(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        loss = tf.constant(0.0)
        for _ in tf.range(spe):  # AutoGraph: a While in the scheduled function
            loss = strategy.run(replica, args=(x, y))
        return loss

    x, y = tf.constant(xs[:batch]), tf.constant(ys[:batch])
    losses = [float(coordinator.schedule(steps, args=(x, y)).fetch()) for _ in range(3)]
else:
    with strategy.scope():
        model.compile(K.optimizers.legacy.SGD(0.01),
                      # the applications end in a softmax, the small CNN in logits
                      K.losses.SparseCategoricalCrossentropy(from_logits=name.startswith("cnn")),
                      steps_per_execution=spe)

    def dataset_fn(input_context):
        return tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(batch)

    work = tempfile.mkdtemp()
    callbacks = [K.callbacks.ModelCheckpoint(os.path.join(work, "ckpt")),
                 K.callbacks.BackupAndRestore(os.path.join(work, "backup")),
                 K.callbacks.TensorBoard(os.path.join(work, "tb"))]
    epochs = 2 if name.startswith("cnn") else 1  # an application's epoch moves 2-3 GB here
    history = model.fit(K.utils.experimental.DatasetCreator(dataset_fn), epochs=epochs,
                        steps_per_epoch=spe, callbacks=callbacks, verbose=0)
    losses = [float(v) for v in history.history["loss"]]

out = {"losses": losses}
if g is not None:
    ops = gs.native_ops()
    with tf.device("/job:worker/replica:0/task:0/device:CPU:0"):  # the pass ran in the worker
        edges = [[c.decode() for c in row] for row in ops.geryon_annotated_edges().numpy().tolist()]
        classes, ids = ops.geryon_class_for_edge([row[3] for row in edges] or [""])
    out.update(entries=[[e.id, e.name, e.cls] for e in g.map_table.entries], edges=edges,
               edge_classes=classes.numpy().tolist()[: len(edges)], default=g.map_table.default_class)
emit(out)
"""


def train(protocol: str, **args: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """The chief's result and the tasks' producer bytes: total, unresolved and per class."""
    if args["api"] == "fit":
        pytest.importorskip("tf_keras", reason="tf_keras (scripts/bootstrap.sh installs it) is not installed")
    with TfCluster(num_ps=2, num_workers=1, protocol=protocol) as cluster:
        result = cluster.run_chief(BODY, timeout=600, args={**args, "geryon": protocol == "grpc+geryon"})
        time.sleep(0.6)  # the tasks write their counters every 0.2 s
        flows = [f for task in ("ps0", "ps1", "worker0") for f in cluster.counters(task)]
    sent: dict[str, int] = {"total": 0, "unresolved": 0}
    for f in flows:
        if f["role"] != "producer":
            continue
        sent["total"] += f["bytes_sent"]
        sent["unresolved"] += f["unresolved_bytes"]
        sent[f"class{f['klass']}"] = sent.get(f"class{f['klass']}", 0) + f["bytes_sent"]
    return result, sent


def check_classified(result: dict[str, Any], sent: dict[str, int]) -> None:
    # At most 1% of the bytes carry no parameter id (what remains: the loop's counter, TF's control
    # dummies, the loss), and every parameter is pulled and pushed on its own class.
    assert sent["total"] > 0
    print(f"bytes sent by the tasks: {sent}, unresolved {sent['unresolved'] / sent['total']:.4%}")
    assert sent["unresolved"] <= 0.01 * sent["total"], sent
    cls = {i: c for i, _, c in result["entries"]}
    for role in ("pull", "push"):
        assert {int(pid) for r, pid, *_ in result["edges"] if r == role} == set(cls), role
    assert result["edge_classes"] == [cls[int(row[1])] for row in result["edges"]]
    urgent = [c for c in cls.values() if c == 0]
    assert urgent and sent.get("class0", 0) > 0, sent  # the urgent class carries bytes


# (api, steps, model, name): the cases; bench/bench_classification.py prints their figures.
CASE_TABLE = [
    ("keras3", 1, "cnn", "keras3-loop-1"),
    ("keras3", 10, "cnn", "keras3-loop-10"),
    ("fit", 1, "cnn_bn", "fit-spe-1"),
    ("fit", 10, "cnn_bn", "fit-spe-10"),
    ("fit", 100, "cnn", "fit-spe-100"),
    ("fit", 10, "ResNet50", "fit-resnet50-spe-10"),
    ("fit", 10, "VGG16", "fit-vgg16-spe-10"),
]
# `make test` runs one loop case of each API: the other cases take the same paths through the pass
# (a While of 1 or 100 iterations, more layers), and all seven with their grpc twins took 22:43 in
# bench/bench_classification.py, which runs every case (bench/results/2026-12-02-classification.md).
IN_TEST = ("keras3-loop-10", "fit-spe-10")
CASES = [pytest.param(a, s, m, id=name) for a, s, m, name in CASE_TABLE if name in IN_TEST]


@pytest.mark.parametrize(("api", "steps", "model"), CASES)
def test_loops_in_the_step_keep_every_parameter_on_its_class(api: str, steps: int, model: str) -> None:
    geryon, sent = train("grpc+geryon", api=api, steps=steps, model=model)
    check_classified(geryon, sent)
    plain, _ = train("grpc", api=api, steps=steps, model=model)
    assert geryon["losses"] == pytest.approx(plain["losses"], rel=1e-6, abs=1e-7)
    assert all(loss == loss for loss in geryon["losses"])  # no NaN


# In one process (tests/ps_cluster.py: the pass sees every partition there): the forms of control flow
# around or inside a step, ARGS mode: "loop" (tf.range around the step), "cond" (tf.cond around it),
# "nested" (the replica function a tf.function of its own: a call TF inlines before partitioning),
# "accum" (gradients accumulated over a tf.range loop, applied once after it).
FORMS_BODY = r"""
import numpy as np
import geryon.tf.strategy as gs
if ARGS.get("keras") == "tf_keras":
    import tf_keras as keras
else:
    import keras

def make_model():
    keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(4, 3, name="conv"),
        keras.layers.Flatten(name="flat"),
        keras.layers.Dense(8, name="hidden"),
        keras.layers.Dense(2, name="out"),
    ])

g = gs.strategy(cluster_resolver, make_model, thresholds=[0.5])
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(g.tf_strategy)
model = g.model
with g.scope():
    if ARGS.get("keras") == "tf_keras":
        optimizer = keras.optimizers.legacy.SGD(0.01)
    else:
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
N = ARGS["n"]
@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    if ARGS["mode"] == "loop":
        loss = tf.constant(0.0)
        for _ in tf.range(N):
            loss = g.tf_strategy.run(replica, args=(x, y))
        return loss
    if ARGS["mode"] == "nested":
        return g.tf_strategy.run(tf.function(replica), args=(x, y))
    if ARGS["mode"] == "accum":
        def acc(x, y):
            total = [tf.zeros_like(v) for v in model.trainable_variables]
            for _ in tf.range(N):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((model(x) - y) ** 2)
                grads = tape.gradient(loss, model.trainable_variables)
                total = [t + gr for t, gr in zip(total, grads)]
            optimizer.apply_gradients(zip(total, model.trainable_variables))
            return loss
        return g.tf_strategy.run(acc, args=(x, y))
    if ARGS["mode"] == "cond":
        run = lambda: g.tf_strategy.run(replica, args=(x, y))
        return tf.cond(tf.reduce_sum(x) > -1e9, run, lambda: tf.constant(0.0))
    return g.tf_strategy.run(replica, args=(x, y))

rng = np.random.default_rng(0)
x = tf.constant(rng.normal(size=(4, 8, 8, 1)), tf.float32)
y = tf.constant(rng.normal(size=(4, 2)), tf.float32)
losses = [coordinator.schedule(step, args=(x, y)) for _ in range(2)]
coordinator.join()
ops = gs.native_ops()
edges = [[c.decode() for c in row] for row in ops.geryon_annotated_edges().numpy().tolist()]
emit({"losses": [float(l.fetch()) for l in losses], "ids": [e.id for e in g.map_table.entries],
      "edges": edges})
"""


@pytest.mark.parametrize(
    ("mode", "keras"),
    [("loop", "keras"), ("cond", "keras"), ("nested", "keras"), ("accum", "keras"), ("loop", "tf_keras")],
)
def test_every_form_of_control_flow_names_every_pull_and_push(mode: str, keras: str) -> None:
    # ("loop", "tf_keras"): geryon.tf.strategy() builds a tf_keras model as it builds a Keras 3 one.
    if keras == "tf_keras":
        pytest.importorskip("tf_keras", reason="tf_keras (scripts/bootstrap.sh installs it) is not installed")
    args = {"mode": mode, "n": 3, "keras": keras}
    result = run_in_ps_cluster(FORMS_BODY, num_ps=2, num_workers=1, timeout=240, args=args)
    ids = set(result["ids"])
    for role in ("pull", "push"):
        assert {int(pid) for r, pid, *_ in result["edges"] if r == role} == ids, (role, result["edges"])
    assert all(loss == loss for loss in result["losses"])
