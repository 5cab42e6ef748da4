"""The partition plan against a real ParameterServerStrategy on an in-process cluster.

Each test starts its own cluster in a subprocess (see tests/ps_cluster.py), creates variables under
``ParameterServerStrategy(variable_partitioner=GeryonPartitioner(...))`` and reports every variable
the strategy created, in creation order; the test compares that with `plan_partitions`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from ps_cluster import run_in_ps_cluster

from geryon.tagger.partition import BYTES_PER_STRING, PartitionPlan, plan_partitions

pytestmark = pytest.mark.slow

_ELEMENT_SIZES = {"float16": 2, "float32": 4, "float64": 8, "int8": 1, "int32": 4, "int64": 8, "uint32": 4}
_DEVICE_RE = re.compile(r"/job:ps/replica:0/task:(\d+)/device:CPU:0")

# Shared by both cluster scripts: record every variable the strategy creates, in order, through a
# creator scope entered inside strategy.scope() (so it wraps the strategy's own creator).
_RECORDER = """
from tensorflow.python.distribute.sharded_variable import ShardedVariable
from geryon.tagger.tf_partitioner import GeryonPartitioner

created = []

def record(next_creator, **kwargs):
    var = next_creator(**kwargs)
    created.append(var)
    return var

def first_value(part):
    # Row ids were the initial values, so a shard's first element is its row offset.
    if part.dtype == tf.string or part.shape.num_elements() == 0:
        return None
    return float(tf.reshape(part.read_value(), [-1])[0].numpy())

def describe(var):
    parts = list(var.variables) if isinstance(var, ShardedVariable) else [var]
    return {
        "type": type(var).__name__,
        "shape": var.shape.as_list(),
        "dtype": var.dtype.name,
        "shards": [
            {"name": p.name.removesuffix(":0"), "shape": p.shape.as_list(), "device": p.device,
             "first": first_value(p)}
            for p in parts
        ],
    }

strategy = tf.distribute.experimental.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=GeryonPartitioner(NUM_PS, ARGS["slice_bytes"]))
"""

_MODULE_SCRIPT = """
def row_ids(shape, dtype):
    if dtype == "string":
        return tf.fill(shape, "x")
    if not shape:
        return tf.constant(0, dtype)
    ids = tf.reshape(tf.range(shape[0]), [shape[0]] + [1] * (len(shape) - 1))
    return tf.cast(tf.broadcast_to(ids, shape), dtype)

with strategy.scope(), tf.variable_creator_scope(record):
    module = tf.Module()
    module.params = [tf.Variable(row_ids(shape, dtype), name=name) for name, shape, dtype in ARGS["params"]]
emit({"created": [describe(v) for v in created]})
"""

_KERAS_SCRIPT = """
import keras

def build():
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(8, 3, name="conv1"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Conv2D(16, 3, name="conv2"),
            keras.layers.GlobalAveragePooling2D(name="pool"),
            keras.layers.Dropout(0.5, seed=1, name="drop"),
            keras.layers.Dense(256, name="fc1"),
            keras.layers.Dense(10, name="fc2"),
        ],
        name="net",
    )
    return model

with strategy.scope(), tf.variable_creator_scope(record):
    model = build()
out = model(tf.ones([2, 16, 16, 3]), training=True)

# Offline, as the tagger sees the model: no strategy. Built second, so Keras's auto-named
# SeedGenerator is "seed_generator_1" here; shapes, dtypes and order are what matter.
offline = []
def record_offline(next_creator, **kwargs):
    var = next_creator(**kwargs)
    offline.append(
        {"name": var.name.removesuffix(":0"), "shape": var.shape.as_list(), "dtype": var.dtype.name}
    )
    return var
with tf.variable_creator_scope(record_offline):
    build()
emit({
    "created": [describe(v) for v in created],
    "offline": offline,
    "weights": [[w.path, type(w).__name__, type(w.value).__name__] for w in model.weights],
    "variables": [w.path for w in model.variables],
    "output_shape": out.shape.as_list(),
})
"""


def logical_name(var: dict[str, Any]) -> str:
    first = var["shards"][0]["name"]
    return first.removesuffix("/part_0") if var["type"] == "ShardedVariable" else first


def plan_of(created: list[dict[str, Any]], num_ps: int, slice_bytes: int | None) -> PartitionPlan:
    """The plan for the created variables' (name, shape, dtype), in creation order."""
    params = []
    for var in created:
        size = BYTES_PER_STRING if var["dtype"] == "string" else _ELEMENT_SIZES[var["dtype"]]
        params.append((logical_name(var), tuple(var["shape"]), size))
    return plan_partitions(params, num_ps, slice_bytes)


def assert_job_matches_plan(created: list[dict[str, Any]], plan: PartitionPlan, row_ids: bool) -> None:
    """Shard names, shapes and PS tasks as planned; with `row_ids` initial values, the offsets too."""
    assert len(created) == len(plan.params)
    for var, planned in zip(created, plan.params, strict=True):
        assert var["type"] == ("ShardedVariable" if len(planned) > 1 else "CachingVariable"), var
        observed = []
        for shard in var["shards"]:
            device = _DEVICE_RE.fullmatch(shard["device"])
            assert device, shard["device"]
            observed.append((shard["name"], tuple(shard["shape"]), int(device.group(1))))
        assert observed == [(s.name, s.shape, s.ps_task) for s in planned]
        if not row_ids:
            continue
        # The div split's offsets: shard i starts at row `offset` (the initial value held row ids).
        for shard, plan_shard in zip(var["shards"], planned, strict=True):
            if shard["first"] is not None and plan_shard.shape:
                assert shard["first"] == plan_shard.offset, (shard, plan_shard)


def test_tf_module_variables_match_plan() -> None:
    num_ps, slice_bytes = 3, 4096
    specs = [
        ("scalar", [], "float32"),  # rank 0: never partitioned
        ("tiny", [2, 5], "float32"),  # shape[0] < num_ps: capped at 2 shards
        ("bias", [7], "float32"),  # one shard per PS, div split [3, 2, 2]
        ("big", [130, 64], "float32"),  # 256 B rows, 16 rows per 4 KiB slice: 9 shards
        ("wide", [10, 100], "float64"),  # sliced into 2, but the 3 PSes win
        ("bytes", [50, 10], "int8"),
        ("half", [1000], "float16"),
        ("one_row", [1, 4096], "float32"),  # a 16 KiB row cannot be split: stays whole
        ("empty", [0, 3], "float32"),  # shape[0] == 0: TF rejects 0 partitions, stays whole
        ("names", [600, 2], "string"),  # 16 B per string: 32 B rows, 128 rows per slice: 5 shards
    ]
    result = run_in_ps_cluster(
        _RECORDER + _MODULE_SCRIPT,
        num_ps=num_ps,
        timeout=90,
        args={"slice_bytes": slice_bytes, "params": specs},
    )
    created = result["created"]
    assert [logical_name(v) for v in created] == [name for name, _, _ in specs]
    plan = plan_of(created, num_ps, slice_bytes)
    assert [len(shards) for shards in plan.params] == [1, 2, 3, 9, 3, 3, 3, 1, 1, 5]
    assert_job_matches_plan(created, plan, row_ids=True)
    # The round-robin counter ticks once per shard and once per whole variable, across variables.
    assert [s.ps_task for s in plan.shards()][:7] == [0, 1, 2, 0, 1, 2, 0]


def test_keras3_model_variables_match_plan() -> None:
    num_ps, slice_bytes = 2, 2048
    result = run_in_ps_cluster(
        _RECORDER + _KERAS_SCRIPT, num_ps=num_ps, timeout=90, args={"slice_bytes": 2048}
    )
    created = result["created"]
    names = [logical_name(v) for v in created]
    # Keras 3 goes through tf.Variable, so the strategy shards its variables: a keras Variable
    # wraps a ShardedVariable whose parts are "<layer path>/<weight>/part_<i>".
    assert names == [
        "seed_generator/seed_generator_state",  # Dropout's SeedGenerator, created at construction
        "net/conv1/kernel",
        "net/conv1/bias",
        "net/bn/gamma",
        "net/bn/beta",
        "net/bn/moving_mean",
        "net/bn/moving_variance",
        "net/conv2/kernel",
        "net/conv2/bias",
        "net/fc1/kernel",
        "net/fc1/bias",
        "net/fc2/kernel",
        "net/fc2/bias",
    ]
    plan = plan_of(created, num_ps, slice_bytes)
    assert_job_matches_plan(created, plan, row_ids=False)
    fc1 = created[names.index("net/fc1/kernel")]
    assert fc1["type"] == "ShardedVariable"
    assert [s["name"] for s in fc1["shards"]] == [f"net/fc1/kernel/part_{i}" for i in range(8)]
    weights = {path: (keras_type, inner) for path, keras_type, inner in result["weights"]}
    assert weights["net/fc1/kernel"] == ("Variable", "ShardedVariable")
    assert weights["net/fc1/bias"] == ("Variable", "ShardedVariable")  # 2 PSes: even a bias splits
    # Every variable counts, non-trainable ones included: the seed state (2,) int64 is itself
    # split across both PSes, and the model still runs with it sharded.
    assert created[0]["type"] == "ShardedVariable"
    assert result["output_shape"] == [2, 10]
    # model.variables lists the seed state where the Dropout layer sits, not where it was created,
    # and model.weights omits it: only creation order predicts the PS placement.
    assert result["variables"].index("seed_generator/seed_generator_state") == 8
    assert "seed_generator/seed_generator_state" not in [w[0] for w in result["weights"]]
    # Building the model without the strategy creates the same variables in the same order, so an
    # offline plan (no cluster) predicts the job.
    offline = result["offline"]
    assert [(v["shape"], v["dtype"]) for v in offline] == [(v["shape"], v["dtype"]) for v in created]
