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
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from obs_netns import connect, listen
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


_CLASS = re.compile(r"^class htb (\S+) (?:root|parent (\S+)) ")
_PRIO = re.compile(r" prio (\d+) ")
_CEIL = re.compile(r" ceil (\S+) ")
_SENT = re.compile(r"^\s*Sent (\d+) bytes (\d+) pkt")
_BORROWED = re.compile(r"^\s*lended: (\d+) borrowed: (\d+) ")


def htb_classes(ns: str, dev: str, inner: bool = False) -> dict[str, dict[str, Any]]:
    """`tc -s class show` parsed (iproute2 6.1 prints HTB classes only as text): handle -> parent
    (None under the root), prio, ceil (bits/s), bytes, packets, borrowed. Only the leaf classes (the
    ones traffic is queued in) unless `inner`: the Geryon parent 1:1 has no queue of its own."""
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in ns_exec(ns, "tc", "-s", "class", "show", "dev", dev).stdout.splitlines():
        if m := _CLASS.match(line):
            prio, ceil = _PRIO.search(line), _CEIL.search(line)
            current = {
                "parent": m.group(2),
                "prio": int(prio.group(1)) if prio else None,  # inner classes have none
                "ceil": parse_rate(ceil.group(1)) if ceil else None,
                "bytes": 0,
                "packets": 0,
                "borrowed": 0,
            }
            out[m.group(1)] = current
        elif (m := _SENT.match(line)) and current is not None:
            current["bytes"], current["packets"] = int(m.group(1)), int(m.group(2))
        elif (m := _BORROWED.match(line)) and current is not None:
            current["borrowed"] = int(m.group(2))
    if inner:
        return out
    parents = {c["parent"] for c in out.values()}
    return {h: c for h, c in out.items() if h not in parents}


@dataclass
class Flow:
    """One marked TCP flow from `src_ns` to a listener in `dst_ns`, sending until `nbytes` are
    received, stop() is called or `timeout` passes, whichever comes first."""

    nbytes: int
    timeout: float
    received: int = 0
    started: float = 0.0
    finished: float | None = None  # monotonic time the last of `nbytes` arrived

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []

    def start(self, src_ns: str, src: str, dst_ns: str, dst: str, dscp: int) -> Flow:
        server = listen(dst_ns, dst)
        self._socks.append(server)
        client = connect(src_ns, src, server.getsockname(), dscp)
        self._socks.append(client)
        server.settimeout(10)
        conn, _ = server.accept()
        self._socks.append(conn)
        self.started = time.monotonic()
        for target, sock in ((self._recv, conn), (self._send, client)):
            t = threading.Thread(target=target, args=(sock,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _deadline_passed(self) -> bool:
        return self._stop.is_set() or time.monotonic() - self.started > self.timeout

    def _recv(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        while self.received < self.nbytes and not self._deadline_passed():
            try:
                data = conn.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            self.received += len(data)
        if self.received >= self.nbytes:
            self.finished = time.monotonic()

    def _send(self, client: socket.socket) -> None:
        chunk = b"\0" * (64 << 10)
        sent = 0
        client.settimeout(0.2)
        while sent < self.nbytes and not self._deadline_passed():
            try:
                sent += client.send(chunk[: self.nbytes - sent])
            except TimeoutError:
                continue
            except OSError:
                return

    def wait(self) -> None:
        for t in self._threads:
            t.join(timeout=self.timeout + 10)

    def stop(self) -> None:
        self._stop.set()
        self.wait()
        for s in self._socks:
            s.close()

    @property
    def seconds(self) -> float | None:
        return None if self.finished is None else self.finished - self.started
