"""The tagger on a model sharded by ParameterServerStrategy's partitioner (real in-process cluster)."""

from __future__ import annotations

import pytest
from ps_cluster import run_in_ps_cluster

pytestmark = pytest.mark.slow

_BODY = """
import keras
from geryon.tagger import tag_model
from geryon.tagger.tf_partitioner import GeryonPartitioner

strategy = tf.distribute.experimental.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=GeryonPartitioner(NUM_PS, ARGS["slice_bytes"])
)
with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(8, 3, name="conv"),
            keras.layers.Flatten(name="flat"),
            keras.layers.Dense(64, name="fc1"),
            keras.layers.Dense(10, name="fc2"),
            keras.layers.Dense(1, name="score"),  # a (1,) bias cannot be split: a plain variable on one PS
        ],
        name="net",
    )
t = tag_model(model)
table = t.map_table([0.5])
emit({
    "rows": t.rows(table),
    "sharded": [type(v.value).__name__ for v in model.trainable_variables],
})
"""


def test_each_shard_is_a_parameter_keeping_its_parent() -> None:
    result = run_in_ps_cluster(_BODY, num_ps=2, args={"slice_bytes": 64 * 1024}, timeout=180)
    rows = result["rows"]
    assert "ShardedVariable" in result["sharded"]
    by_name = {r["name"]: r for r in rows}
    # fc1/kernel is 14*14*8 x 64 float32 = 401,408 bytes: at most 64 KiB per slice -> 7 shards.
    fc1 = [r for r in rows if r["parent"] == "net/fc1/kernel"]
    assert [r["name"] for r in fc1] == [f"net/fc1/kernel/part_{i}" for i in range(7)]
    assert sum(r["shape"][0] for r in fc1) == 14 * 14 * 8
    assert all(r["shape"][1:] == [64] for r in fc1)
    assert {r["runtime_name"] for r in fc1} == {f"net/fc1/kernel/part_{i}" for i in range(7)}
    # Every shard of a variable shares its layer's urgency and class, and they sit together in order.
    assert len({(r["urgency"], r["class"]) for r in fc1}) == 1
    positions = [r["order"] for r in fc1]
    assert positions == list(range(positions[0], positions[0] + 7))
    # Forward order across layers survives sharding: conv, then fc1, then fc2.
    layers = []
    for r in rows:
        if not layers or layers[-1] != r["layer"]:
            layers.append(r["layer"])
    assert layers == ["net/conv", "net/fc1", "net/fc2", "net/score"]
    assert by_name["net/score/bias"]["parent"] is None and by_name["net/score/bias"]["shape"] == [1]
    # The conv kernel (3 rows on axis 0) is split in num_ps=2 shards; a small bias too.
    assert by_name["net/conv/kernel/part_0"]["shape"] == [2, 3, 3, 8]
    assert by_name["net/conv/kernel/part_1"]["shape"] == [1, 3, 3, 8]
    assert rows[0]["name"] == "net/conv/kernel/part_0"


# tf_keras (TF's PS tutorial for TF >= 2.16) lists a sharded variable's shards in
# `model.trainable_variables` one by one, named `<name>/part_<i>`, where Keras 3 lists the ShardedVariable.
_TF_KERAS_BODY = """
import tf_keras
from geryon.tagger import tag_model
from geryon.tagger.tf_partitioner import GeryonPartitioner

strategy = tf.distribute.experimental.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=GeryonPartitioner(NUM_PS, ARGS["slice_bytes"])
)
with strategy.scope():
    model = tf_keras.Sequential(
        [
            tf_keras.Input((16, 16, 3)),
            tf_keras.layers.Conv2D(8, 3, name="conv"),
            tf_keras.layers.Flatten(name="flat"),
            tf_keras.layers.Dense(64, name="fc1"),
            tf_keras.layers.Dense(10, name="fc2"),
        ],
        name="net",
    )
t = tag_model(model)
table = t.map_table([0.5])
emit({"rows": t.rows(table), "listed": [v.name for v in model.trainable_variables]})
"""


def test_tf_keras_shards_listed_one_by_one_keep_their_layer() -> None:
    result = run_in_ps_cluster(_TF_KERAS_BODY, num_ps=2, args={"slice_bytes": 64 * 1024}, timeout=180)
    assert "fc1/kernel/part_0:0" in result["listed"]  # what tf_keras hands the tagger
    rows = result["rows"]
    fc1 = [r for r in rows if r["name"].startswith("fc1/kernel/")]
    assert [r["name"] for r in fc1] == [f"fc1/kernel/part_{i}" for i in range(7)]
    assert {r["parent"] for r in fc1} == {"fc1/kernel"}
    # The shards are fc1's, with its bias: one layer, one urgency (before the fix each shard group was
    # a layer of its own, so the `layer` urgency had more levels than the model has layers).
    assert {r["layer"] for r in rows if r["name"].startswith("fc1/")} == {"fc1"}
    assert len({r["urgency"] for r in rows if r["name"].startswith("fc1/")}) == 1
    layers = []
    for r in rows:
        if not layers or layers[-1] != r["layer"]:
            layers.append(r["layer"])
    assert layers == ["conv", "fc1", "fc2"]
    assert sorted({r["urgency"] for r in rows}) == [0.0, pytest.approx(1 / 3), pytest.approx(2 / 3)]
