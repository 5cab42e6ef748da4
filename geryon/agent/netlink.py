"""Netlink framing and one request/answer exchange, shared by the agent's netlink clients (dcbnl, VLAN).

The layouts are include/uapi/linux/netlink.h: struct nlmsghdr (len, type, flags, seq, pid), struct
nlmsgerr (an int error, then the request's header), struct nlattr (u16 len, u16 type), messages and
attributes aligned to 4 bytes (NLMSG_ALIGNTO, NLA_ALIGNTO). nla_len/nlmsg_len count the header and the
payload but not the padding after it; a reader steps over the padding. The checks on lengths are the
kernel's nlmsg_ok/nla_ok (include/net/netlink.h): a header that fits, a length at least the header's and
no longer than what is left. Bytes left over after the last whole attribute are ignored, as
nla_for_each_attr does.

When the kernel answers (net/netlink/af_netlink.c, netlink_rcv_skb): a request's reply, if it has one,
comes first; then an NLMSG_ERROR ACK when the request set NLM_F_ACK or failed (error 0 = done, else a
negative errno). A request without NLM_F_ACK that succeeds gets its reply and nothing else. `exchange`
follows exactly that, so it must not be used for dumps (NLM_F_DUMP, many replies, NLMSG_DONE).

Dumps (sock_diag, geryon.agent.flows) use the framing here (nlmsg, iter_messages, error_code, nlas) with
their own read loop. The socket comes from a factory in each client so tests put a fake kernel exactly
at `NetlinkSock`.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF
NLMSGHDR = struct.Struct("=IHHII")
NLATTR = struct.Struct("=HH")
NLMSGERR_CODE = struct.Struct("=i")  # struct nlmsgerr's first field, right after the nlmsghdr
_ALIGN = 4  # NLMSG_ALIGNTO == NLA_ALIGNTO

RECV_SIZE = 65536
REPLY_TIMEOUT_S = 5.0
# The kernel answers a request with at most two datagrams (reply, ACK). A few more may be stale answers
# to an earlier request that timed out; this many reads without the answer means the peer is not
# answering this request, and the client says so instead of reading forever.
MAX_READS = 32


class NetlinkSock(Protocol):
    """The socket boundary: what a client needs from a netlink socket."""

    def send(self, data: bytes, /) -> int: ...
    def recv(self, bufsize: int, /) -> bytes: ...
    def close(self) -> None: ...


def _align(n: int) -> int:
    return (n + _ALIGN - 1) & ~(_ALIGN - 1)


def nla(attr_type: int, payload: bytes) -> bytes:
    """One attribute: header, payload, zero padding to 4 bytes (nla_len leaves the padding out)."""
    raw = NLATTR.pack(NLATTR.size + len(payload), attr_type) + payload
    return raw + b"\0" * (_align(len(raw)) - len(raw))


def nlas(data: bytes) -> list[tuple[int, bytes]]:
    """(type without the NLA_F_NESTED/NLA_F_NET_BYTEORDER flags, payload) for each attribute, in order.
    Raises ValueError naming the attribute whose length does not fit (nla_ok)."""
    out = []
    off = 0
    while off + NLATTR.size <= len(data):
        length, atype = NLATTR.unpack_from(data, off)
        if length < NLATTR.size or off + length > len(data):
            raise ValueError(f"attribute {atype & NLA_TYPE_MASK} at {off}: bad length {length}")
        out.append((atype & NLA_TYPE_MASK, data[off + NLATTR.size : off + length]))
        off += _align(length)
    return out


def nlmsg(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    """One message: nlmsghdr (pid 0: the kernel fills in the sender's port) and the body."""
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body


def iter_messages(data: bytes, where: str) -> Iterator[tuple[int, int, bytes]]:
    """Split one datagram into (type, seq, whole message bytes). A message whose length does not fit
    (nlmsg_ok) is OSError(EBADMSG) starting with `where`."""
    offset = 0
    while offset + NLMSGHDR.size <= len(data):
        length, mtype, _flags, seq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > len(data):
            raise OSError(errno.EBADMSG, f"{where}: truncated netlink message (length {length})")
        yield mtype, seq, data[offset : offset + length]
        offset += _align(length)


def error_code(raw: bytes, where: str) -> int:
    """The errno an NLMSG_ERROR message carries (0: an ACK); OSError(EBADMSG) starting with `where` when
    it is too short to hold one."""
    if len(raw) < NLMSGHDR.size + NLMSGERR_CODE.size:
        raise OSError(errno.EBADMSG, f"{where}: truncated error message ({len(raw)} bytes)")
    code: int = NLMSGERR_CODE.unpack_from(raw, NLMSGHDR.size)[0]
    return -code


def exchange(
    sock: NetlinkSock,
    request: bytes,
    where: str,
    error: Callable[[int], OSError] | None = None,
) -> bytes:
    """Send one request and read its answer: the reply message (b"" when the kernel sent none).

    The request's own header says what to wait for: with NLM_F_ACK the answer ends at the ACK (or an
    NLMSG_DONE) and the last reply before it is returned; without, the first message is the answer.
    Messages with another sequence number are stale answers to earlier requests and are skipped. An
    error ACK raises `error(errno)` (default: OSError naming `where` and the errno). Every other failure
    is an OSError whose text starts with `where`: EPIPE when the socket closes, EBADMSG for a message
    that does not fit, EPROTO after MAX_READS datagrams without the answer.
    """
    _len, _type, flags, seq, _pid = NLMSGHDR.unpack_from(request)
    until_ack = bool(flags & NLM_F_ACK)
    sock.send(request)
    reply = b""
    for _ in range(MAX_READS):
        data = sock.recv(RECV_SIZE)
        if not data:
            raise OSError(errno.EPIPE, f"{where}: netlink socket closed")
        for mtype, mseq, raw in iter_messages(data, where):
            if mseq != seq:
                continue  # a stale answer to an earlier request
            if mtype == NLMSG_ERROR:
                code = error_code(raw, where)
                if code:
                    raise error(code) if error is not None else OSError(code, f"{where}: {os.strerror(code)}")
                return reply
            if mtype == NLMSG_DONE:
                return reply
            if not until_ack:
                return raw
            reply = raw
    raise OSError(errno.EPROTO, f"{where}: no answer to request {seq} in {MAX_READS} reads")


@contextmanager
def in_netns(netns: str | None) -> Iterator[None]:
    """Run the body inside network namespace `netns` (None: where we are)."""
    if netns is None:
        yield
        return
    from pyroute2 import netns as pyroute2_netns

    pyroute2_netns.pushns(netns)
    try:
        yield
    finally:
        pyroute2_netns.popns()


def netlink_route_socket(netns: str | None = None) -> socket.socket:
    """A NETLINK_ROUTE socket, opened inside `netns` when given (a socket stays in the namespace it
    was opened in)."""
    with in_netns(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        sock.settimeout(REPLY_TIMEOUT_S)  # the kernel answers at once; never hang the daemon on a lost reply
    except OSError:
        sock.close()
        raise
    return sock
