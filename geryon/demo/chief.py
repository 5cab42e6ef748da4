"""The demo's training loop, the coordinator (job "chief"): `python -m geryon.demo.chief SPEC_FILE`.

The runner starts it in the testbed's chief host once every PS and worker task is READY. SPEC_FILE
(JSON) says the cluster, protocol, model, batch, partitioning and steps (geryon.demo.defaults.chief_spec). It
trains with ParameterServerStrategy + ClusterCoordinator, one *round* at a time: one step scheduled
per worker, then join, so a round is a synchronous iteration of every worker and its wall time is
the step time (global batch = batch_size x workers). Inputs are made on the workers
(tf.random inside the step), so the chief sends no data: the only bulk traffic is pulls and pushes.
With spec "api": "fit" the step is tf_keras model.fit's own train function instead, N steps per
scheduled function (geryon.demo.fit); every step time is then the round's time / N.

It writes JSON lines on stdout, each prefixed by MARKER: "ready" (cluster connected, model built),
"step" (one per round: seconds, thresholds in force, search trial), then "done" with every step
time and the search's trace, or "error". Nothing else on stdout is parsed.

Search (geryon mode): the first `warmup` rounds run at the initial thresholds (graph tracing, new
connections); from then on ThresholdHook drives the searcher until it converges and then stays on
its best thresholds (drift re-tuning is off: a run this short has no drift to follow).

Paired (spec "rotation": the modes geryon/paper/endhost, see train_paired): one cluster runs every
mode of the rotation, round by round. Before each round the chief prints a "round" event naming
the mode and its switch mode, and waits for "go" on stdin: the runner changes the testbed switch's
queues between rounds, which only it can do (the switch is outside the chief's namespace).
With spec "variants" instead (geryon.demo.variants: a mode at thresholds and a chunk size of its
own, bench/bench_plan_testbed.py's sweep) the rotation is the variants, without the search.
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

from geryon.cluster.protocol import emit
from geryon.demo import jobmeter
from geryon.demo.session import Session, join_cluster, place_model, sgd_replica_step

# Guided search ranks candidates with the simulator; only the ranking matters, so a rough FLOP rate
# of one core here (about 20 GFLOP/s single-threaded with oneDNN) is enough.
GUIDED_FLOPS = 2e10

Emit = Callable[[dict[str, Any]], None]


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
    options: dict[str, Any] = {
        "budget": s["budget"],
        "repeats": s.get("repeats", 1),
        "warmup": s.get("search_warmup", 1),
        "drift": None,
    }
    if s.get("chunk_sizes"):
        options["chunk_sizes"] = [int(c) for c in s["chunk_sizes"]]
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

        def predictor(ts: Any, chunk_bytes: int | None = None) -> float:
            # Joint over chunk sizes: hybrid, the simulator's mode that preempts at chunk boundaries
            # (geryon.threshold.joint); the thresholds alone rank in network mode as before.
            chunked: dict[str, Any] = {} if chunk_bytes is None else {"chunk_bytes": int(chunk_bytes)}
            return simulate(
                profile,
                workers=len(spec["cluster"]["worker"]),
                num_ps=len(spec["cluster"]["ps"]),
                bandwidth_bps=spec["rate_bits"],
                mode="network" if chunk_bytes is None else "hybrid",
                thresholds=tuple(ts),
                slice_bytes=spec["slice_bytes"],
                partition=True,
                **chunked,
            ).iteration_s

    return make(s["strategy"], spec["classes"], predictor=predictor, **options)


def connect(spec: dict[str, Any]) -> Session:
    """The session of spec["api"]: "custom" (this module's Keras 3 step, the default) or "fit"
    (tf_keras' own train function, geryon.demo.fit)."""
    if spec.get("api", "custom") == "fit":
        from geryon.demo.fit import connect_fit

        return connect_fit(spec)
    c = join_cluster(spec)
    import keras
    import tensorflow as tf

    from geryon.cluster.models import build_model

    batch, shape, num_classes = c.batch, c.shape, c.num_classes
    keras.utils.set_random_seed(1)

    def make_model() -> Any:
        return build_model(spec["model"], shape, num_classes)

    g, ps_strategy, model = place_model(spec, c, make_model)
    # Keras 3's tape cannot differentiate its ShardedVariable wrappers, so every mode steps the
    # variables (or their shards) itself: plain SGD, each update on the variable's own PS.
    shards: list[Any] = []
    for v in model.trainable_variables:
        value = v.value
        shards.extend([value] if isinstance(value, tf.Variable) else list(value.variables))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(ps_strategy)
    replica = sgd_replica_step(model, shards, batch, shape, num_classes)

    @tf.function
    def train_step() -> Any:
        return ps_strategy.run(replica)

    workers = len(spec["cluster"]["worker"])
    return Session(
        spec, c.started, coordinator, lambda: coordinator.schedule(train_step), model, workers, g, make_model
    )


def train(spec: dict[str, Any], emit: Emit, wait_go: Callable[[], None] | None = None) -> None:
    """One mode (spec without "rotation"), or the paired modes of spec["rotation"] (train_paired)."""
    session = connect(spec)
    if spec.get("rotation"):
        train_paired(session, emit, wait_go or _stdin_go)
        return
    g, workers = session.g, session.workers
    searcher = hook = None
    local_model = None
    if g is not None and spec.get("search"):
        from geryon.tf.strategy import ThresholdHook

        local_model = session.make_model()  # outside the strategy: only traced, never trained
        searcher = make_searcher(spec, g.tagging, local_model)
        hook = ThresholdHook(searcher, g)
    # With spec["register"]: the job in the cluster view, its intensity measured step by step.
    meter = jobmeter.from_spec(spec, jobmeter.param_bytes(session.model))
    emit({"event": "ready", "seconds": time.perf_counter() - session.started, "workers": workers})
    try:
        _train_steps(spec, session, emit, wait_go, searcher, hook, local_model, meter)
    finally:
        if meter is not None:
            meter.close()


def _train_steps(
    spec: dict[str, Any],
    session: Session,
    emit: Emit,
    wait_go: Callable[[], None] | None,
    searcher: Any,
    hook: Any,
    local_model: Any,
    meter: jobmeter.JobMeter | None,
) -> None:
    g = session.g
    warmup, steps = int(spec["warmup"]), int(spec["steps"])
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
        searching = hook is not None and measured and not searcher.converged
        if hook is not None and measured:
            hook.begin()
        thresholds = list(g.thresholds) if g is not None else None
        if searching and (thresholds != last or trial == 0):
            trial += 1
        last = thresholds
        seconds, results = session.round()
        if hook is not None and measured:
            hook.end(seconds)
        if i in (0, warmup + steps - 1):
            losses.append(session.loss(results[-1]))
        round_thresholds.append(thresholds)
        if measured:
            step_times.append(seconds)
            if meter is not None:
                meter.step(seconds / session.steps_per_round)
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

    trace_rounds = _trace_tail(spec, session, emit, wait_go or _stdin_go)
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
    params = _wanted_params(spec, session, local_model)
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
            "trace_rounds": trace_rounds,
            "variables": len(session.model.trainable_variables),
            "steps_per_round": session.steps_per_round,  # every time above is per step: round / this
            "seconds": time.perf_counter() - session.started,
        }
    )


def _trace_tail(
    spec: dict[str, Any], session: Session, emit: Emit, wait_go: Callable[[], None]
) -> int | None:
    """With spec["trace_tail_s"]: after the measured steps, unmeasured rounds for that long while the
    runner traces worker 0 (geryon.demo.capture), so the profiler's overhead never lands on a measured
    step. Emits {"event": "trace"} and waits for "go" (the trace has started); returns the rounds run."""
    tail = spec.get("trace_tail_s")
    if not tail:
        return None
    emit({"event": "trace", "seconds": float(tail)})
    wait_go()
    rounds = 0
    end = time.monotonic() + float(tail)
    while rounds == 0 or time.monotonic() < end:
        session.round()
        rounds += 1
    return rounds


def _wanted_params(spec: dict[str, Any], session: Session, local_model: Any) -> list[dict[str, Any]] | None:
    """The parameter rows the runner asked for (`want_params`), from the traced model if there is one."""
    if not spec.get("want_params"):
        return None
    return param_rows(local_model if local_model is not None else session.make_model(), spec_shape(spec))


def spec_shape(spec: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(d) for d in spec["input_shape"])


def _stdin_go() -> None:
    """Waits for the runner's "go" line (it has set the switch and read the counters)."""
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise RuntimeError(f"expected 'go' from the runner on stdin, got {line.strip()!r}")


def train_paired(session: Session, emit: Emit, wait_go: Callable[[], None]) -> None:
    """The modes of spec["rotation"] in this one cluster, round by round: A B C A B C ...

    Before every round it emits {"event": "round", "mode", "switch", "phase"} and waits for `wait_go`
    (the runner sets the testbed switch's queue mode and reads the class counters, so each mode's
    bytes are its own); then puts the mode's classes and order in force (geryon.demo.schedule) and
    times the round. Phases: "warmup" (cycles through every mode: tracing, every class's
    connections), "search" (the searching mode alone, until its searcher converges or the search
    budget's rounds are spent), then `steps` cycles of, per mode, "settle" (spec settle_rounds
    unmeasured rounds, default 1) and "measure" (one round; round i of each mode is paired with
    round i of the others in the report).
    """
    from geryon.demo import variants as variants_mod
    from geryon.demo.schedule import apply_chunk, apply_schedule

    spec, g = session.spec, session.g
    if g is None:
        raise RuntimeError("paired modes need the grpc+geryon protocol with classes")
    base_chunk = spec.get("chunk_bytes")
    chunk = apply_chunk(g, base_chunk)  # every mode of the rotation shares it, unless a variant sets its own
    # The rotation: the modes of spec["rotation"], or spec["variants"] (modes at settings of their
    # own: geryon.demo.variants), each named in the events and records by its own name.
    if spec.get("variants"):
        rotation = variants_mod.parse(spec["variants"], len(g.thresholds) + 1)
    else:
        rotation = variants_mod.from_modes(spec["rotation"])
    warmup, steps = int(spec["warmup"]), int(spec["steps"])
    chosen: list[float] = [float(t) for t in spec["thresholds"]]
    searcher = hook = None
    local_model = None
    searching_mode = next((m for m in rotation if m.mode.search), None)
    if searching_mode is not None and spec.get("search") and not spec.get("variants"):
        from geryon.tf.strategy import ThresholdHook

        local_model = session.make_model()
        searcher = make_searcher(spec, g.tagging, local_model)
        hook = ThresholdHook(searcher, g)
    emit({"event": "ready", "seconds": time.perf_counter() - session.started, "workers": session.workers})

    per_mode: dict[str, dict[str, Any]] = {
        m.name: {
            "step_times": [],
            "warmup_times": [],
            "trace_times": [],
            "round_thresholds": [],
            "schedule": None,
        }
        for m in rotation
    }
    trials: list[dict[str, Any]] = []
    losses: list[float] = []
    deadline = time.monotonic() + float(spec.get("max_seconds", 1e9))
    rounds = 0
    last: list[Any] = []
    chosen_chunk: int | None = None

    def one(m: variants_mod.Variant, phase: str, searching: bool = False) -> float:
        nonlocal rounds, last, chunk
        emit({"event": "round", "mode": m.name, "switch": m.mode.switch, "phase": phase, "round": rounds})
        wait_go()
        wanted_chunk = m.chunk_bytes if m.chunk_bytes is not None else base_chunk
        if m is searching_mode and chosen_chunk is not None:
            wanted_chunk = chosen_chunk  # what a search joint over chunk sizes chose
        if searching and hook is not None and hook.searches_chunk:
            hook.chunk_bytes = chunk  # the hook sets the trial's chunk where the one in force differs
        elif wanted_chunk is not None and wanted_chunk != chunk:
            chunk = apply_chunk(g, wanted_chunk)
        if searching:
            assert hook is not None
            apply_schedule(g, m.mode, list(g.thresholds))  # the mode's order; the search sets the classes
            hook.begin()
            if hook.searches_chunk:
                chunk = hook.chunk_bytes
            applied = {"thresholds": list(g.thresholds), "order": m.mode.order}
        else:
            applied = apply_schedule(g, m.mode, list(m.thresholds) if m.thresholds is not None else chosen)
        seconds, results = session.round()
        if searching:
            assert hook is not None
            hook.end(seconds)
        rounds += 1
        if rounds == 1:
            losses.append(session.loss(results[-1]))
        last = results
        rec = per_mode[m.name]
        if not searching:
            rec["schedule"] = {**applied, "chunk_bytes": chunk}
        times = {"measure": rec["step_times"], "trace": rec["trace_times"]}.get(phase, rec["warmup_times"])
        times.append(seconds)
        rec["round_thresholds"].append(list(g.thresholds))
        emit(
            {
                "event": "step",
                "mode": m.name,
                "phase": phase,
                "step": rounds,
                "of": None,
                "seconds": seconds,
                "warmup": phase != "measure",
                "thresholds": list(g.thresholds),
                "trial": len(trials) + 1 if searching else None,
            }
        )
        if time.monotonic() > deadline:
            raise TimeoutError(f"max_seconds {spec['max_seconds']} reached after {rounds} rounds")
        return seconds

    for i in range(max(warmup, len(rotation))):
        one(rotation[i % len(rotation)], "warmup")
    converged_round = None
    if searcher is not None and searching_mode is not None:
        # The search's own budget bounds it; the cap guards a searcher that never says converged.
        for _ in range(4 * int(spec["search"]["budget"]) + 4):
            if searcher.converged:
                break
            seconds = one(searching_mode, "search", searching=True)
            trial = {"step": len(trials), "thresholds": list(g.thresholds), "step_s": seconds}
            if hook is not None and hook.searches_chunk:
                trial["chunk_bytes"] = chunk
            trials.append(trial)
        converged_round = len(trials)
        if searcher.best is not None:
            chosen = [float(t) for t in searcher.best]
        if hook is not None and hook.searches_chunk and searcher.best_chunk_bytes is not None:
            chosen_chunk = int(searcher.best_chunk_bytes)
    # Settling rounds: a mode's first round after another mode ran pays for the change (the classes'
    # connections idle through the other modes' rounds restart from TCP's initial window, the switch's
    # queues were rebuilt), and in a fixed rotation that cost always falls on the same mode: measured on
    # the quick demo, geryon (after endhost's switch and table change) ran 0.96x paper (interval
    # [0.936, 0.979]) with the same data plane, thresholds and switch. Unmeasured rounds of the mode
    # first put it in its own steady state.
    settle = int(spec.get("settle_rounds", 1))
    for _ in range(steps):
        for m in rotation:
            for _ in range(settle):
                one(m, "settle")
            one(m, "measure")
    losses.append(session.loss(last[-1]))
    # With spec["trace_tail_s"] (the runner traces worker 0 in this cluster: the paired modes' own
    # compute, geryon.demo.runner): after the measured rounds, unmeasured rounds of the rotation, A B C
    # A ..., for that long, so the profile has each mode's rounds and no measured round the profiler.
    trace_rounds = None
    tail = spec.get("trace_tail_s")
    if tail:
        emit({"event": "trace", "seconds": float(tail)})
        wait_go()
        trace_rounds = 0
        end = time.monotonic() + float(tail)
        while trace_rounds == 0 or time.monotonic() < end:
            one(rotation[trace_rounds % len(rotation)], "trace")
            trace_rounds += 1

    search = None
    if searcher is not None:
        search = {
            "strategy": spec["search"]["strategy"],
            "live_iterations": searcher.live_iterations,
            "converged": bool(searcher.converged),
            "converged_step": converged_round,
            "best": list(searcher.best) if searcher.best is not None else None,
            "best_chunk_bytes": chosen_chunk,  # a search joint over chunk sizes only, else None
            "trials": trials,
            "median_converged_s": None,  # the measured rounds all run on the chosen thresholds
        }
    params = _wanted_params(spec, session, local_model)
    emit(
        {
            "event": "done",
            "paired": True,
            "modes": per_mode,
            "chosen": chosen,
            "search": search,
            "search_mode": searching_mode.name if searching_mode is not None else None,
            "params": params,
            "losses": losses,
            "trace_rounds": trace_rounds,
            "variables": len(session.model.trainable_variables),
            "steps_per_round": session.steps_per_round,  # every time above is per step: round / this
            "seconds": time.perf_counter() - session.started,
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.demo.chief SPEC_FILE", file=sys.stderr)
        return 2
    code = 0
    try:
        train(json.loads(Path(argv[0]).read_text()), emit)
    except BaseException as e:
        message = str(e).strip().splitlines()
        emit({"event": "error", "error": f"{type(e).__name__}: {message[0] if message else ''}"[:500]})
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC threads keep the interpreter alive past the end of main: leave at once.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
