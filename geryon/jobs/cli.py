"""`geryon controller` (the bands controller) and `geryon jobs list|register` (the cluster view)."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from typing import Any

from geryon.errors import UsageError
from geryon.jobs import bands, etcd, keys
from geryon.jobs.chief import JobRegistration
from geryon.jobs.controller import Controller
from geryon.jobs.registration import parse_record
from geryon.progress import Progress
from geryon.tagger.map_table import MAX_CLASSES


def _etcd_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--etcd",
        required=True,
        metavar="URL[,URL...]",
        help="etcd endpoints (every member of the cluster); http only to loopback, else https",
    )
    p.add_argument(
        "--prefix", default=keys.DEFAULT_PREFIX, help=f"key prefix (default {keys.DEFAULT_PREFIX})"
    )
    p.add_argument("--cacert", metavar="FILE", help="CA (PEM) that etcd's server certificate chains to")
    p.add_argument("--cert", metavar="FILE", help="client certificate (PEM) for etcd's TLS client auth")
    p.add_argument("--key", metavar="FILE", help="the client certificate's key (PEM)")


def _client(args: argparse.Namespace) -> etcd.Client:
    try:
        keys.norm_prefix(args.prefix)
    except ValueError as e:
        raise UsageError(f"--prefix: {e}") from None
    return etcd.Client(args.etcd, cafile=args.cacert, certfile=args.cert, keyfile=args.key)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "controller",
        help="share the fabric's classes out among jobs (bands, by GPU intensity), through etcd",
        description="Elected through etcd (run several: one leads, the others stand by). Reads every job's "
        "registration, ranks the jobs by GPU intensity, maps each job's classes into the fabric's K queues "
        "and writes the bands back in one transaction. No network API of its own: it talks only to etcd.",
    )
    _etcd_args(p)
    p.add_argument(
        "--queues", type=int, required=True, metavar="K", help=f"the fabric's classes, 1..{MAX_CLASSES}"
    )
    p.add_argument("--ttl", type=int, default=2, help="leader lease, seconds (a standby takes over after it)")
    p.add_argument("--interval", type=float, default=0.25, help="seconds between rounds (default 0.25)")
    p.add_argument(
        "--hosts", default="", metavar="H[,H...]", help="hosts known besides those agents registered"
    )
    p.add_argument("--name", help="this controller's name in the election (default host:pid)")
    p.add_argument(
        "--hysteresis",
        type=float,
        default=bands.HYSTERESIS,
        metavar="FRACTION",
        help=f"a job passes one ranked above it only with an intensity this fraction higher (default "
        f"{bands.HYSTERESIS}: 5%%; 0: rank by intensity alone), so jobs of nearly equal intensity do not "
        "swap bands back and forth",
    )
    p.set_defaults(run=run_controller)

    j = sub.add_parser("jobs", help="the cluster view in etcd: jobs, their intensities and bands")
    jsub = j.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    ls = jsub.add_parser("list", help="every job, its intensity and band; refusals; the leader")
    _etcd_args(ls)
    ls.add_argument("--json", action="store_true", help="print the bands record as JSON")
    ls.set_defaults(run=run_list)
    reg = jsub.add_parser(
        "register", help="register a job record (JSON file) and keep its lease until stopped"
    )
    _etcd_args(reg)
    reg.add_argument("record", help="the job record (docs/jobs.md), a JSON file or - for stdin")
    reg.add_argument(
        "--ttl", type=int, default=3, help="lease, seconds: the band is freed this long after a crash"
    )
    reg.set_defaults(run=run_register)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def run_controller(args: argparse.Namespace) -> int:
    if args.ttl < 2:
        raise UsageError("--ttl: at least 2 s (etcd's shortest lease is about 1.5 s)")
    if not 0.05 <= args.interval <= args.ttl / 2:
        raise UsageError(f"--interval: {args.interval}; give 0.05 to ttl/2 ({args.ttl / 2}) seconds")
    progress = Progress("geryon controller")
    try:
        controller = Controller(
            _client(args),
            args.queues,
            prefix=args.prefix,
            ttl=args.ttl,
            interval=args.interval,
            hosts=[h for h in args.hosts.split(",") if h],
            name=args.name,
            log=progress.say,
            hysteresis=args.hysteresis,
        )
    except ValueError as e:
        raise UsageError(f"--{e!s}" if str(e).startswith("hysteresis:") else str(e)) from None
    stop = _stop_on_signals()
    progress.say(f"{controller.name}: {args.queues} queues, etcd {','.join(controller.client.endpoints)}")
    controller.run(stop)
    with contextlib.suppress(etcd.EtcdError):
        controller.resign()
    return 0


def run_list(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        kv = client.get(keys.bands_all(args.prefix))
        leader = client.get(keys.leader(args.prefix))
    except etcd.EtcdError as e:
        raise UsageError(str(e)) from None
    record = json.loads(kv.value) if kv else {}
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
        return 0
    print(f"leader: {leader.value.decode() if leader else 'none'}")
    if not record:
        print("no bands written yet")
        return 0
    age = time.time() - float(record.get("written_at", time.time()))
    print(f"generation {record['generation']}, {record['queues']} queues, written {age:.0f} s ago")
    view = {j: bands.Band(j, v["rank"], tuple(v["classes"])) for j, v in record.get("jobs", {}).items()}
    for line, band in zip(bands.describe(view), sorted(view.values(), key=lambda b: b.rank), strict=True):
        info = record["jobs"][band.job]
        print(f"{line}  (intensity {info['intensity']:.3f}, hosts {', '.join(info['hosts'])})")
    for job, error in sorted(record.get("refused", {}).items()):
        print(f"refused {job}: {error}")
    return 0


def run_register(args: argparse.Namespace) -> int:
    if args.record == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.record) as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"record: {e}") from None
    record = parse_record(text)
    progress = Progress("geryon jobs register")
    stop = _stop_on_signals()
    with JobRegistration(_client(args), record, ttl=args.ttl, prefix=args.prefix) as reg:
        progress.say(f"{record.job}: registered (lease {reg.lease:x}, ttl {args.ttl} s)")
        shown = None
        while not stop.wait(0.5):
            try:
                verdict = reg.verdict()
            except etcd.EtcdError as e:
                verdict = {"error": str(e)}
            except UsageError as e:
                verdict = {"refused": str(e)}
            if verdict != shown:
                progress.say(f"{record.job}: {verdict or 'waiting for a controller'}")
                shown = verdict
            if reg.error and "lease lost" in reg.error:
                progress.say(f"{record.job}: {reg.error}")
                return 1
    return 0
