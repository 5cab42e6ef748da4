"""The shared netlink framing and request/answer exchange (geryon/agent/netlink.py).

Against this machine's kernel where it can answer without privileges (RTM_GETLINK of `lo` and of a
device that does not exist); the answers a working kernel never sends (truncated messages, endless
stale answers, a closed socket) come from a scripted socket whose bytes follow netlink_ack and
nlmsg_ok (net/netlink/af_netlink.c, include/net/netlink.h).
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import deque
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geryon.agent import netlink
from geryon.agent.netlink import NLMSG_DONE, NLMSG_ERROR, exchange, nla, nlas, nlmsg

RTM_NEWLINK, RTM_GETLINK = 16, 18
IFLA_IFNAME, IFLA_MTU = 3, 4
IFINFOMSG = struct.Struct("=BxHiII")
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4


def getlink(ifname: str, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    return nlmsg(
        RTM_GETLINK, flags, seq, IFINFOMSG.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, ifname.encode() + b"\0")
    )


def ack(seq: int, code: int = 0) -> bytes:
    """netlink_ack with NLM_F_CAPPED: struct nlmsgerr = int error, then the request's nlmsghdr."""
    return nlmsg(NLMSG_ERROR, 0x100, seq, struct.pack("=i", code) + bytes(16))


def reply(seq: int, tag: bytes = b"") -> bytes:
    assert len(tag) % 4 == 0  # messages in one datagram stand at 4-byte boundaries
    return nlmsg(RTM_NEWLINK, 0, seq, IFINFOMSG.pack(0, 0, 1, 0, 0) + tag)


class Script:
    """A socket that answers each recv with the next scripted datagram; when none is left it times out,
    as a real netlink socket with a timeout does."""

    def __init__(self, *datagrams: bytes, forever: bytes | None = None):
        self.sent: list[bytes] = []
        self.reads = 0
        self._queue = deque(datagrams)
        self._forever = forever

    def send(self, data: bytes, /) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, bufsize: int, /) -> bytes:
        self.reads += 1
        if self._queue:
            return self._queue.popleft()
        if self._forever is not None:
            return self._forever
        raise TimeoutError("timed out")

    def close(self) -> None:
        pass


@pytest.fixture
def route() -> Iterator[socket.socket]:
    sock = netlink.netlink_route_socket()
    yield sock
    sock.close()


# --- framing ---------------------------------------------------------------------------------------


def test_nla_pads_to_four_bytes_and_its_length_leaves_the_padding_out() -> None:
    assert nla(1, b"abc") == b"\x07\x00\x01\x00abc\x00"
    assert nla(2, b"") == b"\x04\x00\x02\x00"
    assert nla(3, b"abcd") == b"\x08\x00\x03\x00abcd"


def test_nlas_masks_the_nested_flag_and_steps_over_padding() -> None:
    data = nla(1 | netlink.NLA_F_NESTED, nla(2, b"x")) + nla(3, b"yz") + b"\0\0"  # 2 bytes left over
    assert nlas(data) == [(1, nla(2, b"x")), (3, b"yz")]


@pytest.mark.parametrize("bad", [b"\x03\x00\x01\x00", b"\x09\x00\x05\x00abcd"])
def test_nlas_refuses_an_attribute_whose_length_does_not_fit(bad: bytes) -> None:
    with pytest.raises(ValueError, match=r"attribute [15] at 0: bad length [39]"):
        nlas(bad)


@given(st.lists(st.tuples(st.integers(0, netlink.NLA_TYPE_MASK), st.binary(max_size=40)), max_size=8))
def test_nlas_reads_back_what_nla_writes(attrs: list[tuple[int, bytes]]) -> None:
    assert nlas(b"".join(nla(t, p) for t, p in attrs)) == attrs


def test_framing_reads_the_kernels_own_reply(route: socket.socket) -> None:
    route.send(getlink("lo", 11))
    ((mtype, seq, raw),) = list(netlink.iter_messages(route.recv(netlink.RECV_SIZE), "test"))
    assert (mtype, seq) == (RTM_NEWLINK, 11)
    attrs = dict(nlas(raw[16 + IFINFOMSG.size :]))
    assert attrs[IFLA_IFNAME] == b"lo\0"
    assert struct.unpack("=I", attrs[IFLA_MTU])[0] > 0


def test_iter_messages_names_the_caller_on_a_truncated_message() -> None:
    whole = reply(1)
    with pytest.raises(OSError, match=r"^\[Errno \d+\] where: truncated netlink message \(length 32\)") as e:
        list(netlink.iter_messages(whole[:-4], "where"))
    assert e.value.errno == errno.EBADMSG


# --- the exchange against the kernel -------------------------------------------------------------


def test_without_ack_the_kernels_reply_is_the_answer(route: socket.socket) -> None:
    raw = exchange(route, getlink("lo", 21), "get lo")
    assert struct.unpack_from("=IHHI", raw)[1:4:2] == (RTM_NEWLINK, 21)


def test_with_ack_the_reply_before_the_ack_is_the_answer(route: socket.socket) -> None:
    raw = exchange(route, getlink("lo", 22, NLM_F_REQUEST | NLM_F_ACK), "get lo")
    assert struct.unpack_from("=IHHI", raw)[1:4:2] == (RTM_NEWLINK, 22)
    route.settimeout(0.2)
    with pytest.raises(TimeoutError):
        route.recv(netlink.RECV_SIZE)  # the ACK was read too: nothing is left for the next request


def test_an_error_ack_raises_the_kernels_errno_naming_the_request(route: socket.socket) -> None:
    with pytest.raises(OSError, match=r"get nosuch0: No such device$") as e:
        exchange(route, getlink("nosuch0", 23), "get nosuch0")
    assert e.value.errno == errno.ENODEV


def test_an_error_ack_goes_through_the_callers_mapping(route: socket.socket) -> None:
    class Gone(OSError):
        pass

    with pytest.raises(Gone) as e:
        exchange(route, getlink("nosuch0", 24), "get", lambda code: Gone(code, f"mapped {code}"))
    assert e.value.errno == errno.ENODEV and str(e.value).endswith(f"mapped {errno.ENODEV}")


# --- answers the kernel does not give, scripted --------------------------------------------------


def test_stale_answers_with_another_seq_are_skipped() -> None:
    sock = Script(ack(4, -errno.EIO) + reply(4, b"old."), reply(5, b"new.") + ack(5))
    assert exchange(sock, getlink("x", 5, NLM_F_REQUEST | NLM_F_ACK), "get x") == reply(5, b"new.")
    assert sock.sent == [getlink("x", 5, NLM_F_REQUEST | NLM_F_ACK)]


def test_with_ack_the_last_reply_before_the_ack_is_kept_and_done_ends_too() -> None:
    request = getlink("x", 6, NLM_F_REQUEST | NLM_F_ACK)
    assert exchange(Script(reply(6, b"aaaa"), reply(6, b"bbbb"), ack(6)), request, "w") == reply(6, b"bbbb")
    assert exchange(Script(reply(6, b"aaaa"), nlmsg(NLMSG_DONE, 0, 6, bytes(4))), request, "w") == reply(
        6, b"aaaa"
    )
    assert exchange(Script(ack(6)), request, "w") == b""


def test_without_ack_the_first_message_is_the_answer() -> None:
    sock = Script(reply(7, b"aaaa") + ack(7), reply(7, b"bbbb"))
    assert exchange(sock, getlink("x", 7), "w") == reply(7, b"aaaa")
    assert sock.reads == 1


def test_a_truncated_message_is_ebadmsg_naming_the_request() -> None:
    with pytest.raises(OSError, match=r"get x: truncated netlink message \(length 32\)") as e:
        exchange(Script(reply(8)[:-4]), getlink("x", 8), "get x")
    assert e.value.errno == errno.EBADMSG


def test_a_truncated_error_message_is_ebadmsg_not_a_struct_error() -> None:
    with pytest.raises(OSError, match=r"get x: truncated error message \(18 bytes\)") as e:
        exchange(Script(nlmsg(NLMSG_ERROR, 0, 9, b"\xff\xff")), getlink("x", 9), "get x")
    assert e.value.errno == errno.EBADMSG


def test_a_closed_socket_is_epipe() -> None:
    with pytest.raises(OSError, match="get x: netlink socket closed") as e:
        exchange(Script(b""), getlink("x", 10), "get x")
    assert e.value.errno == errno.EPIPE


def test_the_read_loop_is_bounded() -> None:
    sock = Script(forever=reply(99) + ack(99))  # a peer that keeps answering some other request
    with pytest.raises(OSError, match=f"get x: no answer to request 12 in {netlink.MAX_READS} reads") as e:
        exchange(sock, getlink("x", 12), "get x")
    assert e.value.errno == errno.EPROTO
    assert sock.reads == netlink.MAX_READS


def test_no_answer_at_all_is_the_sockets_timeout() -> None:
    with pytest.raises(TimeoutError):
        exchange(Script(), getlink("x", 13), "get x")
