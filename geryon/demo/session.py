"""What both of the chief's training paths share (the custom loop, geryon.demo.chief, and model.fit,
geryon.demo.fit): joining the cluster, placing the model in its strategy, and the Session a path
returns, which the chief's loop trains round by round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geryon.cluster.task import limit_threads

LEARNING_RATE = 0.01


def sgd_replica_step(
    model: Any, variables: list[Any], batch: int, shape: tuple[int, int, int], num_classes: int
) -> Callable[[], Any]:
    """One worker's training step as a Python function to trace: a batch of random inputs made in the
    step (so no data travels), the model's loss, and plain SGD on each of `variables` (Keras 3's tape
    cannot differentiate its ShardedVariable wrappers, so the caller passes the variables or their
    shards). The chief runs it on every worker through the strategy; geryon.demo.local alone."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def replica() -> Any:
        x = tf.random.uniform([batch, *shape])
        y = tf.random.uniform([batch], 0, num_classes, dtype=tf.int64)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        for v, grad in zip(variables, tape.gradient(loss, variables), strict=True):
            v.assign_sub(LEARNING_RATE * grad)
        return loss

    return replica


@dataclass
class Session:
    """A connected cluster with its model, training step and (grpc+geryon) Geryon strategy.

    `schedule` puts one scheduled function on the coordinator's queue (a worker picks it up) and
    returns what `loss` turns into the float loss. One scheduled function trains `steps_per_round`
    steps (tf_keras' steps_per_execution on the fit path, geryon.demo.fit; 1 in the custom loop)."""

    spec: dict[str, Any]
    started: float
    coordinator: Any
    schedule: Callable[[], Any]
    model: Any
    workers: int
    g: Any  # GeryonStrategy, or None without classes
    make_model: Callable[[], Any]  # a Keras 3 model, outside the strategy: traced, never trained
    loss: Callable[[Any], float] = lambda result: float(result.fetch())
    steps_per_round: int = 1

    def round(self) -> tuple[float, Any]:
        """One synchronous round (a scheduled function per worker, then join): its seconds per step
        (the round's wall time / steps_per_round, comparable across the two paths) and its results."""
        t0 = time.perf_counter()
        results = [self.schedule() for _ in range(self.workers)]
        self.coordinator.join()
        return (time.perf_counter() - t0) / self.steps_per_round, results


@dataclass
class Cluster:
    """What both training paths need of the spec: the cluster to join and the model's shape."""

    started: float
    resolver: Any
    partitioner: Any
    shape: tuple[int, int, int]
    batch: int
    num_classes: int


def join_cluster(spec: dict[str, Any]) -> Cluster:
    """Thread limits, the protocol's library and class marks, the resolver and the partitioner."""
    intra, inter = int(spec.get("intra_threads", 1)), int(spec.get("inter_threads", 2))
    limit_threads(intra, inter)
    started = time.perf_counter()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    protocol = spec["protocol"]
    if protocol == "grpc+geryon":
        import geryon.tf

        geryon.tf.load()
        if spec.get("class_dscp"):
            geryon.tf.set_class_marks(list(spec["class_dscp"]), spec.get("class_priority"))
        # With GERYON_BANDS_ETCD set (a job among others): the step calls follow the job's band.
        geryon.tf.follow_band(spec["cluster"])
    cluster_spec = tf.train.ClusterSpec(spec["cluster"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer=protocol)
    partitioner = None
    if spec["partitioned"]:
        from geryon.tagger.tf_partitioner import GeryonPartitioner

        partitioner = GeryonPartitioner(len(spec["cluster"]["ps"]), spec["slice_bytes"])
    h, w, channels = (int(d) for d in spec["input_shape"])
    return Cluster(
        started,
        resolver,
        partitioner,
        (h, w, channels),
        int(spec["batch_size"]),
        int(spec.get("num_classes", 10)),
    )


def place_model(spec: dict[str, Any], c: Cluster, model_fn: Callable[[], Any]) -> tuple[Any, Any, Any]:
    """(GeryonStrategy or None, ParameterServerStrategy, model): `model_fn()` built in the strategy's
    scope, classified and its map_table installed when the spec's mode has classes."""
    import tensorflow as tf

    if spec["classes_on"]:
        from geryon.tf.strategy import strategy

        g = strategy(
            c.resolver,
            model_fn,
            thresholds=spec["thresholds"],
            input_shape=c.shape,
            variable_partitioner=c.partitioner,
        )
        return g, g.tf_strategy, g.model
    ps_strategy = tf.distribute.experimental.ParameterServerStrategy(
        c.resolver, variable_partitioner=c.partitioner
    )
    with ps_strategy.scope():
        return None, ps_strategy, model_fn()
