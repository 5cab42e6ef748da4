"""`geryon simulate-jobs`: several training jobs on one fabric, per policy (geryon.threshold.sim_jobs).

Each `--job NAME:MODEL_OR_PROFILE:WORKER_HOSTS:PS_HOSTS[:THRESHOLDS]` places one job on the switch's
hosts (indices from 0, comma lists or ranges such as 0-3); MODEL_OR_PROFILE is a saved profile
(geryon.profile JSON) or a built-in model whose compute times come from FLOPs and --device. The table
gives each policy's per-job step time and slowdown against running alone, and the GPU-weighted
utilisation (Crux's metric).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tagger.map_table import MAX_CLASSES, validate_thresholds
from geryon.threshold.transport_flags import add_transport_flags, parse_transport
from geryon.units import format_rate, parse_rate

POLICIES = ("fifo", "geryon", "job-priority", "combined")  # geryon.threshold.sim_jobs.POLICIES
JOB_FORMAT = "NAME:MODEL_OR_PROFILE:WORKER_HOSTS:PS_HOSTS[:THRESHOLDS]"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate-jobs",
        help="simulate several PS training jobs sharing one fabric, per policy "
        "(fifo, geryon, job-priority, combined)",
        description="Replays several jobs' BSP iterations on one star switch (placement given) and prints "
        "each job's step time and slowdown against running alone, and the GPU-weighted utilisation, per "
        "policy: fifo (no classes), geryon (each job's classes as today), job-priority (one fabric class "
        "per job by GPU intensity) and combined (job bands with urgency classes inside).",
    )
    p.add_argument(
        "--job",
        action="append",
        required=True,
        metavar=JOB_FORMAT,
        help="one job (repeat for each): a name, a built-in model or a saved profile, its workers' and "
        "PSes' hosts (e.g. 0-3 and 8,9) and optionally its thresholds (e.g. 0.5, or 0.3,0.6; default "
        "--threshold)",
    )
    p.add_argument(
        "--hosts", type=int, metavar="N", help="hosts on the switch (default: the highest used + 1)"
    )
    p.add_argument("--bandwidth", default="10gbit", help="link rate of every host, e.g. 10gbit, 40Gbps")
    p.add_argument(
        "--policy",
        nargs="+",
        default=["all"],
        metavar="POLICY",
        help=f"one or more of {', '.join(POLICIES)}, or all (default)",
    )
    p.add_argument("--queues", type=int, default=4, metavar="K", help="the fabric's classes (default 4)")
    p.add_argument(
        "--threshold",
        default="0.5",
        metavar="T[,T...]",
        help="thresholds of a job that gives none (default 0.5: two classes)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=5,
        help="iterations every job runs in the measured window (default 5)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="per-worker batch of built-in models"
    )
    p.add_argument(
        "--device", default="k40", help="compute throughput of built-in models: a device name or FLOP/s"
    )
    add_transport_flags(p, "every policy's connections")
    p.add_argument("--seed", type=int, default=0, help="tf-verbs: the seed of its request order (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)


# --- argument checks (pure) ----------------------------------------------------------------------
def parse_policies(values: list[str]) -> tuple[str, ...]:
    if values == ["all"]:
        return POLICIES
    for v in values:
        if v not in POLICIES:
            raise UsageError(f"--policy: unknown policy {v!r}; allowed: {', '.join(POLICIES)} or all")
    return tuple(dict.fromkeys(values))


def parse_hosts(text: str, what: str) -> tuple[int, ...]:
    """'0-3,8' -> (0, 1, 2, 3, 8); UsageError naming --job and `what` otherwise."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.partition("-")
            first = int(lo)
            last = int(hi) if sep else first
            if first < 0 or last < first:
                raise ValueError
            out.extend(range(first, last + 1))
    except ValueError:
        raise UsageError(f"--job: {what} {text!r} is not a list of host indices >= 0 (e.g. 0-3,8)") from None
    return tuple(out)


def parse_thresholds(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a comma list of numbers in [0, 1]") from None
    try:
        return validate_thresholds(values, flag)
    except ValueError as e:
        raise UsageError(str(e)) from None


def parse_job(
    text: str, default_ts: tuple[float, ...]
) -> tuple[str, str, tuple[int, ...], tuple[int, ...], Any]:
    parts = text.split(":")
    if len(parts) not in (4, 5) or not all(parts[:4]):
        raise UsageError(f"--job: {text!r} is not {JOB_FORMAT}")
    name, source, workers, ps = parts[:4]
    ts = parse_thresholds(parts[4], f"--job {name}: thresholds") if len(parts) == 5 else default_ts
    return name, source, parse_hosts(workers, f"{name}'s workers"), parse_hosts(ps, f"{name}'s PS hosts"), ts


def load_profile(source: str, args: argparse.Namespace, progress: Progress) -> Any:
    """A saved profile file, else a built-in model timed from its FLOPs on --device."""
    from geryon.threshold.profile import Profile, ProfileError

    if source.endswith(".json") or Path(source).is_file():
        try:
            return Profile.load(source)
        except ProfileError as e:
            raise UsageError(f"--job: profile {source!r}: {e}") from None
        except OSError as e:
            raise UsageError(f"--job: profile {source!r}: {e.strerror or e}") from None
    from geryon.tagger.models import ModelLoadError, check_model_spec

    try:
        check_model_spec(source)
    except ModelLoadError as e:
        raise UsageError(f"--job: model {source!r}: {e}") from None
    from geryon.threshold.profiles import profile_from_model

    device: str | float = args.device
    with contextlib.suppress(ValueError):
        device = float(args.device)
    progress.say(f"building {source} and deriving compute times for {args.device}")
    try:
        return profile_from_model(source, batch_size=args.batch_size, device=device)
    except ModelLoadError as e:
        raise UsageError(f"--job: model {source!r}: {e}") from None
    except ValueError as e:
        raise UsageError(
            f"--device: {e}" if "device" in str(e) else f"--job: model {source!r}: {e}"
        ) from None


# sim_jobs' argument names -> the flags that set them (its ValueErrors start with the argument's name).
_FLAGS = (("jobs", "--job"), ("queues", "--queues"), ("hosts", "--hosts"), ("bandwidth_bps", "--bandwidth"))


def run(args: argparse.Namespace) -> int:
    policies = parse_policies(args.policy)
    try:
        bandwidth = parse_rate(args.bandwidth, "--bandwidth")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not 1 <= args.queues <= MAX_CLASSES:
        raise UsageError(f"--queues: expected 1 to {MAX_CLASSES}, got {args.queues}")
    for flag, value in (("--iterations", args.iterations), ("--batch-size", args.batch_size)):
        if value < 1:
            raise UsageError(f"{flag}: must be at least 1, got {value}")
    _, verbs_ack = parse_transport(args)
    default_ts = parse_thresholds(args.threshold, "--threshold")
    parsed = [parse_job(text, default_ts) for text in args.job]
    used = max(max(w + p) for _, _, w, p, _ in parsed) + 1
    hosts = used if args.hosts is None else args.hosts
    if hosts < used:
        raise UsageError(f"--hosts: {hosts}, but a job uses host {used - 1} (hosts are 0 to N-1)")
    from geryon.threshold.sim_jobs import JobSpec, compare_policies

    progress = Progress("geryon simulate-jobs", enabled=not args.quiet)
    profiles: dict[str, Any] = {}
    jobs = []
    for name, source, workers, ps, ts in parsed:
        if source not in profiles:
            profiles[source] = load_profile(source, args, progress)
        jobs.append(JobSpec(name, profiles[source], workers, ps, ts))
    try:
        with progress.step(f"simulating {len(jobs)} jobs under {', '.join(policies)}"):
            results = compare_policies(
                jobs,
                hosts=hosts,
                bandwidth_bps=bandwidth,
                policies=policies,
                queues=args.queues,
                iterations=args.iterations,
                transport=args.transport,
                verbs_ack_s=verbs_ack,
                seed=args.seed,
            )
    except ValueError as e:
        text = str(e)
        flag = "--job"
        for name, option in _FLAGS:
            if text.startswith(name):
                flag = option
                # "queues: ..." reads "--queues: ..."; a job's field keeps its "jobs[i] ('A').field".
                text = text if name == "jobs" else text.removeprefix(f"{name}: ")
                break
        raise UsageError(f"{flag}: {text}") from None
    report = {
        "hosts": hosts,
        "bandwidth_bps": bandwidth,
        "queues": args.queues,
        "iterations": args.iterations,
        "transport": args.transport,
        "verbs_ack_s": verbs_ack if args.transport == "tf-verbs" else None,
        "seed": args.seed,
        "jobs": [
            {
                "name": j.name,
                "model": j.profile.model,
                "profile_source": j.profile.source,
                "workers": list(j.workers),
                "ps": list(j.ps),
                "thresholds": list(j.thresholds),
            }
            for j in jobs
        ],
        "policies": {p: r.to_dict() for p, r in results.items()},
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report))
    return 0


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"{len(report['jobs'])} jobs on {report['hosts']} hosts at {format_rate(report['bandwidth_bps'])}, "
        f"{report['queues']} queues, {report['iterations']} iterations measured, "
        f"transport {report['transport']}"
    ]
    for j in report["jobs"]:
        lines.append(
            f"  {j['name']}: {j['model']} ({j['profile_source']}), workers on {_hosts(j['workers'])}, "
            f"PSes on {_hosts(j['ps'])}, thresholds {', '.join(map(str, j['thresholds'])) or 'none'}"
        )
    names = [j["name"] for j in report["jobs"]]
    width = max(12, *(len(n) + 16 for n in names))
    head = (
        f"{'policy':<14}"
        + "".join(f"{n + ' ms (slowdown)':>{width}}" for n in names)
        + f"{'weighted util':>15}"
    )
    lines += ["", head]
    for policy, r in report["policies"].items():
        cells = "".join(f"{_cell(j):>{width}}" for j in r["jobs"])
        lines.append(f"{policy:<14}{cells}{r['weighted_utilization'] * 100:>14.1f}%")
    ranked = [p for p in report["policies"] if p in ("job-priority", "combined")]
    for policy in ranked:
        r = report["policies"][policy]
        bands = "; ".join(
            f"{j['name']} rank {j['rank']} (intensity {j['intensity']:.2f}): classes -> "
            + ",".join(map(str, j["fabric_classes"]))
            for j in sorted(r["jobs"], key=lambda j: j["rank"])
        )
        lines.append(f"{policy} bands: {bands}")
    return "\n".join(lines)


def _cell(job: dict[str, Any]) -> str:
    return f"{job['step_s'] * 1e3:.1f} ({job['slowdown']:.2f}x)"


def _hosts(hosts: list[int]) -> str:
    if len(hosts) > 1 and hosts == list(range(hosts[0], hosts[-1] + 1)):
        return f"{hosts[0]}-{hosts[-1]}"
    return ",".join(map(str, hosts))
