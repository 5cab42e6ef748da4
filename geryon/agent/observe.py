"""The observation of the host's actual state that the presenters read: the Geryon classes' HTB
counters (tc), the NIC's per-priority and PFC counters (ethtool -S), the jobs' flows and PS-worker
pairs (flow discovery over the job registry), and the netlink thread and kernel reader they come
through. Knows nothing of Prometheus or HTTP: geryon.agent.metrics turns these into series,
geryon.agent.status into the status page's JSON.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from geryon.agent.flows import FlowDiscovery, netns_socket
from geryon.agent.jobs import JobFlow, JobRegistry, PairReport, map_all_jobs

log = logging.getLogger("geryon.agent.metrics")

HTB_ROOT_MAJOR = 1
CLASS_MINOR_BASE = 0x10

# mlx5 (and other drivers following its names): rx_prio3_bytes, tx_prio5_pause, rx_prio3_pause_duration ...
_PRIO_STAT = re.compile(r"^(rx|tx)_prio([0-7])_(bytes|packets|pause|pause_duration|pause_transition)$")
# RoCE congestion counters some drivers expose in ethtool -S (mlx5 keeps most in rdma hw_counters).
ROCE_STATS = (
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "rp_cnp_ignored",
    "out_of_sequence",
)


@dataclass(frozen=True)
class ClassSample:
    interface: str
    class_name: str
    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int
    backlog_packets: int


def class_samples(interface: str, class_names: Sequence[str], tc_classes: Iterable[Any]) -> list[ClassSample]:
    """The Geryon classes among an interface's tc classes (pyroute2 messages with 'handle' and TCA_STATS2)."""
    out = []
    for msg in tc_classes:
        handle = int(msg["handle"])
        major, minor = handle >> 16, handle & 0xFFFF
        c = minor - CLASS_MINOR_BASE
        if major != HTB_ROOT_MAJOR or not 0 <= c < len(class_names) or msg.get_attr("TCA_KIND") != "htb":
            continue
        stats2 = msg.get_attr("TCA_STATS2")
        basic = stats2.get_attr("TCA_STATS_BASIC") if stats2 else None
        queue = stats2.get_attr("TCA_STATS_QUEUE") if stats2 else None
        out.append(
            ClassSample(
                interface=interface,
                class_name=class_names[c],
                bytes=int(basic["bytes"]) if basic else 0,
                packets=int(basic["packets"]) if basic else 0,
                drops=int(queue["drops"]) if queue else 0,
                overlimits=int(queue["overlimits"]) if queue else 0,
                backlog_bytes=int(queue["backlog"]) if queue else 0,
                backlog_packets=int(queue["qlen"]) if queue else 0,
            )
        )
    return out


@dataclass(frozen=True)
class NicCounters:
    """One interface's per-priority counters: (direction, priority, kind) -> value, plus RoCE counters."""

    interface: str
    prio: dict[tuple[str, int, str], int]
    roce: dict[str, int]


def nic_counters(interface: str, stats: Iterable[tuple[str, int]]) -> NicCounters:
    prio: dict[tuple[str, int, str], int] = {}
    roce: dict[str, int] = {}
    for name, value in stats:
        m = _PRIO_STAT.match(name)
        if m:
            prio[(m.group(1), int(m.group(2)), m.group(3))] = int(value)
        elif name in ROCE_STATS:
            roce[name] = int(value)
    return NicCounters(interface, prio, roce)


def observe_jobs(jobs: JobRegistry, discovery: FlowDiscovery) -> tuple[list[JobFlow], list[PairReport]]:
    """Every registered job's flows and PS-worker pairs, from one socket dump (none without jobs)."""
    states = jobs.states()
    if not states:
        return [], []
    return map_all_jobs(states, discovery.flows(), discovery.listeners())


class NetlinkThread:
    """Runs every call on one long-lived thread. pyroute2 0.9's sync sockets drive an asyncio loop per
    calling thread, so a socket used from a fresh thread (the metrics server makes one per scrape) pays
    ~20 ms to set up a loop; one thread keeps each call around a millisecond and serialises them."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._closed = False

    def call(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("closed")
            future = self._pool.submit(fn)
        return future.result()

    def close(self, cleanup: Callable[[], None] | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if cleanup is not None:
                self._pool.submit(cleanup).result()
        self._pool.shutdown(wait=True)


class _KernelReader:
    """tc class statistics (rtnetlink) and ethtool statistics (SIOCETHTOOL ioctl) of one namespace, on one
    thread with long-lived sockets (see NetlinkThread)."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self._thread = NetlinkThread("geryon-metrics")
        self._ipr: Any = None
        self._ethtool_sock: socket.socket | None = None

    def _iproute(self) -> Any:
        if self._ipr is None:
            from pyroute2 import IPRoute

            if self.netns is None:
                self._ipr = IPRoute()
            else:
                self._ipr = IPRoute(
                    use_socket=netns_socket(self.netns, socket.AF_NETLINK, socket.SOCK_DGRAM, 0)
                )
        return self._ipr

    def _ethtool_socket(self) -> socket.socket:
        if self._ethtool_sock is None:
            # The ioctl acts on interfaces of the socket's namespace.
            self._ethtool_sock = netns_socket(self.netns, socket.AF_INET, socket.SOCK_DGRAM)
        return self._ethtool_sock

    def tc_classes(self, interface: str) -> list[Any] | None:
        """The interface's tc classes; None when the interface does not exist."""

        def run() -> list[Any] | None:
            try:
                ipr = self._iproute()
                idx = ipr.link_lookup(ifname=interface)
                return list(ipr.get_classes(index=idx[0])) if idx else None
            except Exception:
                self._drop()
                raise

        result: list[Any] | None = self._thread.call(run)
        return result

    def ethtool_stats(self, interface: str) -> list[tuple[str, int]]:
        """ETHTOOL_GSTATS as (name, value); [] when the device has no statistics or does not exist."""

        def run() -> list[tuple[str, int]]:
            from pyroute2.ethtool.ioctl import IoctlEthtool, NoSuchDevice, NotSupportedError

            tool = IoctlEthtool()
            tool.sock.close()
            tool.sock = self._ethtool_socket()
            tool.change_ifname(interface)
            try:
                return [(str(n), int(v)) for n, v in tool.get_statistics()]
            except (NotSupportedError, NoSuchDevice):
                return []
            except OSError as e:
                if e.errno in (19, 95):  # ENODEV, EOPNOTSUPP
                    return []
                raise

        result: list[tuple[str, int]] = self._thread.call(run)
        return result

    def _drop(self) -> None:
        if self._ipr is not None:
            try:
                self._ipr.close()
            finally:
                self._ipr = None

    def close(self) -> None:
        def cleanup() -> None:
            self._drop()
            if self._ethtool_sock is not None:
                self._ethtool_sock.close()
                self._ethtool_sock = None

        self._thread.close(cleanup)
