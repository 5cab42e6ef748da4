"""A VLAN device's egress priority map (skb priority -> 802.1p PCP) over rtnetlink.

With PCP trust (RoCEv1, or a switch that classifies by the VLAN tag) the priority a frame is queued
under at the switch and in the peer's NIC is the PCP in its 802.1Q tag, and Linux writes that PCP
from the VLAN device's egress map: vlan_dev_get_egress_qos_mask(dev, skb->priority). RDMA-CM takes
the same map for RoCE (iboe_tos_to_sl: egress map of rt_tos2priority(tos), unless the real device has
tc traffic classes, num_tc, whose prio->TC map it then uses).

The requests are the ones iproute2 sends (`ip link set DEV type vlan egress-qos-map FROM:TO ...`, 6.1,
captured with an LD_PRELOAD shim; tests/agent/test_vlan.py compares them byte for byte):
  RTM_GETLINK  ifinfomsg{} IFLA_EXT_MASK(RTEXT_FILTER_VF|RTEXT_FILTER_SKIP_STATS) IFLA_IFNAME
  RTM_NEWLINK  ifinfomsg{index} IFLA_LINKINFO{IFLA_INFO_KIND "vlan", IFLA_INFO_DATA{
               IFLA_VLAN_EGRESS_QOS{IFLA_VLAN_QOS_MAPPING{u32 from, u32 to}...}}}
(no NLA_F_NESTED on the nests, the kind without its NUL, as iproute2's addattr_nest/addattr_l write).
The kernel side is net/8021q/vlan_netlink.c: vlan_validate (each mapping at least 8 bytes, else
-ERANGE), vlan_changelink (vlan_dev_set_egress_priority per mapping; PCP masked to 3 bits) and
vlan_fill_info (the map in the RTM_NEWLINK reply, as IFLA_VLAN_QOS_MAPPING entries). A mapping to 0
is the same as none: the kernel keeps the entry with PCP 0, which tags the frame like no entry does.
Numbers are include/uapi/linux/if_link.h, rtnetlink.h, netlink.h. The socket comes from a factory so
the tests put a fake kernel at it (this kernel has no 8021q; tests/agent/vlan_fake.py).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from geryon.agent.dcbnl import NLMSGHDR, NetlinkSock, iter_messages, netlink_route_socket

RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF
IFLA_IFNAME, IFLA_LINKINFO, IFLA_EXT_MASK = 3, 18, 29
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_VLAN_ID, IFLA_VLAN_EGRESS_QOS = 1, 3
IFLA_VLAN_QOS_MAPPING = 1
RTEXT_FILTER_VF, RTEXT_FILTER_SKIP_STATS = 1 << 0, 1 << 3
# struct ifinfomsg: u8 family, pad, u16 type, i32 index, u32 flags, u32 change
IFINFOMSG = struct.Struct("=BxHiII")
# struct ifla_vlan_qos_mapping: u32 from (skb priority), u32 to (PCP 0-7)
QOS_MAPPING = struct.Struct("=II")
PCP_MAX = 7
SKB_PRIORITY_MAX = 2**32 - 1
_RECV_SIZE = 65536


@dataclass(frozen=True)
class Link:
    """What RTM_GETLINK says about a device: its index, link kind ("" for a physical NIC) and, for a
    VLAN device, its VLAN id and egress map (skb priority -> PCP, the entries the kernel reports)."""

    ifname: str
    index: int
    kind: str
    vlan_id: int | None = None
    egress: dict[int, int] = field(default_factory=dict)


def _nla(attr_type: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), attr_type) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _nlas(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    off = 0
    while off + 4 <= len(data):
        length, atype = struct.unpack_from("=HH", data, off)
        if length < 4 or off + length > len(data):
            raise ValueError(f"attribute {atype & NLA_TYPE_MASK} at {off}: bad length {length}")
        out.append((atype & NLA_TYPE_MASK, data[off + 4 : off + length]))
        off += (length + 3) & ~3
    return out


def _header(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body


def encode_getlink(ifname: str, seq: int) -> bytes:
    body = IFINFOMSG.pack(0, 0, 0, 0, 0)
    body += _nla(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS))
    body += _nla(IFLA_IFNAME, ifname.encode() + b"\0")
    return _header(RTM_GETLINK, NLM_F_REQUEST, seq, body)


def encode_egress_qos(index: int, mappings: Iterable[tuple[int, int]], seq: int) -> bytes:
    """RTM_NEWLINK changing only the egress map entries given (the kernel leaves the others alone)."""
    maps = b""
    for skb_prio, pcp in mappings:
        if not 0 <= skb_prio <= SKB_PRIORITY_MAX or not 0 <= pcp <= PCP_MAX:
            # The kernel would mask a PCP of 8 to 0 and say nothing: refuse it here.
            raise ValueError(
                f"egress map {skb_prio}:{pcp}: skb priority 0-{SKB_PRIORITY_MAX}, PCP 0-{PCP_MAX}"
            )
        maps += _nla(IFLA_VLAN_QOS_MAPPING, QOS_MAPPING.pack(skb_prio, pcp))
    data = _nla(IFLA_VLAN_EGRESS_QOS, maps)
    linkinfo = _nla(IFLA_INFO_KIND, b"vlan") + _nla(IFLA_INFO_DATA, data)
    body = IFINFOMSG.pack(0, 0, index, 0, 0) + _nla(IFLA_LINKINFO, linkinfo)
    return _header(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, body)


def decode_link(raw: bytes) -> Link:
    """An RTM_NEWLINK message (the GETLINK reply) -> Link. Raises ValueError on malformed bytes."""
    if len(raw) < NLMSGHDR.size + IFINFOMSG.size:
        raise ValueError("short RTM_NEWLINK")
    _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(raw, NLMSGHDR.size)
    attrs = dict(_nlas(raw[NLMSGHDR.size + IFINFOMSG.size :]))
    ifname = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode(errors="replace")
    kind, vlan_id, egress = "", None, {}
    if IFLA_LINKINFO in attrs:
        info = dict(_nlas(attrs[IFLA_LINKINFO]))
        kind = info.get(IFLA_INFO_KIND, b"").split(b"\0", 1)[0].decode(errors="replace")
        if kind == "vlan" and IFLA_INFO_DATA in info:
            data = dict(_nlas(info[IFLA_INFO_DATA]))
            if IFLA_VLAN_ID in data:
                (vlan_id,) = struct.unpack_from("=H", data[IFLA_VLAN_ID])
            for atype, payload in _nlas(data.get(IFLA_VLAN_EGRESS_QOS, b"")):
                if atype == IFLA_VLAN_QOS_MAPPING and len(payload) >= QOS_MAPPING.size:
                    skb_prio, pcp = QOS_MAPPING.unpack_from(payload)
                    egress[skb_prio] = pcp
    return Link(ifname, index, kind, vlan_id, egress)


class VlanClient:
    """Reads links and sets VLAN egress map entries. Errors are OSError with the kernel's errno
    (ENODEV: no such device; EOPNOTSUPP: not a VLAN device, or no 8021q in the kernel)."""

    def __init__(self, sock_factory: Callable[[], NetlinkSock] | None = None, *, netns: str | None = None):
        self._sock: NetlinkSock = sock_factory() if sock_factory is not None else netlink_route_socket(netns)
        self._seq = itertools.count(int.from_bytes(os.urandom(2), "little") + 1)

    def close(self) -> None:
        self._sock.close()

    def _talk(self, request: bytes, seq: int, what: str) -> bytes:
        """Send; return the reply message for `seq` (b"" for a plain ACK); raise on an error ACK."""
        self._sock.send(request)
        while True:
            data = self._sock.recv(_RECV_SIZE)
            if not data:
                raise OSError(errno.EPIPE, f"rtnetlink {what}: socket closed")
            for mtype, mseq, raw in iter_messages(data):
                if mseq != seq:
                    continue
                if mtype == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", raw, NLMSGHDR.size)
                    if code:
                        raise OSError(-code, f"rtnetlink {what}: {os.strerror(-code)}")
                    return b""
                return raw

    def get_link(self, ifname: str) -> Link:
        seq = next(self._seq) & 0xFFFFFFFF
        raw = self._talk(encode_getlink(ifname, seq), seq, f"get link {ifname}")
        if not raw:
            raise OSError(errno.EBADMSG, f"rtnetlink get link {ifname}: the kernel sent no link")
        try:
            return decode_link(raw)
        except (ValueError, struct.error) as e:
            raise OSError(errno.EBADMSG, f"rtnetlink get link {ifname}: malformed reply ({e})") from None

    def set_egress(self, index: int, mappings: Iterable[tuple[int, int]]) -> None:
        seq = next(self._seq) & 0xFFFFFFFF
        self._talk(encode_egress_qos(index, mappings, seq), seq, f"set egress-qos-map of ifindex {index}")
