"""`geryon simulate`: predict a cluster's iteration time per network mode, and pick a threshold.

The profile comes from a model (exact parameter sizes from the tagger, compute times from FLOPs and a
device throughput, or measured on this machine with --measure), from a saved profile file, or from a
TensorFlow profiler trace of a worker in a running cluster (--profile TRACE_DIR --model M --batch-size
N: per-layer compute as the cluster ran it, geryon.threshold.incluster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from typing import Any

from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tagger.map_table import MAX_CLASSES, default_thresholds, validate_thresholds
from geryon.tagger.partition import parse_size
from geryon.threshold.simknobs import TRANSPORTS
from geryon.threshold.transport_flags import add_transport_flags, parse_transport
from geryon.units import format_rate, parse_rate

MODES = ("fifo", "end-host", "network", "hybrid", "ideal")  # geryon.threshold.simulator.MODES
# geryon.threshold.search.ALL_STRATEGIES, best first
SEARCH_STRATEGIES = ("guided", "sweep", "bayes", "bytescheduler")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a PS cluster's iteration time per network mode "
        "(fifo, end-host, network, hybrid, ideal)",
        description="Replays one BSP iteration of W workers and P parameter servers over a star fabric and "
        "prints iteration time, throughput, GPU utilization (= scaling efficiency) and TicTac's overlap "
        "coefficient per network mode.",
    )
    # Not an argparse group: --profile TRACE_DIR takes --model too (the model the traced worker ran).
    p.add_argument(
        "--model",
        help="a built-in model (vgg19, alexnet, resnet50, ...) or module:callable; with --profile "
        "TRACE: the demo model (tiny, vggmini, ...) the traced worker trained",
    )
    p.add_argument(
        "--profile",
        metavar="FILE|TRACE",
        help="a saved layer profile (geryon.profile JSON), or a TensorFlow profiler trace of a worker "
        "(its logdir or an .xplane.pb file; needs --model and --batch-size): per-layer compute as the "
        "cluster ran it (geryon.threshold.incluster)",
    )
    p.add_argument("--workers", type=int, default=8, metavar="W", help="workers (default 8)")
    p.add_argument("--ps", type=int, default=8, metavar="P", help="parameter servers (default 8)")
    p.add_argument("--bandwidth", default="10gbit", help="link rate of every host, e.g. 10gbit, 40Gbps")
    p.add_argument(
        "--mode",
        nargs="+",
        default=["all"],
        metavar="MODE",
        help=f"one or more of {', '.join(MODES)}, or all (default)",
    )
    p.add_argument(
        "--threshold",
        nargs="+",
        metavar="T",
        help="k-1 increasing thresholds in [0, 1], or 'auto' to run the adaptive search against the "
        "simulator (default: 0.5, or evenly spaced for --classes)",
    )
    p.add_argument("--classes", type=int, metavar="K", help=f"priority classes, 2..{MAX_CLASSES} (default 2)")
    p.add_argument(
        "--search",
        default="guided",
        choices=SEARCH_STRATEGIES,
        help="strategy for --threshold auto: guided (rank with the simulator, the default), sweep (the "
        "paper's), bayes (Gaussian process), bytescheduler (the Gaussian process with ByteScheduler's "
        "tuner settings, paper 004 Sec. 4.3)",
    )
    p.add_argument(
        "--search-chunk",
        action="store_true",
        help="with --threshold auto: search hybrid's chunk size jointly with the thresholds (the search "
        "then runs in hybrid mode, the only one with chunks; the chosen size replaces --chunk-size)",
    )
    p.add_argument(
        "--chunk-candidates",
        metavar="SIZES",
        help="with --search-chunk: comma-separated chunk sizes to choose from, each 4KiB..1GiB "
        "(default 16KiB,64KiB,256KiB,1MiB,4MiB)",
    )
    p.add_argument(
        "--slice-size",
        metavar="BYTES",
        help="slicing threshold (default 4MiB: the paper's 1024K float32 elements), or 'none' "
        "to partition without slicing",
    )
    p.add_argument(
        "--no-partition",
        action="store_true",
        help="vanilla TensorFlow placement: every variable whole on one PS, round-robin, and no slicing "
        "(TensorFlow slices only through a partitioner), so it takes no --slice-size",
    )
    p.add_argument(
        "--chunk-size",
        default="256KiB",
        metavar="BYTES",
        help="hybrid mode: the preemption unit inside a class (default 256KiB, 4KiB..1GiB)",
    )
    p.add_argument(
        "--endhost-gap",
        type=float,
        metavar="SECONDS",
        help="end-host mode: the scheduler's cost per transfer (default 300e-6: ByteScheduler's measured "
        "partition overhead, paper 004 Sec. 4.1)",
    )
    p.add_argument(
        "--tf-inflight",
        default="3.5",
        metavar="N",
        help="fifo and network modes: TensorFlow pulls in flight per channel, served in a random order per "
        "iteration (default 3.5 per PS connection, measured on this machine by bench/bench_tf_order.py), "
        "or 'all' for fair sharing of every pending transfer",
    )
    add_transport_flags(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random TensorFlow order (default 0)")
    p.add_argument(
        "--ps-costs",
        metavar="FILE",
        help="JSON object of PS costs in seconds: aggregate_s_per_byte, update_s_per_byte, per_message_s, "
        "per_slice_s (each optional, default 0: a free PS)",
    )
    p.add_argument(
        "--background",
        action="append",
        metavar="RATE[:HOSTS[:DIR[:QUEUE]]]",
        help="constant background traffic on every chosen host's link: RATE (e.g. 5gbit), HOSTS workers "
        "(default), ps or all, DIR in (default), out or both, QUEUE below (default: a class below all "
        "training traffic) or lowest (in the least urgent class's queue, as the demo's testbed switch "
        "queues its unmarked background); repeatable",
    )
    p.add_argument(
        "--device", default="k40", help="compute throughput: a device name (k40, v100, ...) or FLOP/s"
    )
    p.add_argument("--barrier", action="store_true", help=BARRIER_HELP)
    p.add_argument("--forward", choices=FORWARDS, default="chain", help=FORWARD_HELP)
    p.add_argument(
        "--colocate",
        action="store_true",
        help="PS i runs on worker i's host and shares its link, as on the paper's testbed (needs --ps <= "
        "--workers; hosts whose PSes hold alike shards, and the worker-only hosts, are simulated once per "
        "group: exactly, or with --tf-inflight's random order one draw per group, an approximation whose "
        "error against every host bench_simulator.py --cohost-window measures)",
    )
    p.add_argument(
        "--cohost-fast",
        action="store_true",
        help="with --colocate: simulate one co-hosted and one worker-only host standing for all, as if "
        "every PS held alike shards (a mean-field approximation of the exact grouped path; "
        "bench/bench_simulator.py --cohost prints its error)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="per-worker batch (default 64; with --profile TRACE: required, the traced steps' batch)",
    )
    p.add_argument("--input-shape", metavar="H,W,C", help="model input shape without the batch dimension")
    p.add_argument(
        "--measure",
        action="store_true",
        help="measure per-layer compute times on this machine instead of deriving them from FLOPs",
    )
    p.add_argument("--iterations", type=int, default=2, help="BSP iterations to replay (default 2)")
    p.add_argument("--save-profile", metavar="FILE", help="also write the profile used as JSON")
    p.add_argument(
        "--trace", metavar="FILE", help="write a Chrome trace (chrome://tracing, Perfetto) of the run"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)
    # Several jobs on one fabric: its own command, next to the single-job one.
    from geryon.threshold import sim_jobs_cli

    sim_jobs_cli.register(sub)


# --- argument checks (pure) ----------------------------------------------------------------------
def parse_modes(values: Sequence[str]) -> tuple[str, ...]:
    if list(values) == ["all"]:
        return MODES
    out: list[str] = []
    for v in values:
        if v not in MODES:
            raise UsageError(f"--mode: unknown mode {v!r}; allowed: {', '.join(MODES)} or all")
        if v not in out:
            out.append(v)
    return tuple(out)


def parse_thresholds(values: Sequence[str] | None, classes: int | None) -> tuple[float, ...] | None:
    """None means auto (search); otherwise validated thresholds."""
    if classes is not None:
        try:
            defaults = default_thresholds(classes, "--classes")
        except ValueError as e:
            raise UsageError(str(e)) from None
    else:
        defaults = (0.5,)
    if not values:
        return defaults
    if [v.lower() for v in values] == ["auto"]:
        return None
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        raise UsageError(f"--threshold: {' '.join(values)!r} is not 'auto' or a list of numbers") from None
    try:
        ts = validate_thresholds(numbers, "--threshold")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if classes is not None and len(ts) != classes - 1:
        raise UsageError(f"--threshold: {classes} classes need {classes - 1} thresholds, got {len(ts)}")
    return ts


def parse_slice(text: str | None, no_partition: bool = False) -> int | None:
    if no_partition:
        if text is not None:
            raise UsageError(
                "--slice-size: --no-partition places every variable whole, so it takes no slicing"
            )
        return None
    if text is None:
        return 4 << 20
    if text.lower() == "none":
        return None
    try:
        return parse_size(text)
    except ValueError as e:
        raise UsageError(f"--slice-size: {e}") from None


BARRIER_HELP = (
    "synchronous rounds: every worker's next iteration waits for the whole update of the last one "
    "(a coordinator that joins every step, as the demo's rounds do); default: each shard's next pull "
    "starts once that shard is updated (ClusterCoordinator scheduling steps ahead)"
)


FORWARDS = ("chain", "dag")
FORWARD_HELP = (
    "the forward pass: chain (default: every layer after the one before it, in profile order) or dag "
    "(the model's dataflow from the tagger's traced graph: a branch whose parameters are in runs while "
    "another waits, as in Inception towers and ResNet shortcuts; needs --model, or a profile saved with it)"
)


def parse_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """simulate() keyword arguments of the cost and traffic flags, each checked and named."""
    from geryon.threshold.simknobs import ENDHOST_GAP_S, Background, PsCosts, check_chunk

    out: dict[str, Any] = {"seed": args.seed, "barrier": bool(getattr(args, "barrier", False))}
    out["transport"], out["verbs_ack_s"] = parse_transport(args)
    try:
        out["chunk_bytes"] = check_chunk(parse_size(args.chunk_size), "--chunk-size")
    except ValueError as e:
        raise UsageError(str(e) if str(e).startswith("--chunk-size") else f"--chunk-size: {e}") from None
    gap = ENDHOST_GAP_S if args.endhost_gap is None else args.endhost_gap
    if not (gap >= 0 and gap < float("inf")):
        raise UsageError(f"--endhost-gap: expected seconds >= 0, got {args.endhost_gap}")
    out["endhost_gap_s"] = gap
    if args.tf_inflight.lower() == "all":
        out["inflight"] = None
    else:
        try:
            inflight = float(args.tf_inflight)
        except ValueError:
            inflight = float("nan")
        if not (1 <= inflight < float("inf")):
            raise UsageError(f"--tf-inflight: expected a number >= 1 or 'all', got {args.tf_inflight!r}")
        out["inflight"] = inflight
    if args.ps_costs:
        try:
            out["ps_costs"] = PsCosts.load(args.ps_costs)
        except ValueError as e:
            raise UsageError(f"--ps-costs: {e}") from None
    background = []
    for text in args.background or ():
        parts = text.split(":")
        if len(parts) > 4:
            raise UsageError(f"--background: {text!r} is not RATE[:HOSTS[:DIR[:QUEUE]]]")
        rate = parts[0]
        hosts = parts[1] if len(parts) > 1 else "workers"
        direction = parts[2] if len(parts) > 2 else "in"
        queue = parts[3] if len(parts) > 3 else "below"
        try:
            bps = parse_rate(rate, "--background")
            background.append(Background(bps, hosts, direction, queue))
        except ValueError as e:
            raise UsageError(f"--background: {str(e).removeprefix('--background: ')}") from None
    out["background"] = tuple(background)
    return out


def check_counts(args: argparse.Namespace) -> None:
    for flag, value in (("--workers", args.workers), ("--ps", args.ps), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be at least 1, got {value}")
    if args.iterations < 1:
        raise UsageError(f"--iterations: must be at least 1, got {args.iterations}")
    if args.cohost_fast and not args.colocate:
        raise UsageError("--cohost-fast: only with --colocate (it stands in for co-hosted workers)")
    if args.colocate and args.ps > args.workers:
        raise UsageError(
            f"--colocate: PS i shares host i with worker i, so --ps must be at most --workers "
            f"(got --ps {args.ps}, --workers {args.workers})"
        )


# --- running -------------------------------------------------------------------------------------
def load_profile(args: argparse.Namespace, progress: Progress) -> Any:
    """The profile the flags name: a saved one, a profiler trace's, or the model's (FLOPs or measured);
    with `--forward dag` its forward pass is the model's dataflow."""
    if args.profile is None and args.model is None:
        raise UsageError("--model or --profile: one is required")
    if getattr(args, "forward", "chain") != "dag":
        return _load_profile(args, progress, None)
    if args.profile is not None and is_trace(args.profile):
        raise UsageError(
            "--forward dag: not with a profiler trace (its layers are the demo model's, which the tagger "
            "does not trace here); use --model M --forward dag, or a profile saved with it"
        )
    if args.profile is not None:
        profile = _load_profile(args, progress, None)
        if not profile.is_dag:
            raise UsageError(
                f"--forward dag: {args.profile} is a chain profile (its layers have no 'after' lists, and "
                "a saved profile cannot be traced again); write one with --model M --forward dag "
                "--save-profile FILE"
            )
        return profile
    from geryon.tagger import tag_model
    from geryon.tagger.cli import parse_input_shape
    from geryon.tagger.models import ModelLoadError, build_model
    from geryon.threshold.forward_dag import with_forward_dag
    from geryon.threshold.profile import ProfileError

    shape = parse_input_shape(args.input_shape)
    # One model object for the profile and the tagging: a second build would name its layers anew.
    progress.say(f"building and tracing {args.model} for its dataflow (--forward dag)")
    try:
        model = build_model(args.model, shape)
        tagging = tag_model(model, "layer", input_shape=shape)
    except (ModelLoadError, ValueError) as e:
        raise UsageError(f"--model: {e}") from None
    profile = _load_profile(args, progress, model)
    try:
        return with_forward_dag(profile, tagging)
    except ProfileError as e:
        raise UsageError(f"--forward dag: {e}") from None


def _load_profile(args: argparse.Namespace, progress: Progress, model: Any) -> Any:
    """load_profile's chain profile; `model`, where given, is args.model already built."""
    from geryon.threshold.profile import Profile, ProfileError

    if args.profile is not None and is_trace(args.profile):
        return load_trace_profile(args, progress)
    if args.profile is not None:
        if args.model is not None:
            raise UsageError(
                f"--model: not allowed with --profile {args.profile!r} (a saved profile names its model; "
                "--model goes with --profile only for a TensorFlow profiler trace)"
            )
        try:
            return Profile.load(args.profile)
        except ProfileError as e:
            raise UsageError(f"--profile: {e}") from None
    if args.batch_size is None:
        args.batch_size = 64
    from geryon.tagger.cli import parse_input_shape
    from geryon.tagger.models import ModelLoadError, check_model_spec

    try:
        check_model_spec(args.model)
    except ModelLoadError as e:
        raise UsageError(f"--model: {e}") from None
    input_shape = parse_input_shape(args.input_shape)
    if args.measure:
        from geryon.threshold.profiler import measure_profile

        progress.say(f"measuring per-layer compute of {args.model} on this machine (batch {args.batch_size})")
        try:
            return measure_profile(
                args.model if model is None else model, batch_size=args.batch_size, input_shape=input_shape
            )
        except (ValueError, ModelLoadError) as e:
            raise UsageError(f"--model: {e}") from None
    from geryon.threshold.profiles import profile_from_model

    device: str | float = args.device
    with contextlib.suppress(ValueError):
        device = float(args.device)
    progress.say(f"building {args.model} and deriving compute times for {args.device}")
    try:
        return profile_from_model(
            args.model if model is None else model,
            batch_size=args.batch_size,
            device=device,
            input_shape=input_shape,
        )
    except ModelLoadError as e:
        raise UsageError(f"--model: {e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None


def is_trace(path: str) -> bool:
    """A TF profiler trace (a logdir, or one .xplane.pb file) rather than a profile JSON."""
    from pathlib import Path

    return Path(path).is_dir() or path.endswith(".xplane.pb")


def load_trace_profile(args: argparse.Namespace, progress: Progress) -> Any:
    """The profile of a TF profiler trace (geryon.threshold.incluster): each op's traced time summed
    into the demo model's layers, per step; every failure is a UsageError naming --profile or --model."""
    from geryon.cluster.models import MODELS, ModelError, build_model, check_model
    from geryon.tagger.cli import parse_input_shape
    from geryon.threshold.incluster import find_xplane, profile_from_ops, read_trace
    from geryon.threshold.profile import ProfileError

    where = f"--profile {args.profile!r}"
    if args.model is None or args.model not in MODELS:
        got = "none" if args.model is None else repr(args.model)
        raise UsageError(
            f"--model: {where} is a TensorFlow profiler trace: --model must name the demo model the traced "
            f"worker trained, one of {', '.join(MODELS)}; got {got}"
        )
    if args.batch_size is None:
        raise UsageError(f"--batch-size: {where} is a trace: say the per-worker batch of the traced steps")
    if args.measure:
        raise UsageError(f"--measure: not with {where} (the trace is the measurement)")
    given = parse_input_shape(args.input_shape)
    if given is not None and len(given) != 3:
        raise UsageError(f"--input-shape {args.input_shape!r}: the demo models take H,W,C")
    try:
        shape = check_model(args.model, (given[0], given[1], given[2]) if given else None)
    except ModelError as e:
        raise UsageError(f"--input-shape: {e}") from None
    try:
        xplane = find_xplane(args.profile)
    except ProfileError:
        raise UsageError(
            f"{where}: no *.xplane.pb file there (a TensorFlow profiler logdir holds "
            "plugins/profile/<run>/<host>.xplane.pb)"
        ) from None
    progress.say(f"reading the trace {xplane} as {args.model}'s per-layer compute (batch {args.batch_size})")
    try:
        ops, overlap = read_trace(xplane)
        if not ops:
            raise ProfileError(f"{xplane}: the trace holds no TensorFlow op on a host plane (empty?)")
        return profile_from_ops(
            ops,
            build_model(args.model, shape),
            batch_size=args.batch_size,
            source=f"incluster:{xplane.name}",
            meta={"trace": str(xplane)},
            overlap=overlap,
        )
    except ProfileError as e:
        raise UsageError(f"--profile: {e}") from None


def parse_chunk_candidates(text: str | None, search_chunk: bool, auto: bool) -> tuple[int, ...] | None:
    """The chunk sizes of a joint search (None: no joint search); exit 2 on a bad list or misuse."""
    if not search_chunk:
        if text is not None:
            raise UsageError("--chunk-candidates: only with --search-chunk")
        return None
    if not auto:
        raise UsageError("--search-chunk: searches with the thresholds; give --threshold auto")
    from geryon.threshold.joint import CHUNK_CANDIDATES
    from geryon.threshold.search.options import chunk_sizes

    if text is None:
        return CHUNK_CANDIDATES
    try:
        sizes = [parse_size(v.strip()) for v in text.split(",")]
    except ValueError as e:
        raise UsageError(f"--chunk-candidates: {e}") from None
    try:
        return tuple(chunk_sizes("--chunk-candidates", sizes))
    except ValueError as e:
        raise UsageError(str(e)) from None


def search_threshold(
    simulate_fn: Any,
    profile: Any,
    num_classes: int,
    strategy: str,
    progress: Progress,
    chunks: Sequence[int] | None = None,
) -> tuple[tuple[float, ...], list[dict[str, Any]], int | None]:
    """Runs the adaptive searcher with the simulator standing in for live iterations.

    The tagger's urgencies and sizes let the searcher try only cuts that move a parameter; the
    guided strategy also ranks candidates with the simulator, as it would beside a real job. With
    `chunks`, the search is joint over hybrid's chunk size and runs in hybrid mode; the chosen size
    comes back third (else None).
    """
    from geryon.threshold.search import make_searcher

    options: dict[str, Any] = {
        "urgencies": [p.urgency for p in profile.params],
        "sizes": [p.bytes for p in profile.params],
    }
    if chunks is not None:
        options["chunk_sizes"] = list(chunks)

        def measure(ts: tuple[float, ...], chunk: int | None) -> float:
            return float(simulate_fn(ts, "hybrid", chunk_bytes=chunk).iteration_s)

        def predictor(ts: Any, chunk_bytes: int) -> float:
            return measure(tuple(ts), chunk_bytes)
    else:

        def measure(ts: tuple[float, ...], chunk: int | None) -> float:
            return float(simulate_fn(ts).iteration_s)

        def predictor(ts: Any) -> float:  # type: ignore[misc]
            return measure(tuple(ts), None)

    searcher = make_searcher(
        strategy, num_classes, predictor=predictor if strategy == "guided" else None, **options
    )
    trials: list[dict[str, Any]] = []
    for i in range(1, 201):  # bounded: a searcher that never converges still ends
        trial = searcher.next_trial()
        ts = tuple(trial.thresholds)
        t = measure(ts, trial.chunk_bytes)
        searcher.report(ts, t, chunk_bytes=trial.chunk_bytes)
        record: dict[str, Any] = {"iteration": i, "thresholds": list(ts), "iteration_s": t}
        where = f"thresholds {', '.join(f'{x:.3f}' for x in ts)}"
        if chunks is not None:
            record["chunk_bytes"] = trial.chunk_bytes
            where += f", chunks {trial.chunk_bytes} B"
        trials.append(record)
        progress.say(f"search iteration {i}: {where} -> {t * 1e3:.1f} ms")
        if searcher.converged:
            break
    best = searcher.best
    if best is None:
        raise UsageError("--threshold auto: the search did not settle on a threshold within 200 iterations")
    return tuple(best), trials, searcher.best_chunk_bytes


def run(args: argparse.Namespace) -> int:
    modes = parse_modes(args.mode)
    check_counts(args)
    thresholds = parse_thresholds(args.threshold, args.classes)
    slice_bytes = parse_slice(args.slice_size, args.no_partition)
    chunks = parse_chunk_candidates(args.chunk_candidates, args.search_chunk, thresholds is None)
    try:
        bandwidth = parse_rate(args.bandwidth, "--bandwidth")
    except ValueError as e:
        raise UsageError(str(e)) from None
    knobs = parse_knobs(args)
    from geryon.threshold.simulator import simulate

    progress = Progress("geryon simulate", enabled=not args.quiet)
    profile = load_profile(args, progress)
    if args.save_profile:
        profile.save(args.save_profile)

    def sim(
        ts: tuple[float, ...], mode: str = "network", trace: bool = False, chunk_bytes: int | None = None
    ) -> Any:
        chosen = dict(knobs)
        if chunk_bytes is not None:
            chosen["chunk_bytes"] = chunk_bytes
        return simulate(
            profile,
            workers=args.workers,
            num_ps=args.ps,
            bandwidth_bps=bandwidth,
            mode=mode,
            thresholds=ts,
            slice_bytes=slice_bytes,
            partition=not args.no_partition,
            colocate=args.colocate,
            cohost_fast=args.cohost_fast,
            iterations=args.iterations,
            trace=trace,
            **chosen,
        )

    search: dict[str, Any] | None = None
    if thresholds is None:
        k = args.classes or 2
        what = f"{k - 1} threshold(s)" + (" and the chunk size (hybrid)" if chunks else "")
        progress.say(f"searching {what} with the {args.search} strategy against the simulator")
        thresholds, trials, best_chunk = search_threshold(sim, profile, k, args.search, progress, chunks)
        search = {"strategy": args.search, "iterations": len(trials), "trials": trials}
        if best_chunk is not None:
            knobs["chunk_bytes"] = best_chunk
            search["chunk_candidates"] = list(chunks or ())
            search["chunk_bytes"] = best_chunk

    results = {}
    for mode in modes:
        with progress.step(f"simulating {mode}"):
            results[mode] = sim(thresholds, mode, trace=bool(args.trace) and mode == modes[-1])
    if args.trace:
        write_json(args.trace, results[modes[-1]].chrome_trace())
        progress.say(f"wrote a Chrome trace of {modes[-1]} to {args.trace}")

    report = {
        **cluster_report(profile, args, bandwidth),
        "slice_bytes": slice_bytes,
        "partition": not args.no_partition,
        "colocate": args.colocate,
        "thresholds": list(thresholds),
        "knobs": {
            k: (
                v.to_dict() if hasattr(v, "to_dict") else [b.to_dict() for b in v] if k == "background" else v
            )
            for k, v in knobs.items()
        },
        "search": search,
        "modes": {m: r.to_dict() for m, r in results.items()},
        "bound": next(iter(results.values())).bound.to_dict(),
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report, results))
    return 0


def cluster_report(profile: Any, args: argparse.Namespace, bandwidth: float) -> dict[str, Any]:
    """The JSON report's head: the model and profile, and the cluster it ran on (simulate, plan)."""
    return {
        "model": profile.model,
        "profile_source": profile.source,
        "batch_size": profile.batch_size,
        "forward": "dag" if profile.is_dag else "chain",
        "workers": args.workers,
        "ps": args.ps,
        "bandwidth_bps": bandwidth,
    }


def write_json(path: str, data: Any) -> None:
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError as e:
        raise UsageError(f"cannot write {path!r}: {e.strerror or e}") from None


def format_report(report: dict[str, Any], results: dict[str, Any]) -> str:
    slicing = (
        "no partition"
        if not report["partition"]
        else (f"slices <= {report['slice_bytes']} B" if report["slice_bytes"] else "partition, no slicing")
    )
    lines = [
        f"{report['model']}: {report['workers']} workers, {report['ps']} PS"
        f"{' (co-hosted with workers)' if report['colocate'] else ''}, "
        f"{format_rate(report['bandwidth_bps'])}, batch {report['batch_size']}, {slicing}",
        f"profile: {report['profile_source']}; thresholds: {', '.join(map(str, report['thresholds']))}",
    ]
    k = report["knobs"]
    costs = k.get("ps_costs")
    transport = k.get("transport", TRANSPORTS[0])
    carried = {
        "tf-grpc": f"TF pulls in flight: {k['inflight'] if k['inflight'] is not None else 'all'}",
        "tf-verbs": f"transport tf-verbs (ACK round trip {k.get('verbs_ack_s', 0) * 1e6:.2f} us)",
        "geryon": "transport geryon (fifo and network on this data plane)",
    }[transport]
    lines.append(
        f"{carried} (seed {k['seed']}); "
        f"end-host gap {k['endhost_gap_s'] * 1e6:.0f} us; hybrid chunks {k['chunk_bytes']} B; "
        + ("PS costs " + ", ".join(f"{n}={v:g}" for n, v in costs.items()) if costs else "PS free")
        + "".join(
            f"; background {format_rate(b['rate_bps'])} {b['direction']} at {b['hosts']}"
            for b in k["background"]
        )
    )
    if report["search"]:
        s = report["search"]
        chunk = f" (chunk size {s['chunk_bytes']} B, searched jointly)" if s.get("chunk_bytes") else ""
        lines.append(f"search: {s['strategy']} settled after {s['iterations']} simulated iterations{chunk}")
    lines.append("")
    header = (
        f"{'mode':<9} {'iteration':>11} {'images/s':>10} {'GPU util':>9} {'alpha':>6} "
        f"{'N (comm)':>10} {'C (comp)':>10} {'x bound':>8}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    imgs = report["workers"] * report["batch_size"]
    bound = report["bound"]
    for mode, r in results.items():
        lines.append(
            f"{mode:<9} {r.iteration_s * 1e3:>9.1f}ms {imgs / r.iteration_s:>10.1f} "
            f"{r.gpu_utilization:>8.1%} {r.alpha:>6.2f} {r.comm_s * 1e3:>8.1f}ms {r.compute_s * 1e3:>8.1f}ms "
            f"{r.iteration_s / bound['seconds']:>8.3f}"
        )
    b = bound["seconds"]
    lines.append(
        f"{'bound':<9} {b * 1e3:>9.1f}ms {imgs / b:>10.1f} {min(1.0, bound['compute_s'] / b):>8.1%} "
        f"{'':>6} {'':>10} {bound['compute_s'] * 1e3:>8.1f}ms {1.0:>8.3f}"
    )
    lines.append("")
    lines.append(
        f"bound = no schedule is faster: the larger of compute alone ({bound['compute_s'] * 1e3:.1f} ms) "
        f"and the busiest port busy for the whole iteration ({bound['port_s'] * 1e3:.1f} ms, "
        f"{bound['port']}); 'ideal' is a perfect priority order, not a bound."
    )
    lines.append(
        "GPU util = compute / iteration time = scaling efficiency against one worker without communication."
    )
    return "\n".join(lines)
