"""`geryon render-switch`: the QoS intent rendered for a switch OS, printed, written, or (Linux) applied.

  geryon render-switch --os sonic|cumulus|eos|linux [--intent FILE] [--ports LIST] [--out FILE] [--check]
  geryon render-switch --os sonic --base CONFIG_DB.json ...   (render against the switch's running config)
  geryon render-switch --os linux --apply [--netns NS] --ports LIST [--rate R] [--buffer B] [--burst B]

Exit codes: 0 ok; 1 --apply wrote the ports but the kernel reports other queues; 2 bad input (intent,
unknown OS, port selection, an intent the OS cannot express, a port that does not exist), with nothing
written.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from geryon import units
from geryon.errors import UsageError
from geryon.fabric.intent import OSES, IntentError, QosIntent, default_intent, load_intent


def register(sub: Any) -> None:
    p = sub.add_parser(
        "render-switch",
        help="render the vendor-neutral QoS intent for a switch OS (SONiC, Cumulus, EOS, Linux)",
        description="Renders the QoS intent (DSCP -> priority -> queue, lossless classes, strict queues, "
        "ECN, PFC watchdog) as a switch configuration: SONiC config_db JSON with an ordered apply-patch, "
        "Cumulus NVUE commands, Arista EOS CLI, or tc commands for the Linux software switch, which "
        "--apply writes and verifies.",
    )
    p.add_argument("--intent", metavar="FILE", help="the QoS intent (YAML); default: Geryon's two classes")
    p.add_argument("--os", required=True, metavar="OS", help=f"the switch OS: {', '.join(OSES)}")
    p.add_argument(
        "--ports",
        metavar="LIST",
        help="ports to configure, overriding the intent's ports.<os> (e.g. Ethernet0-124:4, swp1-32, "
        "Ethernet1/1-32, s-ps0,s-wk0)",
    )
    p.add_argument("--out", metavar="FILE", help="write the config here instead of printing it")
    p.add_argument(
        "--base",
        metavar="FILE",
        help="SONiC only: the switch's running config_db (`show runningconfiguration all`); the patch "
        "and rows are rendered against it so `config load` and `config apply-patch` end equal",
    )
    p.add_argument(
        "--check", action="store_true", help="validate and render, print a one-line summary, write nothing"
    )
    linux = p.add_argument_group("linux software switch")
    linux.add_argument(
        "--apply", action="store_true", help="write the queues to the ports and read them back"
    )
    linux.add_argument("--netns", metavar="NS", help="the switch's network namespace (default: this one)")
    linux.add_argument("--rate", default="100mbit", help="each port's link rate (default: %(default)s)")
    linux.add_argument("--buffer", default="256kib", help="each class queue's buffer (default: %(default)s)")
    linux.add_argument("--burst", default="64kib", help="HTB burst (default: %(default)s)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.os not in OSES:
        raise UsageError(f"--os: {args.os!r} is not a switch OS; allowed: {', '.join(OSES)}")
    if args.os != "linux":
        for flag in ("apply", "netns"):
            if getattr(args, flag):
                raise UsageError(f"--{flag}: only with --os linux (the one switch Geryon applies itself)")
    if args.base and args.os != "sonic":
        raise UsageError("--base: only with --os sonic (a running config_db to render against)")
    if args.apply and (args.out or args.check):
        raise UsageError("--apply: not with --out or --check")
    intent = _intent(args.intent)
    try:
        if args.os == "linux":
            return _linux(intent, args)
        from geryon.fabric.render import render

        if args.base:
            from geryon.fabric.render import sonic

            text = sonic.render(intent, args.ports, _base(args.base))
        else:
            text = render(intent, args.os, args.ports)
    except IntentError as e:
        raise UsageError(str(e)) from e
    return _emit(text, args, f"{args.os} config for intent {intent.name!r}")


def _intent(path: str | None) -> QosIntent:
    if path is None:
        return default_intent()
    try:
        return load_intent(path)
    except IntentError as e:
        raise UsageError(str(e)) from e


def _base(path: str) -> dict[str, Any]:
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--base: cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"--base: {path} is not JSON ({e}); expected the switch's config_db") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f"--base: {path} is not a config_db (an object of tables, each an object of keys)")
    return data


def _size(text: str, flag: str) -> int:
    from geryon.agent.config import ConfigError, parse_size

    try:
        return parse_size(text, flag)
    except ConfigError as e:
        raise UsageError(str(e)) from e


def _linux(intent: QosIntent, args: argparse.Namespace) -> int:
    from geryon.fabric.render.linux import port_trees, tc_commands

    try:
        rate = int(units.parse_rate(args.rate, "--rate"))
    except ValueError as e:
        raise UsageError(str(e)) from e
    trees = port_trees(
        intent,
        args.ports,
        rate_bits=rate,
        buffer_bytes=_size(args.buffer, "--buffer"),
        burst_bytes=_size(args.burst, "--burst"),
    )
    if not args.apply:
        return _emit(
            tc_commands(trees), args, f"linux queues for intent {intent.name!r} on {len(trees)} ports"
        )
    from geryon.agent.driver import DriverError
    from geryon.fabric.render.linux import ApplyError, apply_ports

    try:
        apply_ports(trees, netns=args.netns)
    except DriverError as e:
        raise UsageError(str(e)) from e
    except ApplyError as e:
        print(f"geryon render-switch: {e}", file=sys.stderr)
        return 1
    where = f" in {args.netns}" if args.netns else ""
    print(f"applied intent {intent.name!r} to {len(trees)} ports{where}: {', '.join(trees)} (verified)")
    return 0


def _emit(text: str, args: argparse.Namespace, what: str) -> int:
    if args.check:
        lines = sum(1 for line in text.splitlines() if line.strip())
        print(f"ok: {what}: {lines} lines")
        return 0
    if args.out:
        _write_atomically(Path(args.out), text)
        print(f"wrote {what} to {args.out}", file=sys.stderr)
        return 0
    sys.stdout.write(text)
    return 0


def _write_atomically(path: Path, text: str) -> None:
    # A half-written switch config must never be picked up by a rollout.
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    except OSError as e:
        raise UsageError(f"--out: cannot write in {path.parent}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"--out: cannot write {path}: {e.strerror}") from None
