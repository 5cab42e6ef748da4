"""The host agent's one-shot commands (plan, apply, verify, restore) and what they share with the
daemon (reading the config, checking --netns, opening the drivers). Arguments: geryon.agent.cli.

Exit codes: 0 ok; 1 drift (verify) or a failed apply/restore (rolled back); 2 bad input (config,
arguments, journal), with nothing applied.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from geryon.agent.config import AgentConfig, ConfigError, load_config
from geryon.agent.engine import (
    EngineError,
    Slot,
    apply_plan,
    drift,
    make_plan,
    plan_json,
    render_plan,
    restore,
)
from geryon.agent.journal import Busy, Journal, JournalError, exclusive
from geryon.errors import UsageError
from geryon.progress import Progress

NETNS_DIR = "/run/netns"


AGENT_EXTRA = "the host agent needs its dependencies: pip install 'geryon[agent]'"


def read_config(path: str) -> AgentConfig:
    try:
        return load_config(path)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except ImportError as e:
        raise UsageError(f"{AGENT_EXTRA} ({e})") from None


def check_netns(name: str | None) -> None:
    if name is not None and not os.path.exists(os.path.join(NETNS_DIR, name)):
        raise UsageError(f"--netns: no network namespace {name!r} (see `ip netns list`)")


@contextmanager
def opened_slots(config: AgentConfig | None, args: argparse.Namespace) -> Iterator[list[Slot]]:
    from geryon.agent.driver import DriverError

    check_netns(args.netns)
    try:
        from geryon.agent.registry import open_slots  # the drivers: the agent extra's pyroute2

        slots, close = open_slots(config, netns=args.netns, root=args.root)
    except DriverError as e:
        raise UsageError(str(e)) from None
    except ImportError as e:
        raise UsageError(f"{AGENT_EXTRA} ({e})") from None
    try:
        yield slots
    finally:
        close()


def _plan(config: AgentConfig, slots: list[Slot], journal: Journal) -> Any:
    try:
        return make_plan(slots, config, journal)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def run_plan(args: argparse.Namespace) -> int:
    config = read_config(args.config)
    journal = _journal(args.journal)
    with opened_slots(config, args) as slots:
        try:
            plan = _plan(config, slots, journal)
        except EngineError as e:
            print(f"geryon agent plan: failed: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(plan_json(plan), indent=1, sort_keys=True))
    else:
        print(render_plan(plan))
    return 0


def run_apply(args: argparse.Namespace) -> int:
    config = read_config(args.config)
    progress = Progress("geryon agent apply", enabled=not args.quiet)
    _journal(args.journal)  # a bad journal is bad input: refuse it before opening any driver
    with opened_slots(config, args) as slots:
        try:
            with exclusive(args.journal):
                journal = _journal(args.journal)  # as it is now that we hold the lock
                plan = _plan(config, slots, journal)
                for s in plan.skipped:
                    progress.say(f"skip {s.target}: {s.reason}")
                apply_plan(plan, slots, journal, progress.say)
        except (EngineError, Busy) as e:  # ApplyError included: rolled back, the message says so
            print(f"geryon agent apply: failed: {e}", file=sys.stderr)
            return 1
    print(render_plan(plan, title="applied changes"))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    config = read_config(args.config)
    journal = _journal(args.journal)
    with opened_slots(config, args) as slots:
        try:
            plan = _plan(config, slots, journal)
        except EngineError as e:
            print(f"geryon agent verify: failed: {e}", file=sys.stderr)
            return 1
        peer = peer_lines(config, slots)
        # dcbx: lld_managed: the NIC's DCB is the LLDP agent's, verified here, never written. A
        # disagreement is the host not being as configured (exit 1), though no apply can repair it.
        lines = drift(plan) + driver_lines(config, slots, "lld_report")
    if args.json:
        print(json.dumps({"drift": lines, "in_sync": list(plan.in_sync), "peer": peer}, indent=1))
    else:
        if lines:
            print(f"drift on {len(lines)} target(s):")
            for line in lines:
                print(f"  {line}")
        else:
            print(f"in sync: {len(plan.in_sync)} target(s) as configured")
        if peer:
            # The host may be exactly as configured and the switch not: say so, but it is not host drift.
            print(f"the switch disagrees on {len(peer)} point(s) (geryon check-fabric --peer):")
            for line in peer:
                print(f"  {line}")
    return 1 if lines else 0


def peer_lines(config: AgentConfig, slots: Any) -> list[str]:
    """The switch-vs-config mismatches the DCB driver can read (nothing where no NIC reports peer state)."""
    return driver_lines(config, slots, "peer_report")


def driver_lines(config: AgentConfig, slots: Any, method: str) -> list[str]:
    out: list[str] = []
    for slot in slots:
        report = getattr(slot.driver, method, None)
        if report is not None:
            out += report(config)
    return out


def run_restore(args: argparse.Namespace) -> int:
    progress = Progress("geryon agent restore", enabled=not args.quiet)
    journal = _journal(args.journal)
    if not journal.entries:
        print(f"nothing to restore: the journal {args.journal} is empty (Geryon never applied here)")
        return 0
    with opened_slots(None, args) as slots:
        try:
            with exclusive(args.journal):
                plan = restore(slots, _journal(args.journal), progress.say)
        except (EngineError, Busy) as e:
            print(f"geryon agent restore: failed: {e}", file=sys.stderr)
            return 1
    print(render_plan(plan, title="restored targets"))
    return 0


def _journal(path: str) -> Journal:
    try:
        return Journal.load(path)
    except JournalError as e:
        raise UsageError(f"--journal: {e}") from None
