"""TCP flow discovery from the kernel (sock_diag / inet_diag via pyroute2).

One dump per call returns every established TCP socket of the (network) namespace with its DSCP, byte
counters, RTT and retransmits. Mapping flows to jobs and roles is jobs.py's business; this module only
reads and normalises what the kernel says.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyroute2 import DiagSocket
from pyroute2.netlink.diag import MarshalDiag
from pyroute2.netlink.nlsocket import NetlinkSocket

NETLINK_SOCK_DIAG = 4
TCP_ESTABLISHED = 1
TCP_LISTEN = 10

# inet_diag extension attribute numbers (linux/inet_diag.h); the request asks for attribute N with bit N-1.
INET_DIAG_INFO = 2
INET_DIAG_CONG = 4
INET_DIAG_TOS = 5
INET_DIAG_TCLASS = 6
_EXTENSIONS = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_TOS - 1)) | (1 << (INET_DIAG_TCLASS - 1))


@dataclass(frozen=True)
class Flow:
    """One TCP connection as this host's kernel sees it. Addresses are plain IPv4/IPv6 strings (IPv4-mapped
    IPv6 addresses, as gRPC's dual-stack sockets report them, are given as IPv4)."""

    local: str
    local_port: int
    peer: str
    peer_port: int
    dscp: int  # of the packets this socket sends (the TOS byte without the ECN bits)
    bytes_sent: int
    bytes_acked: int
    bytes_received: int
    rtt_us: int
    retransmits: int  # total retransmitted segments over the connection's life
    inode: int

    @property
    def local_endpoint(self) -> tuple[str, int]:
        return (self.local, self.local_port)

    @property
    def peer_endpoint(self) -> tuple[str, int]:
        return (self.peer, self.peer_port)

    def as_dict(self) -> dict[str, Any]:
        return {
            "local": f"{_fmt_host(self.local)}:{self.local_port}",
            "peer": f"{_fmt_host(self.peer)}:{self.peer_port}",
            "dscp": self.dscp,
            "bytes_sent": self.bytes_sent,
            "bytes_acked": self.bytes_acked,
            "bytes_received": self.bytes_received,
            "rtt_us": self.rtt_us,
            "retransmits": self.retransmits,
        }


def _fmt_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


def normalize_address(addr: str) -> str:
    """The canonical text of an address: IPv4-mapped IPv6 ('::ffff:10.0.0.1') becomes '10.0.0.1'."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _tos_byte(value: Any) -> int | None:
    # pyroute2 decodes INET_DIAG_TOS/TCLASS as hex text ("b8", or "b8:00" for more bytes); keep the first.
    if value is None:
        return None
    if isinstance(value, int):
        return value & 0xFF
    text = str(value).split(":")[0].strip()
    return int(text, 16) if text else None


def flow_from_message(msg: Any) -> Flow:
    """Builds a Flow from one decoded inet_diag_msg (pyroute2 message: fields by key, get_attr for NLAs)."""
    local = normalize_address(msg["idiag_src"])
    peer = normalize_address(msg["idiag_dst"])
    tos = _tos_byte(msg.get_attr("INET_DIAG_TOS"))
    if msg["idiag_family"] == socket.AF_INET6 and ":" in peer:
        # A real IPv6 peer: the packets carry the traffic class, not inet->tos.
        tclass = _tos_byte(msg.get_attr("INET_DIAG_TCLASS"))
        if tclass is not None:
            tos = tclass
    info = msg.get_attr("INET_DIAG_INFO")

    def field(name: str) -> int:
        if info is None:
            return 0
        try:
            return int(info[name] or 0)
        except KeyError:
            return 0  # an older kernel's shorter tcp_info

    return Flow(
        local=local,
        local_port=int(msg["idiag_sport"]),
        peer=peer,
        peer_port=int(msg["idiag_dport"]),
        dscp=(tos or 0) >> 2,
        bytes_sent=field("tcpi_bytes_sent"),
        bytes_acked=field("tcpi_bytes_acked"),
        bytes_received=field("tcpi_bytes_received"),
        rtt_us=field("tcpi_rtt"),
        retransmits=field("tcpi_total_retrans"),
        inode=int(msg["idiag_inode"]),
    )


class _DiagSocket(DiagSocket):
    """pyroute2's DiagSocket, opened inside a named network namespace when asked (its own __init__ cannot)."""

    def __init__(self, netns: str | None) -> None:
        NetlinkSocket.__init__(self, NETLINK_SOCK_DIAG, netns=netns)
        self.set_marshal(MarshalDiag())


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


class FlowDiscovery:
    """Reads the namespace's TCP sockets. Keeps one netlink socket open (opening one inside a named namespace
    forks a helper) on its own thread; thread-safe, so the API and the metrics endpoint can share it."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._thread = NetlinkThread("geryon-diag")
        self._sock: _DiagSocket | None = None

    def _socket(self) -> _DiagSocket:
        if self._sock is None:
            sock = _DiagSocket(self.netns)
            sock.bind()
            self._sock = sock
        return self._sock

    def _dump(self, states: int, extensions: int) -> list[Any]:
        def run() -> list[Any]:
            try:
                sock = self._socket()
                return [
                    msg
                    for family in (socket.AF_INET, socket.AF_INET6)
                    for msg in sock.get_sock_stats(family=family, states=states, extensions=extensions)
                ]
            except Exception:
                # A broken socket (e.g. the namespace went away) must not stay cached.
                self._drop_socket()
                raise

        result: list[Any] = self._thread.call(run)
        return result

    def flows(self) -> list[Flow]:
        """Every established TCP connection, IPv4 and IPv6."""
        return [flow_from_message(msg) for msg in self._dump(1 << TCP_ESTABLISHED, _EXTENSIONS)]

    def listeners(self) -> set[tuple[str, int]]:
        """(address, port) of every listening TCP socket; a wildcard bind is reported as '0.0.0.0' or '::'."""
        return {
            (normalize_address(msg["idiag_src"]), int(msg["idiag_sport"]))
            for msg in self._dump(1 << TCP_LISTEN, 0)
        }

    def _drop_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def close(self) -> None:
        self._thread.close(self._drop_socket)

    def __enter__(self) -> FlowDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
