"""Switch egress counters per class: what each port toward a host sent and dropped, per queue.

HTB class statistics over netlink (about 0.6 ms a poll with the socket kept open). Class 1:(0x10+i)
is class index i (intent order, most urgent first); in fifo mode the single queue is index 0. HTB
counts a class's drops when its leaf queue (the port's buffer for that class) refuses a packet.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from pyroute2 import IPRoute

from geryon.agent.linux_driver import FIRST_MINOR
from geryon.testbed import namespaces

Counters = dict[str, dict[int, dict[str, int]]]


class SwitchCounters:
    """Reads the class counters of the ports toward `hosts` in namespace `netns` (the switch)."""

    def __init__(self, netns: str, ports: dict[str, str]) -> None:
        self._ports = dict(ports)  # host -> switch port
        self._ipr: IPRoute | None = None
        self._netns = netns
        self._index: dict[str, int] = {}
        self._lock = threading.Lock()

    def read(self) -> Counters:
        with self._lock:
            if self._ipr is None:
                self._ipr = namespaces.iproute(self._netns)
                for host, port in self._ports.items():
                    found = self._ipr.link_lookup(ifname=port)
                    if found:
                        self._index[host] = int(found[0])
            return {h: classes(self._ipr.get_classes(index=i)) for h, i in self._index.items()}

    def close(self) -> None:
        with self._lock:
            if self._ipr is not None:
                self._ipr.close()
                self._ipr = None


def classes(msgs: Iterable[Any]) -> dict[int, dict[str, int]]:
    """{class index: bytes, packets, drops} from HTB class messages; the parent 1:1 and anything not
    a Geryon leaf class (1:10-1:17) are left out."""
    out: dict[int, dict[str, int]] = {}
    for m in msgs:
        minor = int(m["handle"]) & 0xFFFF
        if not FIRST_MINOR <= minor < FIRST_MINOR + 8:
            continue
        stats = m.get("TCA_STATS2")
        basic = stats.get("TCA_STATS_BASIC") if stats is not None else None
        queue = stats.get("TCA_STATS_QUEUE") if stats is not None else None
        out[minor - FIRST_MINOR] = {
            "bytes": int(basic["bytes"]) if basic else 0,
            "packets": int(basic["packets"]) if basic else 0,
            "drops": int(queue["drops"]) if queue else 0,
        }
    return out
