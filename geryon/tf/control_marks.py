"""TensorFlow's own gRPC connections, marked with the job's most urgent fabric class.

Geryon marks the tensors it carries (the data plane's flows); TensorFlow's own gRPC channels (the
chief's step calls, RunGraph / remote function calls and their replies, the eager context's keep-alives)
carry no DSCP, so the fabric queues them as `unmatched`: the least urgent class by default. With one
job that costs nothing measurable (its own bulk is done when its step replies). Where jobs share a
fabric it does: every job's step calls wait below the other jobs' bulk, on the hosts and the switch.
On the two-job testbed (bench/results/2026-12-07-jobs-testbed.md, probes) Geryon's classes were 18-23%
slower than one FIFO for both jobs for this reason alone; with the control traffic in the top class the
two were equal (1.003 [0.953, 1.069]).

TensorFlow sets no DSCP on its channels and has no option for it, so this module marks the sockets
from inside the process: every TCP socket of this process with an endpoint (either side) at one of the
cluster's gRPC addresses gets the marks (IP_TOS or IPV6_TCLASS, then SO_PRIORITY: setting the TOS resets
the socket's priority). The data plane's own flows use other ports (gRPC port + offset) and are left
alone. gRPC opens connections when first needed and again after a failure, so `ControlMarker` looks
again every `interval` seconds; marking is a setsockopt on a duplicate of the socket's descriptor (the
socket is shared, not copied), so nothing reconnects.

Pure parts (`parse_proc_net_tcp`, `cluster_endpoints`, `to_mark`) apart from the /proc and socket work.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass

log = logging.getLogger("geryon.tf.control_marks")

Endpoint = tuple[str, int]  # (address as inet_ntop writes it, port)
PROC_TABLES = (("/proc/self/net/tcp", socket.AF_INET), ("/proc/self/net/tcp6", socket.AF_INET6))
DEFAULT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class TcpEntry:
    """One row of /proc/net/tcp{,6}: the socket's inode and its two endpoints."""

    inode: int
    family: int
    local: Endpoint
    remote: Endpoint


def _address(hex_addr: str, family: int) -> str:
    # The kernel prints the address as the 32-bit words of its network-order bytes, each word in host
    # order (seq_printf "%08X" of __be32 on a little-endian machine): undo per word.
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, words)


def parse_proc_net_tcp(text: str, family: int) -> list[TcpEntry]:
    """The rows of /proc/net/tcp (AF_INET) or tcp6 (AF_INET6); the header and malformed rows are
    skipped (the file is the kernel's, but a row that does not parse is no reason to stop marking)."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            local_addr, local_port = fields[1].split(":")
            remote_addr, remote_port = fields[2].split(":")
            out.append(
                TcpEntry(
                    inode=int(fields[9]),
                    family=family,
                    local=(_address(local_addr, family), int(local_port, 16)),
                    remote=(_address(remote_addr, family), int(remote_port, 16)),
                )
            )
        except (ValueError, OSError):
            continue
    return out


def cluster_endpoints(
    addresses: Iterable[str], resolve: Callable[[str, int], Iterable[str]] | None = None
) -> frozenset[Endpoint]:
    """Every (IP, port) the cluster's gRPC addresses ("host:port", "[v6]:port") resolve to; an IPv4
    address also as its IPv4-mapped IPv6 form, which a dual-stack socket shows. Unresolvable hosts are
    logged and skipped: TF's own server start says what is wrong with them."""
    resolve = resolve or _resolve
    out: set[Endpoint] = set()
    for address in addresses:
        host, sep, port_text = str(address).rpartition(":")
        if not sep or not port_text.isdigit():
            log.warning("Geryon control marks: %r is not host:port; not marked", address)
            continue
        host = host.strip("[]")
        port = int(port_text)
        try:
            ips = list(resolve(host, port))
        except OSError as e:
            log.warning("Geryon control marks: %s does not resolve (%s); not marked", host, e)
            continue
        for ip in ips:
            out.add((ip, port))
            if ":" not in ip:
                out.add((f"::ffff:{ip}", port))
    return frozenset(out)


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def to_mark(entries: Iterable[TcpEntry], endpoints: frozenset[Endpoint]) -> list[TcpEntry]:
    """The connections with either endpoint at one of the cluster's gRPC addresses. A listener
    (remote port 0) matches only on its own address; one bound to the wildcard is not marked (the
    sockets it accepts are, once they exist)."""
    return [e for e in entries if e.local in endpoints or (e.remote[1] != 0 and e.remote in endpoints)]


def _socket_fds() -> dict[int, int]:
    """{socket inode: one of this process' descriptors for it}."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            out[int(target[8:-1])] = int(name)
    return out


def _set_marks(fd: int, inode: int, family: int, dscp: int, priority: int) -> bool:
    """Marks the socket behind `fd` if it is still socket `inode`; False when it is gone or another."""
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(dup).st_ino != inode:  # the descriptor was closed and reused since the scan
            return False
        sock = socket.socket(family, socket.SOCK_STREAM, 0, fileno=dup)
        dup = -1  # the socket object owns it now
        with sock:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, dscp << 2)
                # A dual-stack socket's IPv4 segments take IP_TOS, where the kernel allows it on one.
                with suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            else:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)
        return True
    except OSError:
        return False
    finally:
        if dup >= 0:
            os.close(dup)


class ControlMarker:
    """Keeps this process' gRPC connections to `addresses` (the cluster spec's) at (dscp, priority).

    `set_marks` changes them (a band change); `mark_once` marks what is open now; `start` runs
    mark_once every `interval` seconds on a thread this object owns until `stop`."""

    def __init__(
        self, addresses: Iterable[str], dscp: int, priority: int, interval: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.endpoints = cluster_endpoints(addresses)
        self.interval = interval
        self._lock = threading.Lock()
        self._marks = (dscp, priority)  # guarded by _lock
        self._marked: dict[int, tuple[int, int]] = {}  # inode -> marks it has; guarded by _lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def marks(self) -> tuple[int, int]:
        with self._lock:
            return self._marks

    def set_marks(self, dscp: int, priority: int) -> int:
        """New marks for every connection from now on; returns how many open ones were re-marked."""
        with self._lock:
            self._marks = (dscp, priority)
        return self.mark_once()

    def mark_once(self) -> int:
        """Marks the matching connections that do not carry the marks yet; returns how many."""
        entries = []
        for path, family in PROC_TABLES:
            try:
                with open(path) as f:
                    entries += parse_proc_net_tcp(f.read(), family)
            except OSError:  # no IPv6 in this kernel or namespace
                continue
        wanted = to_mark(entries, self.endpoints)
        fds = _socket_fds() if wanted else {}
        with self._lock:
            marks = self._marks
            live = {e.inode for e in wanted}
            self._marked = {i: m for i, m in self._marked.items() if i in live}  # forget closed ones
            pending = [e for e in wanted if e.inode in fds and self._marked.get(e.inode) != marks]
        done = 0
        for e in pending:
            if _set_marks(fds[e.inode], e.inode, e.family, *marks):
                done += 1
                with self._lock:
                    self._marked[e.inode] = marks
        return done

    def start(self) -> ControlMarker:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="geryon-control-marks", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.mark_once()
            except Exception:  # marking is an optimisation: never let it take the task down
                log.exception("Geryon control marks: marking failed; trying again")
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
