"""`geryon plan`: communication plans for a server's links; `plan aggregation` solves paper 003's LP."""

from __future__ import annotations

import argparse
import json
from typing import Any

from geryon.plan.topology import BUILTINS
from geryon.plan.training import CLASS_COUNTS
from geryon.threshold.cli import BARRIER_HELP, FORWARD_HELP, FORWARDS
from geryon.threshold.transport_flags import add_transport_flags

AGGREGATION_HELP = (
    "The optimal gradient aggregation schedule of paper 003 (Wang, Li, Liberty, Smola, SysML'18): a convex "
    "combination of spanning trees (eq. 2; with switches, of schedules whose routes cross switches, Sec. 3) "
    "found by a linear program (SciPy's HiGHS) with column generation and a minimum-spanning-tree oracle. "
    "Prints the schedule, C(G), the bounds of Lemma 2.1 (eq. 3), and the time of one aggregation against a "
    "single best tree (eq. 1), a ring (Sec. 2: n chains of a cycle) and a PS sharded over every node "
    "(Sec. 4), in units of the gradients over a link of capacity 1. With switches it prints the links' "
    "utilisation by group beside the paper's 15:14:8 for P2.16xlarge. See docs/planning.md."
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="plan communication over a server's links (aggregation schedules)",
        description="Communication plans for a server's topology.",
    )
    plan_sub = p.add_subparsers(dest="plan_command", metavar="PLAN", required=True)
    agg = plan_sub.add_parser(
        "aggregation",
        help="optimal gradient aggregation over spanning trees (paper 003's LP)",
        description=AGGREGATION_HELP,
    )
    agg.add_argument(
        "--topology",
        required=True,
        metavar="FILE|NAME",
        help=f"a built-in ({', '.join(BUILTINS)}) or a JSON file: "
        '{"nodes": [...], "switches": [...], "edges": [{"ends": [a, b], "capacity": x, "group": g}]} '
        "(docs/planning.md)",
    )
    agg.add_argument("--json", action="store_true", help="print the report as JSON")
    agg.set_defaults(run=_run_aggregation)
    _register_training(plan_sub)


TRAINING_HELP = (
    "The settings to train a model on a cluster with, searched by the replay simulator before a run "
    "(issue 40 item 4, after dPRO's optimiser, paper 001): slice size, class count, thresholds and chunk "
    "size, and each mode's predicted step time at them with the gain and the reasons. See docs/planning.md."
)


def _register_training(plan_sub: Any) -> None:
    t = plan_sub.add_parser(
        "training",
        help="recommended slice size, classes, thresholds and chunk size, by the simulator",
        description=TRAINING_HELP,
    )
    t.add_argument(
        "--model",
        help="a built-in model (vgg19, resnet50, ...) or module:callable; with "
        "--profile TRACE: the demo model the traced worker trained",
    )
    t.add_argument(
        "--profile",
        metavar="FILE|TRACE",
        help="a saved layer profile, or a TensorFlow "
        "profiler trace of a worker (needs --model and --batch-size), as for geryon simulate",
    )
    t.add_argument("--workers", type=int, default=8, metavar="W", help="workers (default 8)")
    t.add_argument("--ps", type=int, default=8, metavar="P", help="parameter servers (default 8)")
    t.add_argument("--bandwidth", default="10gbit", help="link rate of every host (default 10gbit)")
    t.add_argument("--colocate", action="store_true", help="PS i on worker i's host (the paper's testbed)")
    t.add_argument("--barrier", action="store_true", help=BARRIER_HELP)
    t.add_argument("--forward", choices=FORWARDS, default="chain", help=FORWARD_HELP)
    t.add_argument(
        "--device", default="k40", help="compute throughput: a device name or FLOP/s (default k40)"
    )
    t.add_argument("--batch-size", type=int, default=None, metavar="N", help="per-worker batch (default 64)")
    t.add_argument("--input-shape", metavar="H,W,C", help="model input shape without the batch dimension")
    t.add_argument(
        "--max-classes",
        type=int,
        default=max(CLASS_COUNTS),
        metavar="K",
        help=f"the most priority classes the fabric gives the job, 2..8 (default {max(CLASS_COUNTS)})",
    )
    t.add_argument(
        "--slices",
        metavar="SIZES",
        help="comma-separated slice sizes to try, or none (default none,4MiB,1MiB,256KiB)",
    )
    t.add_argument(
        "--tf-inflight",
        default="3.5",
        metavar="N",
        help="TF pulls in flight per channel for the fifo and network modes (default 3.5), or all",
    )
    t.add_argument(
        "--background",
        action="append",
        metavar="RATE[:HOSTS[:DIR[:QUEUE]]]",
        help="constant background traffic on the links, as for geryon simulate (the demo's testbed: "
        "100mbit:workers:in:lowest, half its 200 Mbit/s link into every worker); repeatable",
    )
    add_transport_flags(t)
    t.add_argument("--endhost-gap", type=float, metavar="SECONDS", help="end-host's cost per transfer")
    t.add_argument("--ps-costs", metavar="FILE", help="JSON object of PS costs (as for geryon simulate)")
    t.add_argument("--json", action="store_true", help="print the plan as JSON")
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")
    t.set_defaults(run=_run_training)


def _run_training(args: argparse.Namespace) -> int:
    from geryon.errors import UsageError
    from geryon.plan.training import SLICE_CANDIDATES, plan_training, to_text
    from geryon.progress import Progress
    from geryon.tagger.partition import parse_size
    from geryon.threshold.cli import check_counts, cluster_report, load_profile, parse_knobs
    from geryon.units import parse_rate

    if not 2 <= args.max_classes <= 8:
        raise UsageError(f"--max-classes: expected 2..8, got {args.max_classes}")
    slices = SLICE_CANDIDATES
    if args.slices is not None:
        try:
            slices = tuple(
                None if v.strip().lower() == "none" else parse_size(v.strip()) for v in args.slices.split(",")
            )
        except ValueError as e:
            raise UsageError(f"--slices: {e}") from None
        if any(s is not None and s < 1 for s in slices):
            raise UsageError(f"--slices: sizes must be at least 1 byte, got {args.slices!r}")
    try:
        bandwidth = parse_rate(args.bandwidth, "--bandwidth")
    except ValueError as e:
        raise UsageError(str(e)) from None
    # The simulate flags plan training leaves at their defaults.
    for name, value in (
        ("iterations", 2),
        ("cohost_fast", False),
        ("measure", False),
        ("seed", 0),
        ("chunk_size", "256KiB"),
    ):
        setattr(args, name, value)
    check_counts(args)
    knobs = parse_knobs(args)
    knobs.pop("chunk_bytes")
    knobs["colocate"] = args.colocate
    progress = Progress("geryon plan training", enabled=not args.quiet)
    profile = load_profile(args, progress)
    with progress.step(
        f"searching {len(slices)} slice sizes x classes 2..{args.max_classes} with the simulator"
    ):
        plan = plan_training(
            profile,
            workers=args.workers,
            num_ps=args.ps,
            bandwidth_bps=bandwidth,
            knobs=knobs,
            slices=slices,
            class_counts=tuple(range(2, args.max_classes + 1)),
            say=progress.say,
        )
    if args.json:
        report = {
            **cluster_report(profile, args, bandwidth),
            "colocate": args.colocate,
            **plan.to_dict(),
        }
        print(json.dumps(report, indent=1))
    else:
        print(
            f"{profile.model}: {args.workers} workers, {args.ps} PS"
            f"{' (co-hosted)' if args.colocate else ''}, "
            f"{args.bandwidth}, batch {profile.batch_size}; profile: {profile.source}\n"
        )
        print(to_text(plan, args.workers * profile.batch_size), end="")
    return 0


def _run_aggregation(args: argparse.Namespace) -> int:
    from geryon.plan.aggregation import plan, to_json, to_text
    from geryon.plan.topology import load_topology

    report = plan(load_topology(args.topology))
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(to_text(report), end="")
    return 0
