"""Namespaces, marked sockets and the host HTB layout for the agent's observability tests.

Everything here is real: network namespaces created and removed by the test, sockets marked with IP_TOS,
kernel HTB classes built with pyroute2. Names carry the test process's PID so parallel runs never collide.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyroute2 import IPRoute, netns

_counter = itertools.count()
# The shared host egress layout: root 1:, parent class 1:1 at the link rate, under it class 1:(0x10 + c)
# per Geryon class c, bfifo leaves, u32 on DSCP (geryon/agent/schema.md).
CLASS_MINOR_BASE = 0x10


def unique_name(prefix: str) -> str:
    return f"{prefix}{os.getpid() % 100000}x{next(_counter)}"


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    """Runs the block in namespace `ns` (this thread only); sockets made here stay in it."""
    netns.pushns(ns)
    try:
        yield
    finally:
        netns.popns()


def sysctl(ns: str, key: str, value: str) -> None:
    with inside(ns), open("/proc/sys/" + key.replace(".", "/"), "w") as f:
        f.write(value)


@contextlib.contextmanager
def namespace(prefix: str = "gfo") -> Iterator[str]:
    """A fresh namespace with loopback up and TOS reflection on (as the agent configures hosts)."""
    name = unique_name(prefix)
    netns.create(name)
    try:
        with IPRoute(netns=name) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        sysctl(name, "net.ipv4.tcp_reflect_tos", "1")
        yield name
    finally:
        netns.remove(name)


def listen(ns: str, host: str) -> socket.socket:
    with inside(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(64)
    return s


def connect(ns: str, src: str, dst: tuple[str, int], dscp: int) -> socket.socket:
    """A client socket from `src`, marked before connect() so the server side reflects the mark."""
    with inside(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        s.bind((src, 0))
        s.settimeout(10)
        s.connect(dst)
    return s


@dataclass
class Transfer:
    """Bounded bulk sends on client sockets while a server thread drains them; stop() joins everything."""

    server: socket.socket
    clients: list[socket.socket] = field(default_factory=list)
    accepted: list[socket.socket] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def add_clients(self, socks: list[socket.socket]) -> None:
        self.server.settimeout(10)
        for s in socks:
            self.clients.append(s)
            conn, _ = self.server.accept()
            self.accepted.append(conn)
            self._spawn(self._drain, conn)

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self.threads.append(t)

    def _drain(self, conn: socket.socket) -> None:
        conn.settimeout(0.5)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if not conn.recv(1 << 16):
                    return
            except TimeoutError:
                if self.stop_event.is_set():
                    return
            except OSError:
                return

    def _send(self, s: socket.socket, total: int, chunk: int, pause: float) -> None:
        buf = b"\0" * chunk
        sent = 0
        deadline = time.monotonic() + 60
        with contextlib.suppress(OSError):
            while sent < total and not self.stop_event.is_set() and time.monotonic() < deadline:
                s.sendall(buf)
                sent += chunk
                if pause:
                    time.sleep(pause)

    def send(self, total: int = 4 << 20, chunk: int = 64 << 10, pause: float = 0.002) -> None:
        """Sends `total` bytes on every client, paced so the flows stay alive while a test looks at them."""
        for s in self.clients:
            self._spawn(self._send, s, total, chunk, pause)

    def stop(self) -> None:
        self.stop_event.set()
        for s in self.clients:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in self.threads:
            t.join(timeout=10)
        for s in [*self.clients, *self.accepted, self.server]:
            s.close()


@contextlib.contextmanager
def veth_pair(prefix: str = "gfv") -> Iterator[tuple[str, str, str]]:
    """Two namespaces joined by a veth pair: (sender ns, receiver ns, sender's ifname); 10.77.0.1 -> .2."""
    with namespace(prefix) as a, namespace(prefix) as b:
        ifname = "geth0"
        with IPRoute(netns=a) as ipr:
            with inside(b):
                b_fd = os.open(f"/run/netns/{b}", os.O_RDONLY)
            try:
                ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": "geth1", "net_ns_fd": b_fd})
            finally:
                os.close(b_fd)
            idx = ipr.link_lookup(ifname=ifname)[0]
            ipr.addr("add", index=idx, address="10.77.0.1", prefixlen=24)
            ipr.link("set", index=idx, state="up")
        with IPRoute(netns=b) as ipr:
            idx = ipr.link_lookup(ifname="geth1")[0]
            ipr.addr("add", index=idx, address="10.77.0.2", prefixlen=24)
            ipr.link("set", index=idx, state="up")
        yield a, b, ifname


def build_htb(ns: str, ifname: str, dscps: list[int], rate: str = "200mbit") -> None:
    """The shared host egress layout on `ifname`: class c gets DSCP dscps[c]; unmatched -> last class."""
    k = len(dscps)
    with IPRoute(netns=ns) as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
        ipr.tc("add", "htb", index=idx, handle=0x10000, default=CLASS_MINOR_BASE + k - 1)
        # Children borrow up to their ceil only from a parent class, so all hang under 1:1 at the link rate.
        ipr.tc(
            "add-class",
            "htb",
            index=idx,
            handle=0x10001,
            parent=0x10000,
            rate=rate,
            ceil=rate,
            burst=64 << 10,
            cburst=64 << 10,
        )
        for c, dscp in enumerate(dscps):
            minor = CLASS_MINOR_BASE + c
            ipr.tc(
                "add-class",
                "htb",
                index=idx,
                handle=0x10000 | minor,
                parent=0x10001,
                rate="8kbit",
                ceil=rate,
                burst=64 << 10,
                cburst=64 << 10,
                prio=c,
            )
            # pyroute2 0.9 has no bfifo module: the leaf comes from iproute2's tc.
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    ifname,
                    "parent",
                    f"1:{minor:x}",
                    "handle",
                    f"{minor:x}:",
                    "bfifo",
                    "limit",
                    str(4 << 20),
                ],
                check=True,
                capture_output=True,
            )
            ipr.tc(
                "add-filter",
                "u32",
                index=idx,
                parent=0x10000,
                prio=1 + c,
                protocol=0x0800,
                target=0x10000 | minor,
                keys=[f"0x{dscp << 18:08x}/0x00fc0000+0"],
            )
