"""The demo's training loop, the coordinator (job "chief"): `python -m geryon.demo.chief SPEC_FILE`.

The runner starts it in the testbed's chief host once every PS and worker task is READY. SPEC_FILE
(JSON) says the cluster, protocol, model, batch, partitioning and steps (see runner.chief_spec). It
trains with ParameterServerStrategy + ClusterCoordinator, one *round* at a time: one step scheduled
per worker, then join, so a round is a synchronous iteration of every worker and its wall time is
the step time (global batch = batch_size x workers). Inputs are made on the workers
(tf.random inside the step), so the chief sends no data: the only bulk traffic is pulls and pushes.

It writes JSON lines on stdout, each prefixed by MARKER: "ready" (cluster connected, model built),
"step" (one per round: seconds, thresholds in force, search trial), then "done" with every step
time and the search's trace, or "error". Nothing else on stdout is parsed.

Search (geryon mode): the first `warmup` rounds run at the initial thresholds (graph tracing, new
connections); from then on ThresholdHook drives the searcher until it converges and then stays on
its best thresholds (drift re-tuning is off: a run this short has no drift to follow).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geryon.demo.task import limit_threads

MARKER = "GERYON_DEMO "
# Guided search ranks candidates with the simulator; only the ranking matters, so a rough FLOP rate
# of one core here (about 20 GFLOP/s single-threaded with oneDNN) is enough.
GUIDED_FLOPS = 2e10
LEARNING_RATE = 0.01

Emit = Callable[[dict[str, Any]], None]


def emit_line(event: dict[str, Any]) -> None:
    sys.stdout.write(MARKER + json.dumps(event) + "\n")
    sys.stdout.flush()


def param_rows(model: Any, input_shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """The model's parameters as the tagger sees them (bytes, kind, urgency, consumption order)."""
    from geryon.tagger import tag_model

    tagging = tag_model(model, input_shape=input_shape)
    order = {i: pos for pos, i in enumerate(tagging.consumption.order)}
    return [
        {
            "name": p.name,
            "bytes": int(p.bytes),
            "kind": tagging.kinds[i],
            "urgency": float(tagging.urgency[i]),
            "order": order.get(i, -1),
        }
        for i, p in enumerate(tagging.params)
    ]


def make_searcher(spec: dict[str, Any], tagging: Any, local_model: Any) -> Any:
    from geryon.threshold.search import make_searcher as make

    s = spec["search"]
    options: dict[str, Any] = {"budget": s["budget"], "warmup": s.get("search_warmup", 1), "drift": None}
    predictor = None
    if s["strategy"] in ("sweep", "guided"):
        options["urgencies"] = [float(u) for u in tagging.urgency]
        options["sizes"] = [int(p.bytes) for p in tagging.params]
    if s["strategy"] == "sweep" and s.get("points"):
        options["points"] = s["points"]
    if s["strategy"] == "guided":
        from geryon.threshold.profiles import profile_from_model
        from geryon.threshold.simulator import simulate

        profile = profile_from_model(
            local_model, batch_size=spec["batch_size"], device=GUIDED_FLOPS, input_shape=spec["input_shape"]
        )

        def predictor(ts: Any) -> float:
            return simulate(
                profile,
                workers=len(spec["cluster"]["worker"]),
                num_ps=len(spec["cluster"]["ps"]),
                bandwidth_bps=spec["rate_bits"],
                mode="network",
                thresholds=tuple(ts),
                slice_bytes=spec["slice_bytes"],
                partition=True,
            ).iteration_s

    return make(s["strategy"], spec["classes"], predictor=predictor, **options)


def train(spec: dict[str, Any], emit: Emit) -> None:
    intra, inter = int(spec.get("intra_threads", 1)), int(spec.get("inter_threads", 2))
    limit_threads(intra, inter)
    started = time.perf_counter()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    import keras

    from geryon.demo.models import build_model

    protocol = spec["protocol"]
    if protocol == "grpc+geryon":
        import geryon.tf

        geryon.tf.load()
        if spec.get("class_dscp"):
            geryon.tf.set_class_marks(list(spec["class_dscp"]))
    shape = tuple(spec["input_shape"])
    batch, num_classes = int(spec["batch_size"]), int(spec.get("num_classes", 10))
    cluster_spec = tf.train.ClusterSpec(spec["cluster"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer=protocol)
    partitioner = None
    if spec["partitioned"]:
        from geryon.tagger.tf_partitioner import GeryonPartitioner

        partitioner = GeryonPartitioner(len(spec["cluster"]["ps"]), spec["slice_bytes"])

    keras.utils.set_random_seed(1)

    def make_model() -> Any:
        return build_model(spec["model"], shape, num_classes)

    g = None
    if spec["classes_on"]:
        from geryon.tf.strategy import strategy

        g = strategy(
            resolver,
            make_model,
            thresholds=spec["thresholds"],
            input_shape=shape,
            variable_partitioner=partitioner,
        )
        ps_strategy, model = g.tf_strategy, g.model
    else:
        ps_strategy = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=partitioner
        )
        with ps_strategy.scope():
            model = make_model()
    # Keras 3's tape cannot differentiate its ShardedVariable wrappers, so every mode steps the
    # variables (or their shards) itself: plain SGD, each update on the variable's own PS.
    shards: list[Any] = []
    for v in model.trainable_variables:
        value = v.value
        shards.extend([value] if isinstance(value, tf.Variable) else list(value.variables))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(ps_strategy)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step() -> Any:
        def replica() -> Any:
            x = tf.random.uniform([batch, *shape])
            y = tf.random.uniform([batch], 0, num_classes, dtype=tf.int64)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            for shard, grad in zip(shards, tape.gradient(loss, shards), strict=True):
                shard.assign_sub(LEARNING_RATE * grad)
            return loss

        return ps_strategy.run(replica)

    workers = len(spec["cluster"]["worker"])
    warmup, steps = int(spec["warmup"]), int(spec["steps"])
    searcher = hook = None
    local_model = None
    if g is not None and spec.get("search"):
        from geryon.tf.strategy import ThresholdHook

        local_model = make_model()  # outside the strategy: only traced, never trained
        searcher = make_searcher(spec, g.tagging, local_model)
        hook = ThresholdHook(searcher, g)
    emit({"event": "ready", "seconds": time.perf_counter() - started, "workers": workers})

    step_times: list[float] = []
    warmup_times: list[float] = []
    round_thresholds: list[list[float] | None] = []
    trials: list[dict[str, Any]] = []
    losses: list[float] = []
    converged_step: int | None = None
    trial, last = 0, None
    deadline = time.monotonic() + float(spec.get("max_seconds", 1e9))
    for i in range(warmup + steps):
        measured = i >= warmup
        searching = hook is not None and measured and not searcher.converged  # type: ignore[union-attr]
        if hook is not None and measured:
            hook.begin()
        thresholds = list(g.thresholds) if g is not None else None
        if searching and (thresholds != last or trial == 0):
            trial += 1
        last = thresholds
        t0 = time.perf_counter()
        results = [coordinator.schedule(train_step) for _ in range(workers)]
        coordinator.join()
        seconds = time.perf_counter() - t0
        if hook is not None and measured:
            hook.end(seconds)
        if i in (0, warmup + steps - 1):
            losses.append(float(results[-1].fetch()))
        round_thresholds.append(thresholds)
        if measured:
            step_times.append(seconds)
            if searching:
                trials.append({"step": len(step_times) - 1, "thresholds": thresholds, "step_s": seconds})
            if converged_step is None and searcher is not None and searcher.converged:
                converged_step = len(step_times)  # the first step on the chosen thresholds
        else:
            warmup_times.append(seconds)
        emit(
            {
                "event": "step",
                "step": i + 1,
                "of": warmup + steps,
                "seconds": seconds,
                "warmup": not measured,
                "thresholds": thresholds,
                "trial": trial if searching else None,
                "converged": bool(searcher is not None and searcher.converged),
            }
        )
        if time.monotonic() > deadline:
            raise TimeoutError(f"max_seconds {spec['max_seconds']} reached after {i + 1} rounds")

    search = None
    if searcher is not None:
        after = step_times[converged_step:] if converged_step is not None else []
        search = {
            "strategy": spec["search"]["strategy"],
            "live_iterations": searcher.live_iterations,
            "converged": bool(searcher.converged),
            "converged_step": converged_step,
            "best": list(searcher.best) if searcher.best is not None else None,
            "trials": trials,
            "median_converged_s": statistics.median(after) if after else None,
        }
    params = None
    if spec.get("want_params"):
        params = param_rows(local_model if local_model is not None else make_model(), shape)
    emit(
        {
            "event": "done",
            "step_times": step_times,
            "warmup_times": warmup_times,
            "round_thresholds": round_thresholds,
            "thresholds": list(g.thresholds) if g is not None else None,
            "search": search,
            "params": params,
            "losses": losses,
            "variables": len(model.trainable_variables),
            "seconds": time.perf_counter() - started,
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.demo.chief SPEC_FILE", file=sys.stderr)
        return 2
    code = 0
    try:
        train(json.loads(Path(argv[0]).read_text()), emit_line)
    except BaseException as e:
        message = str(e).strip().splitlines()
        emit_line({"event": "error", "error": f"{type(e).__name__}: {message[0] if message else ''}"[:500]})
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC threads keep the interpreter alive past the end of main: leave at once.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
