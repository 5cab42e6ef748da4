"""A network namespace with veth pairs for the agent core's tests, and readers of the real kernel state.

The namespace name carries the PID and a counter so parallel runs never collide; it is removed on exit
even when the test fails (processes the test started inside must be killed by PID before that).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute, netns

from geryon.units import parse_rate

_counter = itertools.count()


@dataclass(frozen=True)
class VethNs:
    name: str
    ifnames: tuple[str, ...]  # one end of each pair; the peers are "<ifname>p"


def unique(prefix: str) -> str:
    return f"{prefix}{os.getpid() % 100000}x{next(_counter)}"


@contextlib.contextmanager
def veth_ns(pairs: int = 2, prefix: str = "gag") -> Iterator[VethNs]:
    name = unique(prefix)
    netns.create(name)
    try:
        ifnames = tuple(f"ga{i}" for i in range(pairs))
        with IPRoute(netns=name) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            for i, ifname in enumerate(ifnames):
                ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": f"{ifname}p"})
                for end in (ifname, f"{ifname}p"):
                    ipr.link("set", index=ipr.link_lookup(ifname=end)[0], state="up")
                ipr.addr("add", index=ipr.link_lookup(ifname=ifname)[0], address=f"10.77.{i}.1", prefixlen=24)
        yield VethNs(name, ifnames)
    finally:
        netns.remove(name)


def ns_exec(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, check=check, timeout=30
    )


def tc_json(ns: str, what: str, dev: str, *extra: str) -> list[dict[str, Any]]:
    """`tc -j <what> show dev <dev>`: what the kernel itself reports (iproute2, not pyroute2)."""
    out = ns_exec(ns, "tc", "-j", *extra, what, "show", "dev", dev).stdout
    return json.loads(out) if out.strip() else []


def root_qdisc(ns: str, dev: str) -> dict[str, Any] | None:
    for q in tc_json(ns, "qdisc", dev):
        if q.get("root"):
            return q
    return None


def read_sysctl(ns: str, key: str) -> str:
    return ns_exec(ns, "cat", "/proc/sys/" + key.replace(".", "/")).stdout.strip()


_CLASS = re.compile(r"^class htb (\S+) ")
_PRIO = re.compile(r" prio (\d+) ")
_CEIL = re.compile(r" ceil (\S+) ")
_SENT = re.compile(r"^\s*Sent (\d+) bytes (\d+) pkt")


def htb_classes(ns: str, dev: str) -> dict[str, dict[str, Any]]:
    """`tc -s class show` parsed (iproute2 6.1 prints HTB classes only as text): handle -> prio,
    ceil (bits/s), packets."""
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in ns_exec(ns, "tc", "-s", "class", "show", "dev", dev).stdout.splitlines():
        if m := _CLASS.match(line):
            prio, ceil = _PRIO.search(line), _CEIL.search(line)
            current = {
                "prio": int(prio.group(1)) if prio else None,  # inner classes have none
                "ceil": parse_rate(ceil.group(1)) if ceil else None,
                "packets": 0,
            }
            out[m.group(1)] = current
        elif (m := _SENT.match(line)) and current is not None:
            current["packets"] = int(m.group(2))
    return out
