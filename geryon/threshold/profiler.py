"""Per-layer forward and backward times of a real Keras model, measured on this machine.

Every leaf Keras layer is run alone, once per call it has in the model's graph, under `tf.function`,
on random inputs of the shapes that call sees with the batch dimension set to `batch_size`:
- forward: the layer called with `training=True` (batch norm on batch statistics, dropout active);
- forward + backward: the same under a GradientTape, then the gradients of its output (with a random
  upstream gradient) for its trainable variables and its float inputs. The model's own input gets no
  gradient, as in training.
Backward is the median of (forward + backward) minus the median of forward, the two timed in
alternation so that load on a shared machine hits both alike; forward has the cost of
calling an empty tf.function (measured alongside) taken off, since a training step pays that once,
not once per layer. After `warmup` untimed runs (graph tracing, allocator warm-up), `iterations` runs
are timed and the median kept.

Layers are grouped into profile layers exactly as `profiles.model_structure` groups them (parameter
layers in consumption order, parameter-free layers folded into their predecessor), and each profile
layer also records its forward FLOPs, so a measured profile can be compared with (or re-timed as) a
FLOPs-derived one. Timing each layer alone leaves out what a whole step overlaps or fuses, so the
sum is an estimate of a step, not a measurement of one; the tests keep it within a loose factor.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from geryon.progress import Progress
from geryon.threshold.profile import LayerSpec, Profile, ProfileError
from geryon.threshold.profiles import BACKWARD_FACTOR, ModelStructure, group_flops, model_structure


def measure_profile(
    model_or_spec: Any,
    *,
    batch_size: int,
    iterations: int = 5,
    warmup: int = 2,
    input_shape: Sequence[int] | None = None,
    urgency: str = "layer",
    progress: Progress | None = None,
) -> Profile:
    """A profile whose compute times are measured on this CPU; source ``measured:<hostname>``."""
    for field, value, least in (
        ("batch_size", batch_size, 1),
        ("iterations", iterations, 1),
        ("warmup", warmup, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ProfileError(f"{field}: expected an integer >= {least}, got {value!r}")
    progress = progress if progress is not None else Progress("geryon profile")
    from geryon.tfenv import import_tensorflow

    import_tensorflow()
    structure = model_structure(model_or_spec, input_shape=input_shape, urgency=urgency)
    model_inputs = _model_input_ids(structure)

    overhead = _call_overhead(max(20, iterations), warmup)
    leaf_times: list[tuple[float, float]] = []
    started = last_said = time.perf_counter()
    total = len(structure.leaves)
    progress.say(
        f"measuring {total} Keras layers of {structure.model} at batch {batch_size} "
        f"({warmup} warm-up + {iterations} timed runs each)"
    )
    for n, leaf in enumerate(structure.leaves, start=1):
        nodes = leaf.layer._inbound_nodes
        # A layer of a nested model called k times has one node but k calls.
        repeat = len(leaf.calls) // len(nodes) if nodes else 0
        forward = backward = 0.0
        for node in nodes:
            f, b = _time_call(leaf.layer, node, batch_size, iterations, warmup, model_inputs)
            forward += max(0.0, f - overhead) * repeat
            backward += b * repeat
        leaf_times.append((forward, backward))
        now = time.perf_counter()
        if now - last_said >= 2.0 or n == total:
            progress.say(f"{n}/{total} layers ({leaf.name}), {now - started:.1f} s")
            last_said = now

    flops = group_flops(structure)
    layers = []
    for name, group, f in zip(structure.group_names(), structure.groups, flops, strict=True):
        forward = sum(leaf_times[i][0] for i in group)
        backward = sum(leaf_times[i][1] for i in group)
        layers.append(LayerSpec(name, forward, backward, f * batch_size))
    total_forward = sum(layer.forward_s for layer in layers)
    total_backward = sum(layer.backward_s for layer in layers)
    host = socket.gethostname()
    meta = {
        "input_shape": list(structure.input_shape),
        "host": host,
        "iterations": iterations,
        "warmup": warmup,
        "statistic": "median",
        "call_overhead_s": overhead,
        "flops_per_sample": sum(flops),
        # What this CPU reached on the forward pass, and how backward compares with the 2x convention.
        "achieved_flops_per_s": sum(flops) * batch_size / total_forward if total_forward > 0 else None,
        "backward_over_forward": total_backward / total_forward if total_forward > 0 else None,
        "flops_backward_factor": BACKWARD_FACTOR,
        "folded": structure.folded(),
    }
    return Profile(
        structure.model,
        batch_size,
        tuple(layers),
        structure.params,
        structure.urgency_function,
        f"measured:{host}",
        meta,
    )


def measure_train_step(model: Any, *, batch_size: int, iterations: int = 5, warmup: int = 2) -> float:
    """Median time of one whole training step (forward, loss, gradients) of a one-input Keras model."""
    import tensorflow as tf

    shape = [batch_size, *(int(d) for d in model.inputs[0].shape[1:])]
    x = tf.random.normal(shape)
    variables = model.trainable_variables

    @tf.function
    def step(x: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x, training=True))
        return tape.gradient(loss, variables)

    return _median_time(lambda: step(x), iterations, warmup)


def _time_call(
    layer: Any, node: Any, batch_size: int, iterations: int, warmup: int, model_inputs: set[int]
) -> tuple[float, float]:
    import tensorflow as tf

    symbolic = node.arguments.keras_tensors
    if not symbolic:  # an InputLayer: nothing runs
        return 0.0, 0.0
    values = {id(t): _random_like(t, batch_size) for t in symbolic}
    args, kwargs = node.arguments.fill_in(values)
    kwargs = {**kwargs, "training": True}
    # Gradients flow into float inputs that some earlier layer produced, and into the weights.
    wrt_inputs = [
        values[id(t)] for t in symbolic if id(t) not in model_inputs and values[id(t)].dtype.is_floating
    ]
    variables = list(layer.trainable_variables)

    @tf.function
    def forward() -> Any:
        return layer(*args, **kwargs)

    outputs = tf.nest.flatten(forward())
    upstream = [tf.random.normal(o.shape, dtype=o.dtype) if o.dtype.is_floating else None for o in outputs]

    @tf.function
    def forward_backward() -> Any:
        with tf.GradientTape() as tape:
            tape.watch(wrt_inputs)
            ys = tf.nest.flatten(layer(*args, **kwargs))
        pairs = [(y, g) for y, g in zip(ys, upstream, strict=True) if g is not None]
        if not pairs or not (wrt_inputs or variables):
            return ys
        return tape.gradient(
            [y for y, _ in pairs], wrt_inputs + variables, output_gradients=[g for _, g in pairs]
        )

    f, fb = _paired_median_times(forward, forward_backward, iterations, warmup)
    # Noise can make the difference negative for layers whose backward is nearly free.
    return f, max(0.0, fb - f)


def _call_overhead(iterations: int, warmup: int) -> float:
    """What calling an empty tf.function costs; taken off every forward time (a train step runs
    the whole model in one call, so it pays this once, not once per layer)."""
    import tensorflow as tf

    @tf.function
    def empty() -> Any:
        return tf.constant(0.0)

    return _median_time(empty, iterations, warmup)


def _median_time(fn: Callable[[], Any], iterations: int, warmup: int) -> float:
    # Eager TensorFlow on the CPU returns once the function's outputs are computed, so the wall time
    # of the call is the compute time.
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _paired_median_times(
    first: Callable[[], Any], second: Callable[[], Any], iterations: int, warmup: int
) -> tuple[float, float]:
    """Medians of two functions timed in alternation, so a burst of load on a shared machine hits
    both alike instead of whichever happened to run then (their difference is the backward time)."""
    for _ in range(warmup):
        first()
        second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(iterations):
        for fn, out in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def _random_like(tensor: Any, batch_size: int) -> Any:
    import tensorflow as tf

    shape = [batch_size if i == 0 and d is None else d for i, d in enumerate(tensor.shape)]
    if any(d is None for d in shape):
        raise ProfileError(f"cannot measure a layer input of unknown shape {list(tensor.shape)}")
    dtype = tf.as_dtype(tensor.dtype)
    if dtype.is_floating:
        return tf.random.normal(shape, dtype=dtype)
    return tf.zeros(shape, dtype=dtype)  # integer inputs (token ids): index 0 is always valid


def _model_input_ids(structure: ModelStructure) -> set[int]:
    """Ids of the outermost model's input tensors: they need no gradient."""
    return {id(t) for t in structure.keras_model.inputs}
