"""A fake kernel at the rtnetlink SOCKET boundary for VLAN devices, because this kernel has no 8021q.

It parses RTM_GETLINK / RTM_NEWLINK bytes and answers as the kernel does, shaped from its code:
- rtnl_getlink: the device by IFLA_IFNAME (or ifi_index); -ENODEV when there is none; the reply is an
  RTM_NEWLINK with ifinfomsg, IFLA_IFNAME and IFLA_LINKINFO{IFLA_INFO_KIND (nla_put_string: with its
  NUL), IFLA_INFO_DATA (vlan_fill_info)} for devices with rtnl_link_ops; no ACK without NLM_F_ACK.
- rtnl_newlink on an existing device with IFLA_INFO_DATA: the kind's ops must be the device's own
  (rtnl_changelink: `ops != dev->rtnl_link_ops` -> -EOPNOTSUPP, also when 8021q is absent), then
  vlan_validate (an IFLA_VLAN_QOS_MAPPING shorter than struct ifla_vlan_qos_mapping: -ERANGE, from
  nla_validate_nested_deprecated with vlan_map_policy), then vlan_changelink ->
  vlan_dev_set_egress_priority per IFLA_VLAN_QOS_MAPPING (other attribute types skipped,
  nla_for_each_nested_type).
- vlan_dev_set_egress_priority (net/8021q/vlan_dev.c): entries hashed by skb_prio & 0xF, a new one
  pushed at the head of its bucket; vlan_qos = (pcp << 13) & 0xE000 (a PCP of 8 becomes 0); an entry set
  to 0 stays, and nr_egress_mappings counts the nonzero ones.
- vlan_fill_info: IFLA_VLAN_PROTOCOL (be16), IFLA_VLAN_ID, IFLA_VLAN_FLAGS when set, and the egress nest
  (nla_nest_start_noflag) only while nr_egress_mappings > 0, every entry (those at 0 too), bucket 0-15 in
  order, each bucket newest first.
Plain struct on purpose, independent of geryon.agent.vlan.
"""

from __future__ import annotations

import errno
import struct
from collections import deque
from dataclasses import dataclass, field

# The netlink header and attribute framing are the same on every netlink family: one copy, dcb_fake's.
from agent.dcb_fake import HDR, nla, parse_nlas

IFINFO = struct.Struct("=BxHiII")
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR = 2
NLM_F_ACK, NLM_F_CAPPED = 0x4, 0x100
IFLA_IFNAME, IFLA_LINKINFO = 3, 18
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_VLAN_ID, IFLA_VLAN_FLAGS, IFLA_VLAN_EGRESS_QOS, IFLA_VLAN_PROTOCOL = 1, 2, 3, 5
IFLA_VLAN_QOS_MAPPING = 1
VLAN_FLAG_REORDER_HDR = 0x1


@dataclass
class FakeLink:
    index: int
    kind: str = "vlan"  # "" = a physical NIC (no rtnl_link_ops), "veth", ...
    vlan_id: int = 100
    # egress_priority_map[16]: per bucket, [(skb_prio, vlan_qos)] newest first
    buckets: list[list[tuple[int, int]]] = field(default_factory=lambda: [[] for _ in range(16)])
    nr_egress: int = 0
    sets: int = 0  # RTM_NEWLINK requests that reached vlan_changelink

    def set_egress(self, skb_prio: int, pcp: int) -> None:
        vlan_qos = (pcp << 13) & 0xE000
        bucket = self.buckets[skb_prio & 0xF]
        for i, (prio, old) in enumerate(bucket):
            if prio == skb_prio:
                if old and not vlan_qos:
                    self.nr_egress -= 1
                elif not old and vlan_qos:
                    self.nr_egress += 1
                bucket[i] = (prio, vlan_qos)
                return
        bucket.insert(0, (skb_prio, vlan_qos))
        if vlan_qos:
            self.nr_egress += 1

    def egress_map(self) -> dict[int, int]:
        return {p: (q >> 13) & 7 for b in self.buckets for p, q in b if q}

    def fill_info(self) -> bytes:
        out = nla(IFLA_VLAN_PROTOCOL, struct.pack(">H", 0x8100)) + nla(
            IFLA_VLAN_ID, struct.pack("=H", self.vlan_id)
        )
        out += nla(IFLA_VLAN_FLAGS, struct.pack("=II", VLAN_FLAG_REORDER_HDR, 0xFFFFFFFF))
        if self.nr_egress:
            maps = b"".join(
                nla(IFLA_VLAN_QOS_MAPPING, struct.pack("=II", p, (q >> 13) & 7))
                for b in self.buckets
                for p, q in b
            )
            out += nla(IFLA_VLAN_EGRESS_QOS, maps)
        return out


class FakeRtnlKernel:
    def __init__(self, links: dict[str, FakeLink]):
        self.links = links
        self.requests: list[bytes] = []

    def socket(self) -> FakeRtnlSocket:
        return FakeRtnlSocket(self)

    def _by(self, index: int, name: str | None) -> tuple[str, FakeLink] | None:
        for ifname, link in self.links.items():
            if (name is not None and ifname == name) or (name is None and link.index == index):
                return ifname, link
        return None

    def handle(self, data: bytes) -> list[bytes]:
        self.requests.append(data)
        length, mtype, flags, seq, _pid = HDR.unpack_from(data)
        msg = data[:length]
        try:
            reply = self._doit(msg, mtype, seq)
        except OSError as e:
            return [self._ack(msg, seq, -e.errno if e.errno else -errno.EINVAL)]
        out = [reply] if reply else []
        if flags & NLM_F_ACK:
            out.append(self._ack(msg, seq, 0))
        return out

    def _doit(self, msg: bytes, mtype: int, seq: int) -> bytes:
        _fam, _type, index, _flags, _change = IFINFO.unpack_from(msg, HDR.size)
        attrs = dict(parse_nlas(msg[HDR.size + IFINFO.size :]))
        name = attrs[IFLA_IFNAME].split(b"\0")[0].decode() if IFLA_IFNAME in attrs else None
        found = self._by(index, name)
        if found is None:
            raise OSError(errno.ENODEV, "no such device")
        ifname, link = found
        if mtype == RTM_GETLINK:
            body = IFINFO.pack(0, 1, link.index, 0x1043, 0) + nla(IFLA_IFNAME, ifname.encode() + b"\0")
            if link.kind:
                info = nla(IFLA_INFO_KIND, link.kind.encode() + b"\0")
                if link.kind == "vlan":
                    info += nla(IFLA_INFO_DATA, link.fill_info())
                body += nla(IFLA_LINKINFO, info)
            return HDR.pack(HDR.size + len(body), RTM_NEWLINK, 0, seq, 0) + body
        if mtype != RTM_NEWLINK:
            raise OSError(errno.EOPNOTSUPP, "not handled by this fake")
        if IFLA_LINKINFO in attrs:
            info = dict(parse_nlas(attrs[IFLA_LINKINFO]))
            kind = info.get(IFLA_INFO_KIND, b"").split(b"\0")[0].decode()
            if IFLA_INFO_DATA in info:
                if kind != "vlan" or link.kind != "vlan":
                    raise OSError(errno.EOPNOTSUPP, "ops != dev->rtnl_link_ops")
                data = dict(parse_nlas(info[IFLA_INFO_DATA]))
                egress = parse_nlas(data.get(IFLA_VLAN_EGRESS_QOS, b""))
                if any(t == IFLA_VLAN_QOS_MAPPING and len(p) < 8 for t, p in egress):
                    raise OSError(errno.ERANGE, "vlan_map_policy: mapping too short")
                link.sets += 1
                for t, p in egress:
                    if t == IFLA_VLAN_QOS_MAPPING:
                        link.set_egress(*struct.unpack_from("=II", p))
        return b""

    @staticmethod
    def _ack(msg: bytes, seq: int, code: int) -> bytes:
        # netlink_ack: the error code and the request's header (NLM_F_CAPPED: payload left out)
        payload = struct.pack("=i", code) + msg[: HDR.size]
        return HDR.pack(HDR.size + len(payload), NLMSG_ERROR, NLM_F_CAPPED, seq, 0) + payload


class FakeRtnlSocket:
    def __init__(self, kernel: FakeRtnlKernel):
        self.kernel = kernel
        self._queue: deque[bytes] = deque()
        self.closed = False

    def send(self, data: bytes, /) -> int:
        self._queue.extend(self.kernel.handle(data))
        return len(data)

    def recv(self, bufsize: int, /) -> bytes:
        if not self._queue:
            raise TimeoutError("no reply pending")
        return self._queue.popleft()[:bufsize]

    def close(self) -> None:
        self.closed = True
