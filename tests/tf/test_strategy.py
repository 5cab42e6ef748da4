"""geryon.tf.strategy's front doors: strategy(), adopt() for a strategy the user made, and their errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ps_cluster import run_in_ps_cluster

tf = pytest.importorskip("tensorflow")


def test_task_devices_name_every_ps_and_worker_cpu() -> None:
    from geryon.tf.strategy import task_devices

    spec = tf.train.ClusterSpec(
        {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": {0: "h:4", 2: "h:5"}, "evaluator": ["h:6"]}
    )
    assert task_devices(spec) == {
        "coordinator": "",
        "ps:0": "/job:ps/replica:0/task:0/device:CPU:0",
        "ps:2": "/job:ps/replica:0/task:2/device:CPU:0",
        "worker:0": "/job:worker/replica:0/task:0/device:CPU:0",
        "worker:1": "/job:worker/replica:0/task:1/device:CPU:0",
    }


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [([], "at least one threshold"), ([0.7, 0.2], "strictly increasing"), ([2.0], r"thresholds\[0\]")],
)
def test_bad_thresholds_fail_before_any_cluster_work(thresholds: list[float], message: str) -> None:
    from geryon.tf.strategy import strategy

    def never() -> Any:
        raise AssertionError("model_fn must not run when the thresholds are bad")

    with pytest.raises(ValueError, match=message):
        strategy(object(), never, thresholds)


ADOPT_BODY = """
import keras
import numpy as np
from geryon.tf.strategy import adopt, native_ops
from bench.benchlib import mse_step

ps = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
errors = {}
with ps.scope():
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
try:
    adopt(ps, unbuilt)
except ValueError as e:
    errors["unbuilt"] = str(e)
with ps.scope():
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(5, name="a"), keras.layers.Dense(1, name="b")])
    optimizer = keras.optimizers.SGD(0.01)
# A PS that already runs version 4 (e.g. it outlived an earlier coordinator) is never sent back.
from geryon.tagger.map_table import MapTable
from geryon.tf.map_table_native import to_native
with tf.device("/job:ps/replica:0/task:0/device:CPU:0"):
    native_ops().geryon_set_map_table(to_native(MapTable.build(["x"], [1.0], [0.5], "layer", version=4)))
g = adopt(ps, model, [0.4], default_class=1)
coordinator = tf.distribute.coordinator.ClusterCoordinator(ps)
step = mse_step(ps, model, optimizer)
coordinator.schedule(step, args=(tf.ones([3, 6]),))
coordinator.join()
edges = native_ops().geryon_annotated_edges().numpy().tolist()
emit({
    "errors": errors,
    "entries": [[e.id, e.name, e.cls] for e in g.map_table.entries],
    "default": g.map_table.default_class,
    "roles": sorted({(row[0].decode(), int(row[1])) for row in edges}),
    "tables": {k: [t.version, t.default_class] for k, t in g.task_tables().items()},
})
"""


def test_adopt_classifies_a_model_built_in_the_users_own_strategy() -> None:
    result = run_in_ps_cluster(ADOPT_BODY, num_ps=1, num_workers=1, timeout=180)
    assert "build it in the strategy's scope first" in result["errors"]["unbuilt"]
    ids = [i for i, _, _ in result["entries"]]
    assert [name for _, name, _ in result["entries"]] == [
        "sequential_1/a/kernel",
        "sequential_1/a/bias",
        "sequential_1/b/kernel",
        "sequential_1/b/bias",
    ]
    assert [tuple(r) for r in result["roles"]] == sorted(
        [("pull", i) for i in ids] + [("push", i) for i in ids]
    )
    # The configured default class (for tensors that carry no parameter) is on every task, and the
    # first version is above the 4 the PS already ran.
    assert result["default"] == 1
    assert result["tables"] == {task: [5, 1] for task in ("coordinator", "ps:0", "worker:0")}
