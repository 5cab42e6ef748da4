"""`geryon testbed up|down|status`: the emulated cluster from the command line.

As root `up` leaves a persistent testbed (namespaces under /run/netns, state under
/run/geryon/testbed) until `down`. Without root the testbed can only live inside an unprivileged
user namespace, which ends with the command: `up --exec CMD...` re-executes itself there, brings the
testbed up, runs CMD and takes it down. Exit codes: 0 ok; 1 the testbed failed; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from geryon import units
from geryon.errors import UsageError
from geryon.progress import Progress

_FLAGS = {
    "hosts": "--hosts",
    "rate_bits": "--rate",
    "buffer_bytes": "--buffer",
    "burst_bytes": "--burst",
    "switch": "--switch",
    "run_id": "--run-id",
}


def register(sub: Any) -> None:
    tb = sub.add_parser(
        "testbed",
        help="an emulated cluster: host namespaces on a software switch with priority queues by DSCP",
        description="Builds (up), lists (status) and removes (down) an emulated cluster on this machine: "
        "one network namespace per host and one switch namespace (a bridge), veth links shaped at the "
        "link rate, strict-priority queues by DSCP (or one FIFO) on every switch port, host queues as "
        "the host agent sets them.",
    )
    tsub = tb.add_subparsers(dest="testbed_command", metavar="ACTION", required=True)

    p = tsub.add_parser("up", help="build a testbed (idempotent for an existing --run-id)")
    p.add_argument("--hosts", default="ps0,ps1,worker0,worker1,chief", help="comma-separated host names")
    p.add_argument("--rate", default="100mbit", help="link rate of every port (default 100mbit)")
    p.add_argument("--buffer", default="256kib", help="queue buffer per class queue (default 256kib)")
    p.add_argument("--burst", default=None, help="HTB burst (default: about 4 ms of the link, 16-64 KiB)")
    p.add_argument("--switch", default="priority", help="priority (queues by DSCP) or fifo (one queue)")
    p.add_argument("--no-host-queues", action="store_true", help="hosts get one FIFO at the link rate")
    p.add_argument("--offloads", action="store_true", help="keep TSO/GSO/GRO on (rates above ~200 Mbit)")
    p.add_argument("--run-id", default=None, help="run id (1-10 lowercase letters/digits); default: new")
    p.add_argument("--json", action="store_true", help="print the testbed as JSON")
    p.add_argument(
        "--exec",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="run CMD with the testbed up, then take it down (the way to use it without root); "
        "CMD sees GERYON_TESTBED_RUN and GERYON_TESTBED_STATE",
    )
    p.set_defaults(run=run_up)

    p = tsub.add_parser("down", help="take a testbed down (default: every run, stale ones included)")
    p.add_argument("--run-id", default=None, help="only this run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_down)

    p = tsub.add_parser("status", help="list the testbeds: namespaces and processes alive")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_status)


def _spec(args: argparse.Namespace) -> Any:
    from geryon.agent.config import ConfigError, parse_size
    from geryon.testbed.spec import SpecError, TestbedSpec

    try:
        rate = round(units.parse_rate(args.rate, "--rate"))
        buffer = parse_size(args.buffer, "--buffer")
        burst = parse_size(args.burst, "--burst") if args.burst is not None else None
    except (ValueError, ConfigError) as e:
        raise UsageError(str(e)) from None
    hosts = tuple(h.strip() for h in args.hosts.split(",")) if args.hosts.strip() else ()
    try:
        return TestbedSpec(
            hosts=hosts,
            rate_bits=rate,
            buffer_bytes=buffer,
            burst_bytes=burst,
            switch=args.switch,
            host_queues=not args.no_host_queues,
            offloads=args.offloads,
            run_id=args.run_id,
        )
    except SpecError as e:
        raise UsageError(_flag_message(str(e))) from None


def _flag_message(msg: str) -> str:
    """'hosts[2]: ...' -> '--hosts: ...': errors name the flag the user typed."""
    m = re.match(r"^([a-z_]+)(\[\d+\])?: ", msg)
    if m and m.group(1) in _FLAGS:
        return f"{_FLAGS[m.group(1)]}: {msg[m.end() :]}"
    return msg


def _argv(args: argparse.Namespace, spec: Any) -> list[str]:
    """The same `testbed up` again, for the re-execution inside a user namespace."""
    out = ["testbed", "up", "--hosts", ",".join(spec.hosts), "--rate", str(spec.rate_bits)]
    out += ["--buffer", str(spec.buffer_bytes), "--switch", spec.switch]
    if args.burst is not None:
        out += ["--burst", str(spec.burst_bytes)]
    if not spec.host_queues:
        out.append("--no-host-queues")
    if spec.offloads:
        out.append("--offloads")
    if spec.run_id:
        out += ["--run-id", spec.run_id]
    if args.json:
        out.append("--json")
    return [*out, "--exec", *args.exec]


def describe(tb: Any) -> dict[str, Any]:
    from geryon.testbed import state

    return {
        "id": tb.run_id,
        "hosts": {
            h.name: {"netns": h.netns, "ifname": h.ifname, "address": h.address} for h in tb.hosts.values()
        },
        "switch_netns": tb.switch_netns,
        "switch": tb.switch_mode,
        "rate_bits": tb.spec.rate_bits,
        "buffer_bytes": tb.spec.buffer_bytes,
        "burst_bytes": tb.spec.burst,
        "host_queues": tb.spec.host_queues,
        "offloads": tb.spec.offloads,
        "state_file": str(state.path(tb.run_id)),
    }


def run_up(args: argparse.Namespace) -> int:
    from geryon.testbed import TestbedError, up, userns

    spec = _spec(args)
    if args.exec is not None and not args.exec:
        raise UsageError("--exec: give the command to run with the testbed up (it must come last)")
    if userns.needed():
        if args.exec is None:
            raise UsageError(
                "without root a testbed lives in an unprivileged user namespace and only as long as one "
                "command: use `geryon testbed up ... --exec CMD...` (or run as root for a persistent one)"
            )
        try:
            userns.reexec(_argv(args, spec))
        except TestbedError as e:
            print(f"geryon testbed: error: {e}", file=sys.stderr)
            return 1
    progress = Progress("geryon testbed")
    if args.exec is not None:
        # A SIGTERM between the testbed being marked ready and _exec_with's handler would kill this
        # process with the default action and leave the testbed up: hold it until the handler is in.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        tb = up(spec, progress)  # inside a user namespace it makes /run private first
    except BaseException as e:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        if isinstance(e, TestbedError):
            print(f"geryon testbed: error: {e}", file=sys.stderr)
            return 1
        raise
    info = describe(tb)
    if args.exec is None:
        _print_up(info, args.json)
        return 0
    return _exec_with(tb, info, args.exec, args.json, progress)


def _print_up(info: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(info, indent=1, sort_keys=True))
        return
    print(
        f"testbed {info['id']}: switch {info['switch']} in {info['switch_netns']}, "
        f"{units.format_rate(info['rate_bits'])} links"
    )
    for name, h in info["hosts"].items():
        print(f"  {name:<8} {h['address']:<12} ip netns exec {h['netns']} ...")


def _exec_with(tb: Any, info: dict[str, Any], cmd: list[str], as_json: bool, progress: Progress) -> int:
    from geryon.testbed import state

    child: subprocess.Popen[bytes] | None = None
    deferred = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal deferred
        if child is None:
            # Not started, or inside Popen: raising there would orphan a forked child (it keeps our
            # stderr open, so whoever reads it waits for the command); stop once it is ours to end.
            deferred = True
            return
        raise KeyboardInterrupt  # unwinds to the finally below, which takes the testbed down

    old = signal.signal(signal.SIGTERM, stop)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a held SIGTERM lands here
        _print_up(info, as_json)
        sys.stdout.flush()
        env = dict(os.environ, GERYON_TESTBED_RUN=tb.run_id, GERYON_TESTBED_STATE=str(state.state_dir()))
        try:
            child = subprocess.Popen(cmd, env=env)
        except OSError as e:
            print(f"geryon testbed: error: --exec: cannot run {cmd[0]!r}: {e.strerror}", file=sys.stderr)
            return 127
        if deferred:
            raise KeyboardInterrupt
        return child.wait()
    finally:
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        signal.signal(signal.SIGTERM, old)
        tb.down()
        progress.say(f"run {tb.run_id}: down")


def run_down(args: argparse.Namespace) -> int:
    from geryon.testbed import SpecError, TestbedError, down

    try:
        ids = down(args.run_id)
    except SpecError as e:
        raise UsageError(_flag_message(str(e))) from None
    except (TestbedError, PermissionError) as e:
        print(f"geryon testbed: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"down": ids}))
    elif ids:
        print(f"took down: {', '.join(ids)}")
    else:
        print("nothing to take down")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from geryon.testbed import status

    runs = status()
    if args.json:
        print(json.dumps(runs, indent=1, sort_keys=True))
        return 0
    if not runs:
        print("no testbed")
        return 0
    print(f"{'run':<11} {'mode':<6} {'switch':<8} {'namespaces':>10} {'processes':>9}  hosts")
    for r in runs:
        ns = f"{r['namespaces_alive']}/{len(r['namespaces'])}"
        ps = f"{r['processes_alive']}/{r['processes']}"
        mode, switch, hosts = r["mode"] or "-", r["switch"] or "-", ",".join(r["hosts"])
        print(f"{r['id']:<11} {mode:<6} {switch:<8} {ns:>10} {ps:>9}  {hosts}")
    return 0
