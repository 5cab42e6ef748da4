"""The Linux software switch (the emulated testbed's switch ports): HTB trees in the host agent's
driver shape, written and verified with geryon.agent.linux_driver.LinuxDriver, or printed as `tc` lines.

Mapping of the intent onto one egress port (see geryon/fabric/schema.md, "linux"):
- root HTB 1:, parent class 1:1 at the link rate; class 1:(0x10+i) per intent class i, most urgent
  first, each guaranteed 8 kbit and borrowing up to the link (ceil) by HTB prio: work-conserving
  strict priority, exactly as the agent's host queues (geryon.agent.linux_driver.desired_tree).
- strict class i -> HTB prio i (classes are validated strict-first); every DWRR class -> one prio below
  all strict classes. HTB shares what the strict classes leave among same-prio classes round robin,
  each sending its `quantum` bytes per turn, so a DWRR class's quantum is proportional to its weight
  (the lightest gets 64 KiB, the largest GSO packet: HTB sends a whole packet per turn even when it
  exceeds the quantum): that is DWRR. (A guaranteed rate of weight x link
  would also split the link, but HTB serves guaranteed rates before any borrowing, so DWRR queues could
  then push strict ones below their priority.)
- a bfifo leaf of `buffer_bytes` per class (byte limits: GSO super-packets make packet limits lie).
- u32 DS-field filters (IPv4 and IPv6) for each class's DSCPs; the CNP DSCP joins class 0 (HTB prio 0
  is never starved); unmatched DSCPs go to the `unmatched` class (HTB default; the least urgent one
  unless the intent says otherwise).
- PFC, ECN/WRED, the PFC watchdog and buffer hints have no Linux equivalent on veth: not rendered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from geryon.agent.htb_shares import weighted_quanta
from geryon.fabric.intent import IntentError, QosIntent, parse_ports

# Mirrors of geryon.agent.linux_driver (imported lazily there: pyroute2 is an optional dependency,
# and rendering must work without it). test_render_linux checks they agree.
PARENT_MINOR = 0x1
FIRST_MINOR = 0x10
GUARANTEED_BITS = 8000
QUANTUM = 1514 * 4  # the driver's DEFAULT_QUANTUM
FILTER_PREF = {"ip": 1, "ipv6": 2}
DEFAULT_BURST = 64 * 1024


class ApplyError(RuntimeError):
    """The kernel's switch-port queues do not match what was written."""


class PortTrees(dict[str, dict[str, Any]]):
    """{port ifname: tree}; carries the HTB burst, which is not part of a tree (the kernel keeps it as
    a transmit time that does not convert back, so the driver cannot compare it)."""

    burst_bytes: int = DEFAULT_BURST


def _classid(minor: int) -> str:
    return f"1:{minor:x}"


def class_tree(intent: QosIntent, rate_bits: int, buffer_bytes: int) -> dict[str, Any]:
    """One switch egress port's tree, as LinuxDriver.observe() reports it."""
    if rate_bits < GUARANTEED_BITS * (len(intent.classes) + 1):
        raise IntentError(f"rate: {rate_bits} bits/s is too low for {len(intent.classes)} classes")
    link = (int(rate_bits) // 8) * 8  # the kernel keeps bytes/s
    parent = _classid(PARENT_MINOR)
    n_strict = sum(1 for c in intent.classes if c.scheduler == "strict")
    quanta = dwrr_quanta(intent)
    classes: list[dict[str, Any]] = [
        {"classid": parent, "prio": 0, "rate_bits": link, "ceil_bits": link, "leaf": None}
    ]
    filters = []
    for i, c in enumerate(intent.classes):
        cid = _classid(FIRST_MINOR + i)
        entry: dict[str, Any] = {
            "classid": cid,
            "parent": parent,
            "prio": i if c.scheduler == "strict" else n_strict,
            "rate_bits": GUARANTEED_BITS,
            "ceil_bits": link,
            "leaf": {"kind": "bfifo", "limit": int(buffer_bytes)},
        }
        if c.name in quanta and quanta[c.name] != QUANTUM:  # the driver leaves the default out
            entry["quantum"] = quanta[c.name]
        classes.append(entry)
        dscps = list(c.dscp)
        if i == 0 and intent.cnp is not None:
            dscps.append(intent.cnp.dscp)
        for dscp in dscps:
            for proto in ("ip", "ipv6"):
                filters.append({"protocol": proto, "dscp": dscp, "classid": cid})
    unmatched = next(i for i, c in enumerate(intent.classes) if c.name == intent.unmatched)
    return {
        "kind": "htb",
        "default": _classid(FIRST_MINOR + unmatched),
        "classes": classes,
        "filters": sorted(filters, key=lambda f: (f["protocol"], f["dscp"], f["classid"])),
    }


def dwrr_quanta(intent: QosIntent) -> dict[str, int]:
    """{DWRR class name: HTB quantum in bytes}, proportional to the weights (geryon.agent.htb_shares,
    the host agent's rule too); {} when the weights are all equal (HTB's default quantum already
    shares equally, and the tree stays the agent's host tree)."""
    return weighted_quanta(
        {c.name: int(c.weight) for c in intent.classes if c.scheduler != "strict" and c.weight}
    )


def port_trees(
    intent: QosIntent,
    ports: Sequence[str] | str | None = None,
    rate_bits: int = 100_000_000,
    buffer_bytes: int = 256 * 1024,
    burst_bytes: int = DEFAULT_BURST,
) -> PortTrees:
    """{port: tree} for the given switch ports (default: the intent's `ports.linux`)."""
    names = _ports(intent, ports)
    if not 1500 <= buffer_bytes <= 2**31:
        raise IntentError(f"buffer: {buffer_bytes} bytes is out of range; allowed 1500 bytes to 2 GiB")
    if not 1500 <= burst_bytes <= 2**31:
        raise IntentError(f"burst: {burst_bytes} bytes is out of range; allowed 1500 bytes to 2 GiB")
    tree = class_tree(intent, rate_bits, buffer_bytes)
    out = PortTrees({p: tree for p in names})
    out.burst_bytes = burst_bytes
    return out


def fifo_tree(buffer_bytes: int, rate_bits: int | None = None) -> dict[str, Any]:
    """One FIFO queue per port: the "no network priority" baseline.

    Without `rate_bits`: a bfifo root (no shaping: the port runs as fast as the veth does).
    With `rate_bits`: the same HTB layout as the priority switch with a single class 1:10 at the link
    rate and no filters, so the bottleneck (and the class-0 counters) match the priority mode's.
    """
    if rate_bits is None:
        return {"kind": "bfifo", "handle": "1:", "limit": int(buffer_bytes)}
    link = (int(rate_bits) // 8) * 8
    parent = _classid(PARENT_MINOR)
    return {
        "kind": "htb",
        "default": _classid(FIRST_MINOR),
        "classes": [
            {"classid": parent, "prio": 0, "rate_bits": link, "ceil_bits": link, "leaf": None},
            {
                "classid": _classid(FIRST_MINOR),
                "parent": parent,
                "prio": 0,
                "rate_bits": GUARANTEED_BITS,
                "ceil_bits": link,
                "leaf": {"kind": "bfifo", "limit": int(buffer_bytes)},
            },
        ],
        "filters": [],
    }


def _ports(intent: QosIntent, ports: Sequence[str] | str | None) -> tuple[str, ...]:
    if ports is None:
        names = intent.ports_for("linux")
        if not names:
            raise IntentError("ports: no linux ports; give ports.linux in the intent or --ports")
        return names
    return parse_ports("linux", ports if isinstance(ports, str) else list(ports), "ports")


def apply_ports(
    trees: Mapping[str, dict[str, Any]], netns: str | None = None, burst_bytes: int | None = None
) -> None:
    """Writes each port's tree with the agent's LinuxDriver (target "<port>/qdisc") in `netns`, then
    reads every port back and raises ApplyError on a mismatch. Every port must exist before anything
    is written (DriverError names the first that does not); if a write fails, the ports already
    written get their previous queues back before the error propagates (nothing half-applied)."""
    from geryon.agent.driver import DriverError
    from geryon.agent.linux_driver import LinuxDriver

    burst = burst_bytes if burst_bytes is not None else getattr(trees, "burst_bytes", DEFAULT_BURST)
    targets = [f"{p}/qdisc" for p in trees]
    with LinuxDriver(netns) as drv:
        have = drv.interfaces()
        for port in trees:
            if port not in have:
                where = f" in network namespace {netns}" if netns else ""
                raise DriverError(f"{port}/qdisc", f"no interface {port!r}{where}")
        before = drv.observe(targets)
        drv.burst_bytes = burst
        touched: list[str] = []
        try:
            for target, tree in zip(targets, trees.values(), strict=True):
                touched.append(target)  # before the write: a failed write may have removed the root
                drv.write(target, tree)
        except Exception:
            for target in reversed(touched):
                with contextlib.suppress(DriverError):  # the original error is the one to report
                    drv.write(target, before[target])
            raise
        observed = drv.observe(targets)
    wrong = [p for p, tree in trees.items() if observed[f"{p}/qdisc"] != tree]
    if wrong:
        raise ApplyError(
            f"switch ports {', '.join(wrong)}: the kernel reports queues other than those written "
            f"(first: {observed[f'{wrong[0]}/qdisc']!r})"
        )


def observe_ports(ports: Sequence[str], netns: str | None = None) -> dict[str, Any]:
    """{port: tree as the kernel reports it} (None = the kernel's default root)."""
    from geryon.agent.linux_driver import LinuxDriver

    with LinuxDriver(netns) as drv:
        got = drv.observe([f"{p}/qdisc" for p in ports])
    return {p: got[f"{p}/qdisc"] for p in ports}


def _rate(bits: int) -> str:
    return f"{bits}bit"


def _u32_match(proto: str, dscp: int) -> str:
    tos = f"0x{dscp << 2:02x}"
    return f"match ip dsfield {tos} 0xfc" if proto == "ip" else f"match ip6 priority {tos} 0xfc"


def tc_commands(trees: Mapping[str, dict[str, Any]], burst_bytes: int | None = None) -> str:
    """The same configuration as `tc` command lines (a POSIX shell script), one block per port."""
    burst = burst_bytes if burst_bytes is not None else getattr(trees, "burst_bytes", DEFAULT_BURST)
    lines = ["#!/bin/sh", "# Geryon switch-port queues (geryon render-switch --os linux)", "set -e"]
    for port, tree in trees.items():
        dev = f"dev {port}"
        lines.append("")
        lines.append(f"# {port}")
        lines.append(f"tc qdisc del {dev} root 2>/dev/null || true")
        kind = tree["kind"]
        if kind in ("bfifo", "pfifo"):
            lines.append(f"tc qdisc add {dev} root handle {tree['handle']} {kind} limit {tree['limit']}")
            continue
        if kind != "htb":
            raise ValueError(f"{port}: cannot print a {kind!r} root")
        default = tree["default"].split(":")[1]
        lines.append(f"tc qdisc add {dev} root handle 1: htb default {default}")
        inner = {c["parent"] for c in tree["classes"] if "parent" in c}
        for c in sorted(tree["classes"], key=lambda c: "parent" in c):
            parent = c.get("parent", "1:")
            opts = f"rate {_rate(c['rate_bits'])} ceil {_rate(c['ceil_bits'])} burst {burst} cburst {burst}"
            lines.append(
                f"tc class add {dev} parent {parent} classid {c['classid']} htb {opts} "
                f"prio {c['prio']} quantum {c.get('quantum', QUANTUM)}"
            )
            leaf = c.get("leaf")
            if leaf is not None and c["classid"] not in inner:
                minor = c["classid"].split(":")[1]
                lines.append(
                    f"tc qdisc add {dev} parent {c['classid']} handle {minor}: "
                    f"{leaf['kind']} limit {leaf['limit']}"
                )
        for f in tree["filters"]:
            lines.append(
                f"tc filter add {dev} parent 1: protocol {f['protocol']} prio {FILTER_PREF[f['protocol']]} "
                f"u32 {_u32_match(f['protocol'], f['dscp'])} flowid {f['classid']}"
            )
    return "\n".join(lines) + "\n"


def render(intent: QosIntent, ports: Sequence[str] | str | None = None) -> str:
    """`render-switch --os linux`: tc lines for the intent at the default testbed rate and buffer."""
    return tc_commands(port_trees(intent, ports))
