"""The demo's model trained through tf_keras' `model.fit` path (spec "api": "fit"; issue 36 item 4).

The custom loop (geryon.demo.chief.connect) schedules the demo's own Keras 3 step, one step per
scheduled function. Users of ParameterServerStrategy mostly call tf_keras `model.fit`, which schedules
the model's own train function instead: `steps_per_execution` steps in a `tf.range` loop, each
reading a batch from a per-worker dataset iterator. This session trains that function, made by
`model.make_train_function()` exactly as `fit` makes it (fit sets `model._cluster_coordinator` to the
strategy's ClusterCoordinator first, and `make_train_function` then returns a callable that schedules
on it), with the iterator `fit` would build from a DatasetCreator (coordinator.create_per_worker_dataset
over strategy.distribute_datasets_from_function).

What differs from `fit` is only the loop around it: `fit` schedules steps_per_epoch / N functions and
joins at the epoch's end; here a round schedules one function per worker and joins, so a round is a
synchronous iteration of every worker as in the custom loop and the paired modes can change the switch
between rounds. A round trains N steps per worker, so Session.round reports its time / N: a step time
comparable with the custom loop's.

The model is the tf_keras twin of the demo's model (geryon.cluster.models.build_tf_keras_model: same layer
names and shapes, so the tagger gives every parameter the same class), compiled with tf_keras' legacy
SGD at the custom loop's learning rate. Inputs are random tensors made on the workers by the dataset
(no data from the chief), as the custom loop makes them inside its step.
"""

from __future__ import annotations

from typing import Any

from geryon.demo.session import LEARNING_RATE, Cluster, Session, join_cluster, place_model


def connect_fit(spec: dict[str, Any]) -> Session:
    """A Session whose round schedules tf_keras' own train function once per worker."""
    c = join_cluster(spec)
    import tensorflow as tf
    import tf_keras

    from geryon.cluster.models import build_model, build_tf_keras_model

    spe = int(spec.get("steps_per_execution", 1))
    tf_keras.utils.set_random_seed(1)
    g, ps_strategy, model = place_model(
        spec, c, lambda: build_tf_keras_model(spec["model"], c.shape, c.num_classes)
    )
    with ps_strategy.scope():
        # After place_model's adopt(): the train function is traced at its first call, with the ids.
        model.compile(
            tf_keras.optimizers.legacy.SGD(LEARNING_RATE),
            tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=spe,
        )
    coordinator = tf.distribute.coordinator.ClusterCoordinator(ps_strategy)  # fit's: one per strategy
    model._cluster_coordinator = coordinator
    train_function = model.make_train_function()
    iterator = iter(coordinator.create_per_worker_dataset(lambda: worker_dataset(ps_strategy, c)))
    workers = len(spec["cluster"]["worker"])

    def make_model() -> Any:  # the Keras 3 twin: the same parameter rows as the custom loop's
        return build_model(spec["model"], c.shape, c.num_classes)

    return Session(
        spec,
        c.started,
        coordinator,
        lambda: train_function(iterator),
        model,
        workers,
        g,
        make_model,
        loss=fit_loss,
        steps_per_round=spe,
    )


def worker_dataset(ps_strategy: Any, c: Cluster) -> Any:
    """What fit builds from a DatasetCreator: the dataset function distributed on each worker. The
    batches are random tensors made there, one per step (as the custom loop's step makes them)."""
    import tensorflow as tf

    def dataset_fn(_: Any) -> Any:
        def batch(_: Any) -> tuple[Any, Any]:
            x = tf.random.uniform([c.batch, *c.shape])
            y = tf.random.uniform([c.batch], 0, c.num_classes, dtype=tf.int64)
            return x, y

        return tf.data.Dataset.range(1).repeat().map(batch)

    return ps_strategy.distribute_datasets_from_function(dataset_fn)


def fit_loss(result: Any) -> float:
    """The loss of a scheduled train function (tf_keras returns its logs, a dict)."""
    return float(result.fetch()["loss"])
