"""TCP flow discovery from the kernel (sock_diag / inet_diag).

One dump per call returns every established TCP socket of the (network) namespace with its DSCP, byte
counters, RTT and retransmits. Mapping flows to jobs and roles is jobs.py's business; this module only
reads and normalises what the kernel says.

The dump is encoded and decoded here with struct and the agent's netlink framing (geryon.agent.netlink:
messages, error ACKs and attributes by the kernel's rules), on a netlink socket opened inside a named
namespace when asked. pyroute2's own DiagSocket decodes the same messages (the tests compare both) but
costs ~0.2 ms per socket in its generic NLA machinery and asyncio loop; a scrape with hundreds of sockets
must stay well under 50 ms.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import itertools
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from geryon.agent.netlink import (
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    error_code,
    iter_messages,
    nlas,
    nlmsg,
)

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_DUMP = 0x300
TCP_ESTABLISHED = 1
TCP_LISTEN = 10

# inet_diag extension attribute numbers (linux/inet_diag.h); the request asks for attribute N with bit N-1.
INET_DIAG_INFO = 2
INET_DIAG_TOS = 5
INET_DIAG_TCLASS = 6
_EXTENSIONS = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_TOS - 1)) | (1 << (INET_DIAG_TCLASS - 1))

# struct inet_diag_req_v2: family, protocol, ext, pad, states, then struct inet_diag_sockid
# (sport, dport big-endian; src, dst 16 bytes; if; cookie[2]).
_REQ_V2 = struct.Struct("=BBBxIHH16s16sI8s")  # a dump sets no ports or addresses: byte order is moot
# struct inet_diag_msg: family, state, timer, retrans, sockid, expires, rqueue, wqueue, uid, inode.
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
# struct tcp_info (linux/tcp.h, a stable ABI that only grows): the offsets of the fields read here.
_TCPI_FIELDS = {
    "rtt_us": (68, "=I"),  # smoothed RTT, microseconds
    "retransmits": (100, "=I"),  # tcpi_total_retrans
    "bytes_acked": (120, "=Q"),
    "bytes_received": (128, "=Q"),
    "bytes_sent": (200, "=Q"),  # since Linux 4.19
}


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


CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/var/run/netns"  # where `ip netns` (and pyroute2) keep named namespaces


def netns_socket(netns: str | None, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket in the named network namespace (None: this one). A socket stays in the namespace it was made
    in, so a short-lived thread enters the namespace (setns changes only the calling thread), makes it and
    ends. pyroute2's netns sockets fork a helper instead, and a fork beside gRPC's threads can crash."""
    if netns is None:
        return socket.socket(family, kind, proto)
    result: dict[str, Any] = {}

    def make() -> None:
        try:
            fd = os.open(os.path.join(NETNS_RUN_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            result["error"] = OSError(e.errno, f"network namespace {netns!r}: {e.strerror}")
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"setns into {netns!r}: {os.strerror(code)}")
            result["socket"] = socket.socket(family, kind, proto)
        except OSError as e:
            result["error"] = e
        finally:
            os.close(fd)

    t = threading.Thread(target=make, name="geryon-netns")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    sock: socket.socket = result["socket"]
    return sock


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    return normalize_address(socket.inet_ntop(socket.AF_INET6, raw))


def diag_request(states: int, extensions: int, family: int, seq: int) -> bytes:
    """A SOCK_DIAG_BY_FAMILY dump request for TCP sockets of `family` in the given states (bitmask)."""
    body = _REQ_V2.pack(family, socket.IPPROTO_TCP, extensions, states, 0, 0, b"", b"", 0, b"")
    return nlmsg(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, body)


def flow_from_diag(data: bytes, offset: int, end: int) -> Flow:
    """Decodes one inet_diag_msg (and its attributes) found at data[offset:end]; OSError(EBADMSG) for
    an attribute whose length does not fit."""
    family, _state, _timer, _retrans, sport, dport, src, dst, _if, _cookie, _exp, _rq, _wq, _uid, inode = (
        _DIAG_MSG.unpack_from(data, offset)
    )
    try:
        attrs = dict(nlas(data[offset + _DIAG_MSG.size : end]))
    except ValueError as e:
        raise OSError(errno.EBADMSG, f"sock_diag: {e}") from None
    local, peer = _address(family, src), _address(family, dst)
    tos = attrs.get(INET_DIAG_TOS, b"\0")[0]
    if family == socket.AF_INET6 and ":" in peer and INET_DIAG_TCLASS in attrs:
        tos = attrs[INET_DIAG_TCLASS][0]  # a real IPv6 peer: packets carry the traffic class
    info = attrs.get(INET_DIAG_INFO, b"")
    values = {
        name: (struct.unpack_from(fmt, info, at)[0] if len(info) >= at + struct.calcsize(fmt) else 0)
        for name, (at, fmt) in _TCPI_FIELDS.items()
    }
    return Flow(
        local=local,
        local_port=int.from_bytes(sport, "big"),
        peer=peer,
        peer_port=int.from_bytes(dport, "big"),
        dscp=tos >> 2,
        inode=inode,
        **values,
    )


def parse_diag_dump(data: bytes, seq: int) -> tuple[list[Flow], bool]:
    """Decodes one datagram of a dump's answer; returns the flows and whether NLMSG_DONE was seen.
    Messages of another request (sequence number) are skipped; an error ACK is OSError(errno), a
    message that does not fit OSError(EBADMSG) (netlink.iter_messages)."""
    flows: list[Flow] = []
    for kind, msg_seq, raw in iter_messages(data, "sock_diag"):
        if msg_seq != seq:
            continue
        if kind == NLMSG_DONE:
            return flows, True
        if kind == NLMSG_ERROR:
            code = error_code(raw, "sock_diag")
            if code:
                raise OSError(code, f"sock_diag: {os.strerror(code)}")
        elif kind == SOCK_DIAG_BY_FAMILY:
            flows.append(flow_from_diag(raw, NLMSGHDR.size, len(raw)))
    return flows, False


class FlowDiscovery:
    """Reads the namespace's TCP sockets over one long-lived netlink socket; thread-safe, so the API and the
    metrics endpoint can share it."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._seq = itertools.count(1)
        self._buf = bytearray(1 << 16)

    def _socket(self) -> socket.socket:
        if self._sock is None:
            sock = netns_socket(self.netns, socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
            sock.settimeout(5)
            sock.bind((0, 0))
            self._sock = sock
        return self._sock

    def _dump(self, states: int, extensions: int) -> Iterator[Flow]:
        with self._lock:
            try:
                sock = self._socket()
                out: list[Flow] = []
                for family in (socket.AF_INET, socket.AF_INET6):
                    seq = next(self._seq) & 0xFFFFFFFF
                    sock.send(diag_request(states, extensions, family, seq))
                    done = False
                    while not done:
                        n = sock.recv_into(self._buf)
                        flows, done = parse_diag_dump(bytes(self._buf[:n]), seq)
                        out += flows
            except Exception:
                # A broken socket (e.g. the namespace went away, a timeout mid-dump) must not stay cached.
                self._drop_socket()
                raise
        return iter(out)

    def flows(self) -> list[Flow]:
        """Every established TCP connection, IPv4 and IPv6."""
        return list(self._dump(1 << TCP_ESTABLISHED, _EXTENSIONS))

    def listeners(self) -> set[tuple[str, int]]:
        """(address, port) of every listening TCP socket; a wildcard bind is reported as '0.0.0.0' or '::'."""
        return {f.local_endpoint for f in self._dump(1 << TCP_LISTEN, 0)}

    def _drop_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def close(self) -> None:
        with self._lock:
            self._drop_socket()

    def __enter__(self) -> FlowDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
