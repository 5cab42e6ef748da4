"""`geryon check-fabric`: do the host agent config, the switch intent and a switch config agree?

Exit codes: 0 consistent; 1 mismatches (one line each: kind: where: expected ..., found ...);
2 bad input (missing or malformed file, unknown --os, --switch-config without --os).
With --peer it also reads, on this host, what the switch advertises by DCBX on each interface of the
agent config (dcbnl peer ETS/PFC/APP) and reports where it disagrees with the agent config.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from geryon.agent.config import AgentConfig, ConfigError, load_config
from geryon.errors import UsageError
from geryon.fabric.check import Mismatch, SwitchQos, check

SWITCH_OSES = ("sonic",)  # the switch configs this check can parse


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check-fabric",
        help="check that the host agent's DSCP/priority/PFC/CNP settings agree with the switches",
        description="Compares the host agent config with the switch QoS intent and, if given, a rendered "
        "or exported switch config; prints every mismatch and exits 1, or 'consistent' and exits 0.",
    )
    p.add_argument("--intent", required=True, metavar="FILE", help="the switch QoS intent (YAML)")
    p.add_argument("--agent-config", required=True, metavar="FILE", help="the host agent config (YAML)")
    p.add_argument("--switch-config", metavar="FILE", help="a switch config (SONiC: config_db JSON)")
    p.add_argument("--os", metavar="OS", help=f"the switch config's OS: {', '.join(SWITCH_OSES)}")
    p.add_argument(
        "--peer",
        action="store_true",
        help="also read what the switch advertises by DCBX (peer ETS/PFC/APP) on this host's NICs "
        "(the agent config's interfaces) and compare it with the agent config",
    )
    p.add_argument("--netns", metavar="NAME", help="with --peer: the network namespace of the interfaces")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.os is not None and args.os not in SWITCH_OSES:
        raise UsageError(f"--os: {args.os!r} is not supported; allowed: {', '.join(SWITCH_OSES)}")
    if args.switch_config is not None and args.os is None:
        raise UsageError(f"--switch-config needs --os ({', '.join(SWITCH_OSES)})")
    if args.os is not None and args.switch_config is None:
        raise UsageError("--os: only with --switch-config FILE")
    intent = _intent(args.intent)
    host = _host(args.agent_config)
    switch = _switch(args.switch_config) if args.switch_config else None
    if args.netns is not None and not args.peer:
        raise UsageError("--netns: only with --peer")
    mismatches = check(host, intent, switch)
    checked = [f"host config {args.agent_config}", f"intent {args.intent}"]
    if args.peer:
        mismatches += _peer(host, args.netns)
        checked.append(f"the switch's DCBX on {', '.join(host.interfaces)}")
    if switch is not None:
        checked.append(f"{switch.source} ({len(switch.ports)} ports)")
    if args.json:
        print(
            json.dumps(
                {
                    "consistent": not mismatches,
                    "checked": checked,
                    "mismatches": [m.as_dict() for m in mismatches],
                },
                indent=1,
            )
        )
    elif mismatches:
        print(f"{len(mismatches)} mismatch(es) between {', '.join(checked)}:")
        for m in mismatches:
            print(m.line())
    else:
        print(f"consistent: {', '.join(checked)}")
    return 1 if mismatches else 0


def _intent(path: str) -> Any:
    from geryon.fabric.intent import load_intent

    try:
        return load_intent(path)
    except ValueError as e:  # IntentError, and a missing or unreadable file
        raise UsageError(f"--intent: {e}") from None
    except OSError as e:
        raise UsageError(f"--intent: {path}: {e.strerror}") from None


def _host(path: str) -> AgentConfig:
    try:
        return load_config(path)
    except ConfigError as e:
        raise UsageError(f"--agent-config: {e}") from None


def _switch(path: str) -> SwitchQos:
    from geryon.fabric.sonic_config import SonicConfigError, load_sonic_config

    try:
        return load_sonic_config(path)
    except SonicConfigError as e:
        raise UsageError(f"--switch-config: {e}") from None


def _dcb_client(netns: str | None) -> Any:
    """The dcbnl client --peer reads with (a seam: tests put a fake kernel at its socket)."""
    from geryon.agent.dcbnl import DcbnlClient

    return DcbnlClient(netns=netns)


def _peer(host: AgentConfig, netns: str | None) -> list[Mismatch]:
    from geryon.agent.dcbnl import DcbUnsupported
    from geryon.agent.peer import peer_mismatches

    out: list[Mismatch] = []
    try:
        client = _dcb_client(netns)
    except OSError as e:
        raise UsageError(
            f"--peer: cannot open a dcbnl socket{f' in {netns}' if netns else ''}: {e}"
        ) from None
    with client:
        for ifname in host.interfaces:
            try:
                state = client.get_ieee(ifname)
            except DcbUnsupported:
                out.append(Mismatch("peer", ifname, "the switch's DCBX advertisement", "no DCB operations"))
                continue
            except OSError as e:
                raise UsageError(f"--peer: {ifname}: {e.strerror or e}") from None
            out += [
                Mismatch("peer", m.where, m.expected, m.found) for m in peer_mismatches(host, ifname, state)
            ]
    return out
