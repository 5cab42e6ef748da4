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


def test_urgency_tac_needs_op_times_and_only_tac_takes_them() -> None:
    from geryon.tagger.tac import OpTimes
    from geryon.tf.strategy import load_op_times, strategy

    def never() -> Any:
        raise AssertionError("model_fn must not run when op_times is wrong")

    with pytest.raises(ValueError, match="op_times: urgency 'tac' needs"):
        strategy(object(), never, urgency="tac")
    with pytest.raises(ValueError, match="op_times: only urgency 'tac'"):
        strategy(object(), never, urgency="layer", op_times=OpTimes({}, {}))
    with pytest.raises(ValueError, match=r"op times '/nonexistent/t\.json'"):
        load_op_times("tac", "/nonexistent/t.json")
    times = OpTimes({}, {"a": 1.0}, source="test")
    assert load_op_times("tac", times) is times


def test_tac_ranks_follow_its_urgency_the_others_the_consumption_order() -> None:
    """The data plane's order inside a class: TAC may put a later-consumed parameter first."""
    from types import SimpleNamespace

    from geryon.tagger.map_table import MapTable
    from geryon.tf.strategy import urgency_order_ranks

    names = ["tower_a/k", "tower_b/k", "head/k"]
    consumption = SimpleNamespace(order=[0, 1, 2])  # consumed a, b, head
    tac_table = MapTable.build(names, [2 / 3, 1.0, 1 / 3], [0.5], "tac")  # TAC: the heavy tower b first
    by_id = {e.name: e.id for e in tac_table.entries}
    tac_ranks = urgency_order_ranks(
        SimpleNamespace(urgency_function="tac", consumption=consumption), tac_table
    )
    assert sorted(by_id, key=lambda n: tac_ranks[by_id[n]]) == ["tower_b/k", "tower_a/k", "head/k"]
    layer_table = MapTable.build(names, [1.0, 2 / 3, 1 / 3], [0.5], "layer")
    layer_ranks = urgency_order_ranks(
        SimpleNamespace(urgency_function="layer", consumption=consumption), layer_table
    )
    assert layer_ranks == {0: 0, 1: 1, 2: 2}
