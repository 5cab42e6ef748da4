"""The demo's defaults: every knob's default (DEFAULTS; QUICK for --quick) and why, the testbed's
ports and hosts, the classes' DSCPs and QoS intent, and the chief's spec for a mode.

## Defaults and why (measured on this 2-core machine, 1 TF thread per process)

- The shape (batch 64 per worker, 2 workers, 2 PS, 200 Mbit/s links, 100 Mbit/s of background bulk
  traffic toward every worker's switch port) is the one where the simulator predicts geryon's largest
  lead over both end-host scheduling and P+S among the shapes this machine runs in the demo's time
  (bench/bench_demo_shape.py, table in bench/README.md: geryon/endhost 1.24, geryon/ps 1.23 in the
  worst of three compute estimates; the former default, batch 256 without background, 1.00 and 1.01).
  The background is what makes the difference real (SHAPE_WHY): with every PS sending every worker
  its slices in urgency order, end-host order is already near ideal; bulk traffic on the same ports
  is what no end-host scheduler can order against. The notes below are from the former default.

- vggmini computes a step (forward + backward + SGD) in 180 ms at batch 64 and about 0.7 s at
  batch 256 standalone (forward about a quarter of it, almost all in the conv layers). Its 6.4 MB
  of parameters cross each worker's link twice per step (pull, then push).
- At 200 Mbit/s a pull takes 6.4 MB / 25 MB/s = 0.26 s and the push as long, so at batch 256
  communication (0.51 s) and computation (0.7 s) are commensurate: the setting where overlapping
  the FC pull with the conv forward pass pays. Measured (this default, 40 steps, 1 run, machine
  shared): vanilla 1.39 s/step, ps 1.135, geryon 1.008 (1.13x ps), endhost 0.991, single 0.767;
  a 15-step run gave ps 1.17, geryon 1.01, endhost 1.10. The first choice, batch 64 at 100 Mbit
  (1.0 s of communication against 0.18 s of compute), was communication-bound far beyond that:
  ps 1.21, geryon 1.18, endhost 1.19 s/step, vanilla 2.12 s (one PS holds fc1's 4 MiB kernel).
  200 Mbit is the most the testbed emulates faithfully on 2 cores with MTU packets.
- 256 KiB per class queue: about 10 ms of the link, several TCP windows; larger only adds delay.
- 1 MiB slices: fc1's 4 MiB kernel becomes 4 shards, every other variable one shard per PS.
- 40 measured steps after 5 warm-up rounds (tracing, connections); the sweep search uses 10 of the
  measured steps (5 candidates, each 1 warm-up + 1 measured iteration), leaving 30 on its choice.
  At about 1 s a step, 5 modes plus 15-20 s of start-up each: 5 min 17 s measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from geryon.demo import modes as modes_mod
from geryon.threshold.simknobs import CHUNK_BYTES

GRPC_PORT = 2222  # every task on its own host (namespace): one port for all
TASK_START_S = 120.0  # TF import + server start, 4 processes on 2 cores
CHIEF_STALL_S = 240.0  # no line from the chief for this long: the mode failed

DEFAULTS: dict[str, Any] = {
    "model": "vggmini",
    "input_shape": None,  # the model's default
    "batch_size": 64,
    "workers": 2,
    "ps": 2,
    "rate_bits": 200_000_000,
    "buffer_bytes": 256 * 1024,
    "slice_bytes": 1024 * 1024,
    # The data plane's chunk inside a class (issue 14 item 1; geryon.demo.schedule.apply_chunk).
    "chunk_bytes": CHUNK_BYTES,
    "classes": 2,
    "steps": 40,
    "warmup": 5,
    "repeats": 1,
    "search": "sweep",
    # Each of the sweep's 5 candidates: one warm-up round, then the median of 3 measured rounds. One
    # round per candidate was too few for this testbed's step-time noise (tails of 1.6x the median):
    # bench/bench_search.py --noise-from (the saved demos' steps) put the chosen threshold 3.4% off the
    # optimum on average with 1, 2.0% with 3 (p90 11.3% -> 7.2%, 480 searches each); a fresh demo
    # once chose 0.278 over 0.056 on a single 1.27 s step.
    "search_budget": 20,
    "search_repeats": 3,
    "search_points": 5,
    # Search the chunk size inside a class with the thresholds (issue 40 item 3; guided and bayes,
    # over geryon.threshold.joint.CHUNK_CANDIDATES); off: the chunk stays at chunk_bytes.
    "search_chunk": False,
    "modes": list(modes_mod.MODES),
    "threads": 1,
    # Background traffic toward every worker's switch port, bits/s (0: none; None: BACKGROUND_SHARE
    # of the link rate). The default shape (SHAPE) is SHAPE_WHY's: see the docstring.
    "background_bits": None,
    # A second training job during every mode ("MODEL:BATCH", geryon.demo.secondjob), or None.
    "second_job": None,
    "settle_rounds": 1,  # paired modes: unmeasured rounds of a mode before each measured one
    # The prediction's compute profile: "cluster" (worker 0 traced in the CAPTURE_MODES run, falling
    # back to "alone" when that fails) or "alone" (each layer on an idle machine, as before issue 15).
    "profile_source": "cluster",
    # The PS-cost calibration (bench/bench_ps_costs.py's JSON) for the prediction; None: predict's
    # DEFAULT_PS_COSTS (out/bench/ps_costs.json) when it exists (`geryon demo` measures it first when
    # absent: geryon.demo.pscosts), else none (the PS is free); "none": no PS costs.
    "ps_costs": None,
    # The switch ports' measured incast efficiency (bench/bench_incast.py's JSON) for the prediction;
    # None: predict's DEFAULT_INCAST (out/bench/incast.json) when it exists (`geryon demo` measures it
    # first when absent, geryon.demo.incastcal); "none": the fluid model's full rate.
    "incast": None,
    # The training code: "custom" (the demo's Keras 3 step, one per scheduled function) or "fit"
    # (tf_keras' own train function, steps_per_execution steps per scheduled function:
    # geryon.demo.fit). Step times are per step on both.
    "api": "custom",
    "steps_per_execution": 1,
}
APIS = ("custom", "fit")
# The default background, as a share of the link rate: the simulator's pick (bench_demo_shape.py).
BACKGROUND_SHARE = 0.5
# The demo's default shape and its one line on why (printed when a run has this shape).
SHAPE = {"batch_size": 64, "workers": 2, "ps": 2, "rate_bits": 200_000_000, "background_bits": 100_000_000}
SHAPE_WHY = (
    "why this shape: background bulk traffic shares the workers' links, and only network priority can "
    "order training traffic against it (chosen with the simulator: bench/bench_demo_shape.py)"
)
PROFILE_SOURCES = ("alone", "cluster")
# Where the in-cluster profile is captured, first one the config runs: `ps` is one class, plain gRPC,
# no threshold search and no switch changes, so every traced step is the same kind of step, and its
# partitioned plan moves the bytes the Geryon modes move; vanilla is the fallback.
CAPTURE_MODES = ("ps", "vanilla")
# The single mode's cluster (one worker) is not the others' (two workers on the same 2 cores): its
# compute is traced in its own first run too (`incluster_single`), and its prediction uses that.
SINGLE_MODE = "single"
# The paired modes' cluster runs grpc+geryon (the ps mode's runs plain gRPC, whose threads compete
# with compute differently): the first paired run traces worker 0 over unmeasured rounds of its
# rotation (`incluster_paired`), and geryon, paper and endhost are predicted from that.
PAIRED = "paired"
CAPTURE_MS = 3000  # traced window: 2-3 default steps, about a hundred --quick ones
# The chief's unmeasured tail rounds last the window plus this: the trace RPC starts a little after
# the capture process says TRACING. Tracing costs the traced worker time (measured: a --quick ps run
# whose measured steps were all traced ran 1.22x slower), so it never overlaps a measured step.
TRACE_MARGIN_S = 2.0
PROFILER_PORT = 6009
# --quick (CI): the tiny model, few steps, a 3-point sweep; every mode still runs.
QUICK: dict[str, Any] = {
    "model": "tiny",
    "batch_size": 32,
    "steps": 10,
    "warmup": 2,
    "search_budget": 6,
    "search_repeats": 1,
    "search_points": 3,
    # No background: the tiny model is compute-bound (background changed nothing significant, README),
    # and CI's 2 cores need not carry the bulk stream.
    "background_bits": 0,
}


# DSCP of class i when --classes > 2 (class 0 most urgent); the default 2 classes use the fabric's
# default intent (46 urgent, 26 bulk), as geryon.tf marks by default.
CLASS_DSCP = (46, 34, 26, 18, 10, 12)


def class_dscp(classes: int) -> list[int]:
    return [46, 26] if classes == 2 else list(CLASS_DSCP[:classes])


def intent_for(classes: int, unmatched: int | None = None, weights: Sequence[int] | None = None) -> Any:
    """The switch's QoS intent: the default for 2 classes, else one strict queue per class but the
    last (DWRR), DSCPs from CLASS_DSCP. Traffic no class matches (TF's own gRPC: the chief's step
    calls; etcd) goes to the last class, or to class `unmatched`. `weights`: the last len(weights)
    classes are DWRR with these weights (shared by weight instead of strictly), the rest strict."""
    from geryon.fabric.intent import default_intent, parse_intent

    if classes == 2 and unmatched is None and weights is None:
        return default_intent()
    weights = list(weights) if weights is not None else [100]
    if not 1 <= len(weights) < classes:
        raise ValueError(f"weights: give 1 to {classes - 1} (the strict class 0 stays), got {len(weights)}")
    first_dwrr = classes - len(weights)
    dscps = class_dscp(classes)
    data = {
        "version": 1,
        "name": f"demo-{classes}class",
        "description": f"geryon demo: {classes} classes, strict priority but the last {len(weights)}",
        "classes": [
            {
                "name": f"c{i}",
                "dscp": [d],
                "priority": 5 - i if 5 - i >= 0 else 7,
                "queue": 5 - i if 5 - i >= 0 else 7,
                "lossless": False,
                "scheduler": "strict" if i < first_dwrr else "dwrr",
                **({"weight": weights[i - first_dwrr]} if i >= first_dwrr else {}),
            }
            for i, d in enumerate(dscps)
        ],
        "unmatched": f"c{classes - 1 if unmatched is None else unmatched}",
    }
    return parse_intent(data)


# Background traffic (issue 14 item 5): a host of its own sends a paced bulk stream to every worker,
# so it shares the switch ports toward the workers (where pulls arrive) with the training traffic.
# Its DSCP, 8 (CS1, the low-priority data class of RFC 4594), is in no class of the demo's intents,
# so the priority switch puts it in the unmatched (least urgent) queue; the FIFO switch mixes it in.
BACKGROUND_HOST = "bg"
BACKGROUND_DSCP = 8
BACKGROUND_MAX_S = 6 * 3600  # the sender and sink stop by themselves after this; normally by PID
BACKGROUND_PORT = 5001


def host_names(workers: int, ps: int, background: bool = False) -> tuple[str, ...]:
    hosts = (*(f"ps{i}" for i in range(ps)), *(f"worker{i}" for i in range(workers)), "chief")
    return (*hosts, BACKGROUND_HOST) if background else hosts


def task_spec(
    cluster: dict[str, list[str]], role: str, index: int, protocol: str, threads: int, **extra: Any
) -> dict[str, Any]:
    """A PS or worker task's spec (geryon.cluster.task): its place in the cluster, its protocol and
    thread limits (TASK_INTER_THREADS), and `extra` (class marks, profiler port)."""
    return {
        "cluster": cluster,
        "job": role,
        "index": index,
        "protocol": protocol,
        "intra_threads": threads,
        "inter_threads": TASK_INTER_THREADS,
        **extra,
    }


# Every task's and chief's inter-op pool: two, so one op can wait on a recv while another computes.
TASK_INTER_THREADS = 2


def chief_spec(
    cfg: dict[str, Any],
    mode: modes_mod.Mode,
    cluster: dict[str, list[str]],
    thresholds: list[float] | None,
    want_params: bool,
    rotation: list[str] | None = None,
) -> dict[str, Any]:
    """The chief's spec for `mode`, or with `rotation` for the paired modes it names (mode: the first)."""
    from geryon.threshold.joint import CHUNK_CANDIDATES

    searches = any(modes_mod.mode(n).search for n in rotation) if rotation else mode.search
    search = None
    if searches and not cfg["search"].startswith("fixed"):
        search = {
            "strategy": cfg["search"],
            "budget": cfg["search_budget"],
            "repeats": cfg["search_repeats"],
            "points": cfg["search_points"],
            "search_warmup": 1,
            "chunk_sizes": list(CHUNK_CANDIDATES) if cfg.get("search_chunk") else None,
        }
    return {
        "cluster": cluster,
        "protocol": mode.protocol,
        "model": cfg["model"],
        "input_shape": cfg["input_shape"],
        "batch_size": cfg["batch_size"],
        "partitioned": mode.partitioned,
        "slice_bytes": cfg["slice_bytes"],
        "chunk_bytes": cfg["chunk_bytes"],
        "classes_on": mode.classes,
        "classes": cfg["classes"],
        "class_dscp": class_dscp(cfg["classes"]),
        "thresholds": thresholds,
        "search": search,
        "warmup": cfg["warmup"],
        "steps": cfg["steps"],
        "rate_bits": cfg["rate_bits"],
        "want_params": want_params,
        "intra_threads": cfg["threads"],
        "inter_threads": TASK_INTER_THREADS,
        "rotation": list(rotation) if rotation else None,
        "settle_rounds": cfg["settle_rounds"],
        "api": cfg["api"],
        "steps_per_execution": cfg["steps_per_execution"],
    }
