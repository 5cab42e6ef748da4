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
Numbers are include/uapi/linux/if_link.h, rtnetlink.h; the framing, socket and request/ACK exchange are
geryon/agent/netlink.py's. The socket comes from a factory so the tests put a fake kernel at it (this
kernel has no 8021q; tests/agent/vlan_fake.py).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from geryon.agent.netlink import (
    NLM_F_ACK,
    NLM_F_REQUEST,
    NLMSGHDR,
    NetlinkSock,
    exchange,
    netlink_route_socket,
    nla,
    nlas,
    nlmsg,
)

RTM_NEWLINK, RTM_GETLINK = 16, 18
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


@dataclass(frozen=True)
class Link:
    """What RTM_GETLINK says about a device: its index, link kind ("" for a physical NIC) and, for a
    VLAN device, its VLAN id and egress map (skb priority -> PCP, the entries the kernel reports)."""

    ifname: str
    index: int
    kind: str
    vlan_id: int | None = None
    egress: dict[int, int] = field(default_factory=dict)


def encode_getlink(ifname: str, seq: int) -> bytes:
    body = IFINFOMSG.pack(0, 0, 0, 0, 0)
    body += nla(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS))
    body += nla(IFLA_IFNAME, ifname.encode() + b"\0")
    return nlmsg(RTM_GETLINK, NLM_F_REQUEST, seq, body)


def encode_egress_qos(index: int, mappings: Iterable[tuple[int, int]], seq: int) -> bytes:
    """RTM_NEWLINK changing only the egress map entries given (the kernel leaves the others alone)."""
    maps = b""
    for skb_prio, pcp in mappings:
        if not 0 <= skb_prio <= SKB_PRIORITY_MAX or not 0 <= pcp <= PCP_MAX:
            # The kernel would mask a PCP of 8 to 0 and say nothing: refuse it here.
            raise ValueError(
                f"egress map {skb_prio}:{pcp}: skb priority 0-{SKB_PRIORITY_MAX}, PCP 0-{PCP_MAX}"
            )
        maps += nla(IFLA_VLAN_QOS_MAPPING, QOS_MAPPING.pack(skb_prio, pcp))
    data = nla(IFLA_VLAN_EGRESS_QOS, maps)
    linkinfo = nla(IFLA_INFO_KIND, b"vlan") + nla(IFLA_INFO_DATA, data)
    body = IFINFOMSG.pack(0, 0, index, 0, 0) + nla(IFLA_LINKINFO, linkinfo)
    return nlmsg(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, body)


def decode_link(raw: bytes) -> Link:
    """An RTM_NEWLINK message (the GETLINK reply) -> Link. Raises ValueError on malformed bytes."""
    if len(raw) < NLMSGHDR.size + IFINFOMSG.size:
        raise ValueError("short RTM_NEWLINK")
    _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(raw, NLMSGHDR.size)
    attrs = dict(nlas(raw[NLMSGHDR.size + IFINFOMSG.size :]))
    ifname = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode(errors="replace")
    kind, vlan_id, egress = "", None, {}
    if IFLA_LINKINFO in attrs:
        info = dict(nlas(attrs[IFLA_LINKINFO]))
        kind = info.get(IFLA_INFO_KIND, b"").split(b"\0", 1)[0].decode(errors="replace")
        if kind == "vlan" and IFLA_INFO_DATA in info:
            data = dict(nlas(info[IFLA_INFO_DATA]))
            if IFLA_VLAN_ID in data:
                (vlan_id,) = struct.unpack_from("=H", data[IFLA_VLAN_ID])
            for atype, payload in nlas(data.get(IFLA_VLAN_EGRESS_QOS, b"")):
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

    def get_link(self, ifname: str) -> Link:
        seq = next(self._seq) & 0xFFFFFFFF
        raw = exchange(self._sock, encode_getlink(ifname, seq), f"rtnetlink get link {ifname}")
        if not raw:
            raise OSError(errno.EBADMSG, f"rtnetlink get link {ifname}: the kernel sent no link")
        try:
            return decode_link(raw)
        except (ValueError, struct.error) as e:
            raise OSError(errno.EBADMSG, f"rtnetlink get link {ifname}: malformed reply ({e})") from None

    def set_egress(self, index: int, mappings: Iterable[tuple[int, int]]) -> None:
        seq = next(self._seq) & 0xFFFFFFFF
        exchange(
            self._sock,
            encode_egress_qos(index, mappings, seq),
            f"rtnetlink set egress-qos-map of ifindex {index}",
        )
