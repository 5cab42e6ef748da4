"""DCB netlink (dcbnl): IEEE 802.1Qaz ETS, 802.1Qbb PFC, the APP table and the APP trust order.

pyroute2 knows the message types RTM_GETDCB/RTM_SETDCB but has no dcbnl messages, so this module declares
them on pyroute2's nlmsg/nla classes and sends them over a plain AF_NETLINK/NETLINK_ROUTE socket (pyroute2
0.9's own sockets run on an asyncio core; a plain one keeps the boundary at bytes in, bytes out); the
socket and the request/ACK exchange are geryon/agent/netlink.py's, shared with vlan.py. The socket comes
from a factory so tests put a fake kernel exactly there (tests/agent/dcb_fake.py).

Numbers and layouts are the kernel's include/uapi/linux/dcbnl.h (names kept); the trust table is from
kernel 6.2 (DCB_ATTR_DCB_APP_TRUST_TABLE, DCB_ATTR_DCB_APP, DCB_APP_SEL_PCP).
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyroute2.netlink import NETLINK_ROUTE, NLM_F_ACK, NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.rtnl import RTM_GETDCB, RTM_SETDCB

from geryon.agent.netlink import NetlinkSock, exchange, in_netns, iter_messages, netlink_route_socket

# --- include/uapi/linux/dcbnl.h -------------------------------------------------------------------
IEEE_8021QAZ_MAX_TCS = 8
IEEE_8021QAZ_TSA_STRICT = 0
IEEE_8021QAZ_TSA_CB_SHAPER = 1
IEEE_8021QAZ_TSA_ETS = 2
IEEE_8021QAZ_TSA_VENDOR = 255
STRICT, CB_SHAPER, ETS, VENDOR = (
    IEEE_8021QAZ_TSA_STRICT,
    IEEE_8021QAZ_TSA_CB_SHAPER,
    IEEE_8021QAZ_TSA_ETS,
    IEEE_8021QAZ_TSA_VENDOR,
)
TSA_NAMES = {STRICT: "strict", CB_SHAPER: "cbs", ETS: "ets", VENDOR: "vendor"}

IEEE_8021QAZ_APP_SEL_ETHERTYPE = 1
IEEE_8021QAZ_APP_SEL_STREAM = 2
IEEE_8021QAZ_APP_SEL_DGRAM = 3
IEEE_8021QAZ_APP_SEL_ANY = 4
IEEE_8021QAZ_APP_SEL_DSCP = 5
DCB_APP_SEL_PCP = 255  # non-standard selector (kernel >= 6.2), carried in DCB_ATTR_DCB_APP

# include/uapi/linux/rtnetlink.h: the multicast group dcbnl_ieee_notify sends RTM_SETDCB events to after
# every IEEE set/del (a daemon can bind to it to see DCB changes made by other tools, e.g. mlnx_qos).
RTNLGRP_DCB = 23
RTMGRP_DCB = 1 << (RTNLGRP_DCB - 1)  # the legacy bind() group mask bit

# enum dcbnl_commands (the IEEE ones and the DCBX mode)
DCB_CMD_IEEE_SET = 20
DCB_CMD_IEEE_GET = 21
DCB_CMD_GDCBX = 22
DCB_CMD_SDCBX = 23
DCB_CMD_IEEE_DEL = 27

# DCB_ATTR_DCBX bits (DCB_CAP_DCBX_*): who runs DCBX, and which versions
DCB_CAP_DCBX_HOST = 0x01
DCB_CAP_DCBX_LLD_MANAGED = 0x02
DCB_CAP_DCBX_VER_CEE = 0x04
DCB_CAP_DCBX_VER_IEEE = 0x08
DCB_CAP_DCBX_STATIC = 0x10
# the names iproute2's dcb_dcbx.c prints (lld-managed as lld_managed, its JSON key)
DCBX_FLAGS = {
    DCB_CAP_DCBX_HOST: "host",
    DCB_CAP_DCBX_LLD_MANAGED: "lld_managed",
    DCB_CAP_DCBX_VER_CEE: "cee",
    DCB_CAP_DCBX_VER_IEEE: "ieee",
    DCB_CAP_DCBX_STATIC: "static",
}


def dcbx_names(mode: int) -> list[str]:
    """The DCBX bits as names, lowest bit first (an unknown bit as its hex value)."""
    return [DCBX_FLAGS.get(1 << b, hex(1 << b)) for b in range(8) if mode >> b & 1]


# enum dcbnl_attrs
DCB_ATTR_IFNAME = 1
DCB_ATTR_IEEE = 13
DCB_ATTR_DCBX = 14

# enum ieee_attrs
DCB_ATTR_IEEE_ETS = 1
DCB_ATTR_IEEE_PFC = 2
DCB_ATTR_IEEE_APP_TABLE = 3
DCB_ATTR_IEEE_PEER_ETS = 4
DCB_ATTR_IEEE_PEER_PFC = 5
DCB_ATTR_IEEE_PEER_APP = 6
DCB_ATTR_IEEE_MAXRATE = 7
DCB_ATTR_IEEE_QCN = 8
DCB_ATTR_IEEE_QCN_STATS = 9
DCB_ATTR_DCB_BUFFER = 10
DCB_ATTR_DCB_APP_TRUST_TABLE = 11
DCB_ATTR_DCB_REWR_TABLE = 12

# enum ieee_attrs_app
DCB_ATTR_IEEE_APP = 1
DCB_ATTR_DCB_APP = 2

# struct ieee_ets: __u8 willing, ets_cap, cbs; then 7 arrays of __u8[8]: tc_tx_bw, tc_rx_bw, tc_tsa,
# prio_tc, tc_reco_bw, tc_reco_tsa, reco_prio_tc.  sizeof = 59, no padding.
IEEE_ETS = struct.Struct("=BBB8s8s8s8s8s8s8s")
# struct ieee_pfc: __u8 pfc_cap, pfc_en, mbc; (1 pad) __u16 delay; (2 pad) __u64 requests[8], indications[8].
# sizeof = 136: delay at offset 4, requests at 8, indications at 72 (checked with gcc against the header).
IEEE_PFC = struct.Struct("=BBBxHxx8Q8Q")
# struct ieee_maxrate: __u64 tc_maxrate[8] in kbit/s (iproute2's dcb_maxrate.c divides bytes/s by 125);
# 0 = no limit.
IEEE_MAXRATE = struct.Struct("=8Q")
# struct dcbnl_buffer: __u8 prio2buffer[8]; __u32 buffer_size[8] (bytes); __u32 total_size. sizeof = 44.
DCBNL_BUFFER = struct.Struct("=8s8II")
DCBX_MAX_BUFFERS = 8
# struct dcb_app: __u8 selector; __u8 priority; __u16 protocol.
DCB_APP = struct.Struct("=BBH")
# struct dcbmsg: __u8 dcb_family; __u8 cmd; __u16 dcb_pad.
DCBMSG = struct.Struct("=BBH")


class DcbUnsupported(OSError):
    """The device has no DCB operations for this (EOPNOTSUPP), e.g. veth, or a kernel without the feature."""


def _u8s(values: Iterable[int], name: str, lo: int, hi: int) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if len(out) != IEEE_8021QAZ_MAX_TCS:
        raise ValueError(f"{name}: expected {IEEE_8021QAZ_MAX_TCS} values, got {len(out)}")
    for i, v in enumerate(out):
        if not lo <= v <= hi:
            raise ValueError(f"{name}[{i}]: {v} is outside {lo}..{hi}")
    return out


_ZEROS = (0,) * IEEE_8021QAZ_MAX_TCS


@dataclass(frozen=True)
class Ets:
    """IEEE 802.1Qaz ETS: per traffic class the selection algorithm and bandwidth; priority -> TC map.

    Built from a reply it holds whatever the driver reported: real drivers report shapes a request may not
    have (mlx5e_dcbnl_ieee_getets: strict and vendor TCs at 100%, a fresh NIC all vendor; ice_dcbnl_getets
    after ice_dcb_bwchk: a strict TC 0 at 100%; bnxt_dcbnl_ieee_getets in host mode before any set: all
    zero). So construction checks only the shape (8 bytes per table); `check_request` holds the rules for
    what Geryon sends. ets_cap (how many TCs the device has) is echoed back in a set, as iproute2's dcb does.
    """

    willing: bool = False
    tc_tsa: tuple[int, ...] = _ZEROS
    tc_tx_bw: tuple[int, ...] = _ZEROS
    prio_tc: tuple[int, ...] = _ZEROS
    ets_cap: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tc_tsa", _u8s(self.tc_tsa, "tc_tsa", 0, 255))
        object.__setattr__(self, "tc_tx_bw", _u8s(self.tc_tx_bw, "tc_tx_bw", 0, 255))
        object.__setattr__(self, "prio_tc", _u8s(self.prio_tc, "prio_tc", 0, 255))
        object.__setattr__(self, "willing", bool(self.willing))
        if not 0 <= int(self.ets_cap) <= 255:
            raise ValueError(f"ets_cap: {self.ets_cap} is outside 0..255")

    def check_request(self) -> None:
        """The rules for an ETS Geryon sends (ValueError naming the field): known TSAs, bandwidth only on
        ETS TCs (what iproute2's dcb enforces), ETS shares summing to 100 (mlx5e_dbcnl_validate_ets,
        ice_dcb_bwchk), every priority on a TC the device has (ets_cap, when it reported one)."""
        for i, v in enumerate(self.tc_tsa):
            if v not in TSA_NAMES:
                raise ValueError(
                    f"tc_tsa[{i}]: {v} is not one of {sorted(TSA_NAMES)} (strict, cbs, ets, vendor)"
                )
        for i, (t, b) in enumerate(zip(self.tc_tsa, self.tc_tx_bw, strict=True)):
            if b > 100:
                raise ValueError(f"tc_tx_bw[{i}]: {b} is outside 0..100")
            if t != ETS and b:
                raise ValueError(
                    f"tc_tx_bw[{i}]: {b}% on a TC whose tc_tsa is {TSA_NAMES[t]}; only ets TCs take a share"
                )
        if ETS in self.tc_tsa and sum(self.tc_tx_bw) != 100:
            raise ValueError(f"tc_tx_bw: the ets TCs' shares sum to {sum(self.tc_tx_bw)}, must be 100")
        tcs = self.ets_cap or IEEE_8021QAZ_MAX_TCS
        for p, tc in enumerate(self.prio_tc):
            if tc >= tcs:
                raise ValueError(f"prio_tc[{p}]: {tc} is outside 0..{tcs - 1} (the device has {tcs} TCs)")

    def as_request(self) -> Ets:
        """The same meaning in a form a set accepts: non-ETS TCs carry no bandwidth. Restoring a value read
        from mlx5 (strict/vendor TCs at 100%) needs this."""
        bw = tuple(b if t == ETS else 0 for t, b in zip(self.tc_tsa, self.tc_tx_bw, strict=True))
        return Ets(self.willing, self.tc_tsa, bw, self.prio_tc, ets_cap=self.ets_cap)

    def pack(self) -> bytes:
        """struct ieee_ets as the kernel reads it; rx and recommendation tables are left zero, as dcb does."""
        return IEEE_ETS.pack(
            int(self.willing),
            self.ets_cap,
            0,
            bytes(self.tc_tx_bw),
            bytes(_ZEROS),
            bytes(self.tc_tsa),
            bytes(self.prio_tc),
            bytes(_ZEROS),
            bytes(_ZEROS),
            bytes(_ZEROS),
        )

    @classmethod
    def unpack(cls, data: bytes) -> Ets:
        if len(data) < IEEE_ETS.size:
            raise ValueError(f"DCB_ATTR_IEEE_ETS: {len(data)} bytes, struct ieee_ets has {IEEE_ETS.size}")
        willing, ets_cap, _cbs, tx_bw, _rx_bw, tsa, prio_tc, *_reco = IEEE_ETS.unpack_from(data)
        return cls(bool(willing), tuple(tsa), tuple(tx_bw), tuple(prio_tc), ets_cap=ets_cap)


@dataclass(frozen=True)
class Pfc:
    """IEEE 802.1Qbb PFC. pfc_en is a bitmask of priorities; pfc_cap how many the device can make lossless.

    requests/indications are the device's pause counters per priority (read-only).
    """

    pfc_cap: int = 0
    pfc_en: int = 0
    mbc: int = 0
    delay: int = 0
    requests: tuple[int, ...] = field(default=_ZEROS, compare=False)
    indications: tuple[int, ...] = field(default=_ZEROS, compare=False)

    def __post_init__(self) -> None:
        for name, hi in (("pfc_cap", 255), ("pfc_en", 255), ("mbc", 255), ("delay", 0xFFFF)):
            v = getattr(self, name)
            if not 0 <= int(v) <= hi:
                raise ValueError(f"{name}: {v} is outside 0..{hi}")

    @property
    def priorities(self) -> tuple[int, ...]:
        return tuple(p for p in range(IEEE_8021QAZ_MAX_TCS) if self.pfc_en >> p & 1)

    def pack(self) -> bytes:
        return IEEE_PFC.pack(self.pfc_cap, self.pfc_en, self.mbc, self.delay, *_ZEROS, *_ZEROS)

    @classmethod
    def unpack(cls, data: bytes) -> Pfc:
        if len(data) < IEEE_PFC.size:
            raise ValueError(f"DCB_ATTR_IEEE_PFC: {len(data)} bytes, struct ieee_pfc has {IEEE_PFC.size}")
        cap, en, mbc, delay, *counters = IEEE_PFC.unpack_from(data)
        return cls(cap, en, mbc, delay, tuple(counters[:8]), tuple(counters[8:]))


@dataclass(frozen=True)
class Maxrate:
    """IEEE per-TC transmit rate limits (DCB_ATTR_IEEE_MAXRATE), kbit/s per TC; 0 = unlimited."""

    tc_maxrate: tuple[int, ...] = _ZEROS

    def __post_init__(self) -> None:
        rates = tuple(int(v) for v in self.tc_maxrate)
        if len(rates) != IEEE_8021QAZ_MAX_TCS:
            raise ValueError(f"tc_maxrate: expected {IEEE_8021QAZ_MAX_TCS} values, got {len(rates)}")
        for i, v in enumerate(rates):
            if not 0 <= v < 2**64:
                raise ValueError(f"tc_maxrate[{i}]: {v} is outside 0..2^64-1 kbit/s")
        object.__setattr__(self, "tc_maxrate", rates)

    def pack(self) -> bytes:
        return IEEE_MAXRATE.pack(*self.tc_maxrate)

    @classmethod
    def unpack(cls, data: bytes) -> Maxrate:
        if len(data) < IEEE_MAXRATE.size:
            raise ValueError(f"DCB_ATTR_IEEE_MAXRATE: {len(data)} bytes, struct ieee_maxrate has 64")
        return cls(tuple(IEEE_MAXRATE.unpack_from(data)))


@dataclass(frozen=True)
class Buffer:
    """The NIC's receive buffers (DCB_ATTR_DCB_BUFFER, `dcb buffer`): which buffer each priority lands in,
    each buffer's size in bytes, and the port's total (reported; a set echoes it, as dcb does)."""

    prio2buffer: tuple[int, ...] = _ZEROS
    buffer_size: tuple[int, ...] = _ZEROS
    total_size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "prio2buffer", _u8s(self.prio2buffer, "prio2buffer", 0, 255))
        sizes = tuple(int(v) for v in self.buffer_size)
        if len(sizes) != DCBX_MAX_BUFFERS:
            raise ValueError(f"buffer_size: expected {DCBX_MAX_BUFFERS} values, got {len(sizes)}")
        for i, v in enumerate((*sizes, self.total_size)):
            if not 0 <= v < 2**32:
                raise ValueError(f"buffer_size[{i}]: {v} is outside 0..2^32-1 bytes")
        object.__setattr__(self, "buffer_size", sizes)

    def check_request(self) -> None:
        for p, b in enumerate(self.prio2buffer):
            if b >= DCBX_MAX_BUFFERS:
                raise ValueError(f"prio2buffer[{p}]: {b} is outside 0..{DCBX_MAX_BUFFERS - 1}")

    def pack(self) -> bytes:
        return DCBNL_BUFFER.pack(bytes(self.prio2buffer), *self.buffer_size, self.total_size)

    @classmethod
    def unpack(cls, data: bytes) -> Buffer:
        if len(data) < DCBNL_BUFFER.size:
            raise ValueError(f"DCB_ATTR_DCB_BUFFER: {len(data)} bytes, struct dcbnl_buffer has 44")
        prio2buffer, *rest = DCBNL_BUFFER.unpack_from(data)
        return cls(tuple(prio2buffer), tuple(rest[:8]), rest[8])


def pfc_mask(priorities: Iterable[int]) -> int:
    mask = 0
    for p in priorities:
        if not 0 <= p < IEEE_8021QAZ_MAX_TCS:
            raise ValueError(f"priority {p} is outside 0..7")
        mask |= 1 << p
    return mask


@dataclass(frozen=True, order=True)
class App:
    """One APP table entry (struct dcb_app): selector 5 maps DSCP `protocol` to 802.1p `priority`."""

    selector: int
    protocol: int
    priority: int

    def __post_init__(self) -> None:
        if not 0 <= self.selector <= 255:
            raise ValueError(f"selector: {self.selector} is outside 0..255")
        if not 0 <= self.priority < IEEE_8021QAZ_MAX_TCS:
            raise ValueError(f"priority: {self.priority} is outside 0..7")
        hi = 63 if self.selector == IEEE_8021QAZ_APP_SEL_DSCP else 0xFFFF
        if not 0 <= self.protocol <= hi:
            raise ValueError(f"protocol: {self.protocol} is outside 0..{hi} for selector {self.selector}")

    @classmethod
    def dscp(cls, dscp: int, priority: int) -> App:
        return cls(IEEE_8021QAZ_APP_SEL_DSCP, dscp, priority)


def app_attr_type(selector: int) -> int:
    """Which nested attribute carries this selector (kernel's dcbnl_app_attr_type_get)."""
    if 1 <= selector <= IEEE_8021QAZ_APP_SEL_DSCP:
        return DCB_ATTR_IEEE_APP
    if selector == DCB_APP_SEL_PCP:
        return DCB_ATTR_DCB_APP
    raise ValueError(f"selector {selector} is not one of 1..5 (IEEE) or 255 (pcp)")


# --- messages on pyroute2's machinery -------------------------------------------------------------


class _dcb_app(nla):
    fields = (("selector", "B"), ("priority", "B"), ("protocol", "H"))


class _app_table(nla):
    nla_map = (
        (DCB_ATTR_IEEE_APP, "DCB_ATTR_IEEE_APP", "app"),
        (DCB_ATTR_DCB_APP, "DCB_ATTR_DCB_APP", "app"),
    )
    app = _dcb_app


class _trust_table(nla):
    nla_map = (
        (DCB_ATTR_IEEE_APP, "DCB_ATTR_IEEE_APP", "uint8"),
        (DCB_ATTR_DCB_APP, "DCB_ATTR_DCB_APP", "uint8"),
    )


class _ieee(nla):
    nla_map = (
        (DCB_ATTR_IEEE_ETS, "DCB_ATTR_IEEE_ETS", "cdata"),
        (DCB_ATTR_IEEE_PFC, "DCB_ATTR_IEEE_PFC", "cdata"),
        (DCB_ATTR_IEEE_APP_TABLE, "DCB_ATTR_IEEE_APP_TABLE", "app_table|nested"),
        (DCB_ATTR_IEEE_PEER_ETS, "DCB_ATTR_IEEE_PEER_ETS", "cdata"),
        (DCB_ATTR_IEEE_PEER_PFC, "DCB_ATTR_IEEE_PEER_PFC", "cdata"),
        (DCB_ATTR_IEEE_PEER_APP, "DCB_ATTR_IEEE_PEER_APP", "app_table|nested"),
        (DCB_ATTR_IEEE_MAXRATE, "DCB_ATTR_IEEE_MAXRATE", "cdata"),
        (DCB_ATTR_IEEE_QCN, "DCB_ATTR_IEEE_QCN", "cdata"),
        (DCB_ATTR_IEEE_QCN_STATS, "DCB_ATTR_IEEE_QCN_STATS", "cdata"),
        (DCB_ATTR_DCB_BUFFER, "DCB_ATTR_DCB_BUFFER", "cdata"),
        (DCB_ATTR_DCB_APP_TRUST_TABLE, "DCB_ATTR_DCB_APP_TRUST_TABLE", "trust_table|nested"),
        (DCB_ATTR_DCB_REWR_TABLE, "DCB_ATTR_DCB_REWR_TABLE", "app_table|nested"),
    )
    app_table = _app_table
    trust_table = _trust_table


class dcbmsg(nlmsg):
    """A request, or the kernel's reply to DCB_CMD_IEEE_GET (DCB_ATTR_IEEE nested)."""

    fields = (("dcb_family", "B"), ("cmd", "B"), ("dcb_pad", "H"))
    nla_map = (
        (DCB_ATTR_IFNAME, "DCB_ATTR_IFNAME", "asciiz"),
        (DCB_ATTR_IEEE, "DCB_ATTR_IEEE", "ieee|nested"),
        (DCB_ATTR_DCBX, "DCB_ATTR_DCBX", "uint8"),
    )
    ieee = _ieee


class dcbmsg_status(nlmsg):
    """The kernel's reply to DCB_CMD_IEEE_SET/DEL: DCB_ATTR_IEEE is a u8 holding the (negative) error."""

    fields = dcbmsg.fields
    nla_map = (
        (DCB_ATTR_IFNAME, "DCB_ATTR_IFNAME", "asciiz"),
        (DCB_ATTR_IEEE, "DCB_ATTR_IEEE", "uint8"),
    )


class dcbmsg_dcbx_status(nlmsg):
    """The kernel's reply to DCB_CMD_SDCBX: DCB_ATTR_DCBX is a u8, the driver's setdcbx result (0 = done)."""

    fields = dcbmsg.fields
    nla_map = (
        (DCB_ATTR_IFNAME, "DCB_ATTR_IFNAME", "asciiz"),
        (DCB_ATTR_DCBX, "DCB_ATTR_DCBX", "uint8"),
    )


def _attrs(value: dict[str, Any] | nla) -> list[Any]:
    return list(value.get("attrs", []))


def encode_request(
    msg_type: int,
    cmd: int,
    ifname: str,
    ieee_attrs: list[list[Any]] | None,
    seq: int,
    dcbx: int | None = None,
) -> bytes:
    """One dcbnl request as iproute2's dcb sends it: NLM_F_REQUEST|NLM_F_ACK, IFNAME, then DCB_ATTR_IEEE
    (or, for DCB_CMD_SDCBX, a bare DCB_ATTR_DCBX u8 as dcb_dcbx.c's dcb_set_attribute_bare puts it)."""
    msg = dcbmsg()
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["header"]["sequence_number"] = seq
    msg["header"]["pid"] = 0
    msg["dcb_family"] = socket.AF_UNSPEC
    msg["cmd"] = cmd
    msg["dcb_pad"] = 0
    attrs: list[list[Any]] = [["DCB_ATTR_IFNAME", ifname]]
    if ieee_attrs is not None:
        attrs.append(["DCB_ATTR_IEEE", {"attrs": ieee_attrs}])
    if dcbx is not None:
        attrs.append(["DCB_ATTR_DCBX", dcbx])
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data)


def ets_attr(ets: Ets) -> list[Any]:
    ets.check_request()
    return ["DCB_ATTR_IEEE_ETS", ets.pack()]


def pfc_attr(pfc: Pfc) -> list[Any]:
    return ["DCB_ATTR_IEEE_PFC", pfc.pack()]


def maxrate_attr(maxrate: Maxrate) -> list[Any]:
    return ["DCB_ATTR_IEEE_MAXRATE", maxrate.pack()]


def buffer_attr(buffer: Buffer) -> list[Any]:
    buffer.check_request()
    return ["DCB_ATTR_DCB_BUFFER", buffer.pack()]


def app_table_attr(apps: Iterable[App]) -> list[Any]:
    entries = []
    for app in apps:
        name = "DCB_ATTR_IEEE_APP" if app_attr_type(app.selector) == DCB_ATTR_IEEE_APP else "DCB_ATTR_DCB_APP"
        entries.append([name, {"selector": app.selector, "priority": app.priority, "protocol": app.protocol}])
    return ["DCB_ATTR_IEEE_APP_TABLE", {"attrs": entries}]


def trust_table_attr(selectors: Iterable[int]) -> list[Any]:
    entries = []
    for sel in selectors:
        name = "DCB_ATTR_IEEE_APP" if app_attr_type(sel) == DCB_ATTR_IEEE_APP else "DCB_ATTR_DCB_APP"
        entries.append([name, sel])
    return ["DCB_ATTR_DCB_APP_TRUST_TABLE", {"attrs": entries}]


@dataclass(frozen=True)
class IeeeState:
    """What one DCB_CMD_IEEE_GET returns. None: the device does not report that object."""

    ifname: str
    ets: Ets | None
    pfc: Pfc | None
    apps: frozenset[App]
    trust: tuple[int, ...] | None
    dcbx: int | None
    maxrate: Maxrate | None = None
    buffer: Buffer | None = None
    # What the link partner (the switch) advertises by DCBX, when the driver reports it (dcbnl_ieee_fill
    # adds these only for drivers with ieee_peer_getets / ieee_peer_getpfc / peer_getapptable).
    peer_ets: Ets | None = None
    peer_pfc: Pfc | None = None
    peer_apps: frozenset[App] | None = None


def decode_ieee_get(data: bytes) -> IeeeState:
    msg = dcbmsg(data)
    msg.decode()
    ieee = msg.get_attr("DCB_ATTR_IEEE")
    ets = pfc = None
    apps: set[App] = set()
    trust: tuple[int, ...] | None = None
    maxrate = None
    buffer = None
    peer_ets = peer_pfc = None
    peer_apps: frozenset[App] | None = None
    if ieee is not None:
        raw = ieee.get_attr("DCB_ATTR_DCB_BUFFER")
        buffer = Buffer.unpack(raw) if raw is not None else None
        raw = ieee.get_attr("DCB_ATTR_IEEE_PEER_ETS")
        peer_ets = Ets.unpack(raw) if raw is not None else None
        raw = ieee.get_attr("DCB_ATTR_IEEE_PEER_PFC")
        peer_pfc = Pfc.unpack(raw) if raw is not None else None
        peer_table = ieee.get_attr(
            "DCB_ATTR_IEEE_PEER_APP"
        )  # dcbnl_build_peer_app: DCB_ATTR_IEEE_APP entries
        if peer_table is not None:
            peer_apps = frozenset(
                App(e["selector"], e["protocol"], e["priority"])
                for name, e in _attrs(peer_table)
                if name == "DCB_ATTR_IEEE_APP"
            )
        raw_maxrate = ieee.get_attr("DCB_ATTR_IEEE_MAXRATE")
        maxrate = Maxrate.unpack(raw_maxrate) if raw_maxrate is not None else None
        raw_ets = ieee.get_attr("DCB_ATTR_IEEE_ETS")
        ets = Ets.unpack(raw_ets) if raw_ets is not None else None
        raw_pfc = ieee.get_attr("DCB_ATTR_IEEE_PFC")
        pfc = Pfc.unpack(raw_pfc) if raw_pfc is not None else None
        table = ieee.get_attr("DCB_ATTR_IEEE_APP_TABLE")
        if table is not None:
            for _name, entry in _attrs(table):
                apps.add(App(entry["selector"], entry["protocol"], entry["priority"]))
        trust_nla = ieee.get_attr("DCB_ATTR_DCB_APP_TRUST_TABLE")
        if trust_nla is not None:
            trust = tuple(int(v) for _name, v in _attrs(trust_nla))
    return IeeeState(
        ifname=msg.get_attr("DCB_ATTR_IFNAME") or "",
        ets=ets,
        pfc=pfc,
        apps=frozenset(apps),
        trust=trust,
        dcbx=msg.get_attr("DCB_ATTR_DCBX"),
        maxrate=maxrate,
        buffer=buffer,
        peer_ets=peer_ets,
        peer_pfc=peer_pfc,
        peer_apps=peer_apps,
    )


# --- the client -----------------------------------------------------------------------------------


def dcb_event_socket(netns: str | None = None) -> socket.socket:
    """A NETLINK_ROUTE socket subscribed to RTNLGRP_DCB: the kernel's dcbnl_notify sends an RTM_SETDCB
    message (the interface's full IEEE state) there after every IEEE set or delete by any tool, so a
    daemon sees mlnx_qos/dcb changes at once instead of at its next periodic check."""
    with in_netns(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.bind((0, RTMGRP_DCB))
    except OSError:
        sock.close()
        raise
    return sock


def dcb_event_ifnames(data: bytes) -> list[str]:
    """The interfaces named by the DCB notifications in one datagram (others are skipped)."""
    out = []
    for mtype, _seq, raw in iter_messages(data, "dcbnl"):
        if mtype not in (RTM_SETDCB, RTM_GETDCB):
            continue
        try:
            msg = dcbmsg(raw)
            msg.decode()
            out.append(msg.get_attr("DCB_ATTR_IFNAME") or "")
        except Exception:
            out.append("")  # a notification we cannot parse is still a change
    return out


class DcbnlClient:
    """Get and set IEEE DCB objects of one host's interfaces.

    Errors: DcbUnsupported when the device or kernel cannot (EOPNOTSUPP); OSError with the errno otherwise
    (ENODEV: no such interface; EPERM: not CAP_NET_ADMIN; EEXIST/ENOENT from the APP table).
    """

    def __init__(self, sock_factory: Callable[[], NetlinkSock] | None = None, *, netns: str | None = None):
        self._sock: NetlinkSock = sock_factory() if sock_factory is not None else netlink_route_socket(netns)
        self._seq = itertools.count(int.from_bytes(os.urandom(2), "little") + 1)

    def __enter__(self) -> DcbnlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    # -- transport --

    def _request(
        self,
        msg_type: int,
        cmd: int,
        ifname: str,
        ieee_attrs: list[list[Any]] | None,
        what: str,
        dcbx: int | None = None,
    ) -> bytes:
        """Send one request; return the kernel's reply message (before its ACK); raise on an error ACK."""
        seq = next(self._seq) & 0xFFFFFFFF
        request = encode_request(msg_type, cmd, ifname, ieee_attrs, seq, dcbx)
        return exchange(
            self._sock, request, f"dcbnl {what} {ifname}", lambda code: _error(code, what, ifname)
        )

    def _status(self, cmd: int, ifname: str, ieee_attrs: list[list[Any]], what: str) -> None:
        reply = self._request(RTM_SETDCB, cmd, ifname, ieee_attrs, what)
        if not reply:
            raise OSError(errno.EBADMSG, f"dcbnl {what} {ifname}: the kernel sent no status")
        try:
            msg = dcbmsg_status(reply)
            msg.decode()
            status = msg.get_attr("DCB_ATTR_IEEE")
        except Exception as e:
            raise OSError(errno.EBADMSG, f"dcbnl {what} {ifname}: malformed status reply ({e})") from None
        # dcbnl_ieee_set puts the driver's negative errno into a u8.
        if status:
            raise _error(256 - int(status), what, ifname)

    # -- IEEE objects --

    def get_ieee(self, ifname: str) -> IeeeState:
        reply = self._request(RTM_GETDCB, DCB_CMD_IEEE_GET, ifname, None, "get")
        if not reply:
            raise OSError(errno.EBADMSG, f"dcbnl get {ifname}: the kernel sent no reply")
        try:
            return decode_ieee_get(reply)
        except Exception as e:  # pyroute2's decoder raises assorted errors on bytes it cannot parse
            raise OSError(errno.EBADMSG, f"dcbnl get {ifname}: malformed reply ({e})") from None

    def get_ets(self, ifname: str) -> Ets:
        ets = self.get_ieee(ifname).ets
        if ets is None:
            raise DcbUnsupported(errno.EOPNOTSUPP, f"{ifname}: the device reports no IEEE ETS")
        return ets

    def set_ets(self, ifname: str, ets: Ets) -> None:
        self._status(DCB_CMD_IEEE_SET, ifname, [ets_attr(ets)], "set ets")

    def get_pfc(self, ifname: str) -> Pfc:
        pfc = self.get_ieee(ifname).pfc
        if pfc is None:
            raise DcbUnsupported(errno.EOPNOTSUPP, f"{ifname}: the device reports no IEEE PFC")
        return pfc

    def set_pfc(self, ifname: str, pfc: Pfc) -> None:
        self._status(DCB_CMD_IEEE_SET, ifname, [pfc_attr(pfc)], "set pfc")

    def get_maxrate(self, ifname: str) -> Maxrate:
        maxrate = self.get_ieee(ifname).maxrate
        if maxrate is None:
            raise DcbUnsupported(errno.EOPNOTSUPP, f"{ifname}: the device reports no IEEE maxrate")
        return maxrate

    def set_maxrate(self, ifname: str, maxrate: Maxrate) -> None:
        self._status(DCB_CMD_IEEE_SET, ifname, [maxrate_attr(maxrate)], "set maxrate")

    def get_buffer(self, ifname: str) -> Buffer:
        buffer = self.get_ieee(ifname).buffer
        if buffer is None:
            raise DcbUnsupported(errno.EOPNOTSUPP, f"{ifname}: the device reports no receive buffers")
        return buffer

    def set_buffer(self, ifname: str, buffer: Buffer) -> None:
        self._status(DCB_CMD_IEEE_SET, ifname, [buffer_attr(buffer)], "set buffer")

    def get_dcbx(self, ifname: str) -> int | None:
        """The DCBX mode bits (DCB_CAP_DCBX_*); None when the driver has no getdcbx."""
        return self.get_ieee(ifname).dcbx

    def set_dcbx(self, ifname: str, mode: int) -> int:
        """Asks the driver for DCBX `mode`; returns its setdcbx status (0 = done). Nonzero is not always a
        refusal (ice answers 1, "no change", when the mode is already set): callers read the mode back."""
        if not 0 <= mode <= 0xFF:
            raise ValueError(f"dcbx: {mode} is outside 0..255")
        reply = self._request(RTM_SETDCB, DCB_CMD_SDCBX, ifname, None, "set dcbx", dcbx=mode)
        if not reply:
            raise OSError(errno.EBADMSG, f"dcbnl set dcbx {ifname}: the kernel sent no status")
        try:
            msg = dcbmsg_dcbx_status(reply)
            msg.decode()
            status = msg.get_attr("DCB_ATTR_DCBX")
        except Exception as e:
            raise OSError(errno.EBADMSG, f"dcbnl set dcbx {ifname}: malformed status reply ({e})") from None
        return int(status or 0)

    def get_apps(self, ifname: str) -> frozenset[App]:
        return self.get_ieee(ifname).apps

    def add_apps(self, ifname: str, apps: Iterable[App]) -> None:
        apps = list(apps)
        if apps:
            self._status(DCB_CMD_IEEE_SET, ifname, [app_table_attr(apps)], "add app")

    def del_apps(self, ifname: str, apps: Iterable[App]) -> None:
        apps = list(apps)
        if apps:
            self._status(DCB_CMD_IEEE_DEL, ifname, [app_table_attr(apps)], "del app")

    def get_trust(self, ifname: str) -> tuple[int, ...] | None:
        """The APP trust order (selectors, most trusted first); None when kernel or device has none."""
        return self.get_ieee(ifname).trust

    def set_trust(self, ifname: str, selectors: Iterable[int]) -> None:
        sels = tuple(selectors)
        if len(set(sels)) != len(sels):
            raise ValueError(f"trust selectors {sels}: each selector at most once")
        self._status(DCB_CMD_IEEE_SET, ifname, [trust_table_attr(sels)], "set trust")


def _error(code: int, what: str, ifname: str) -> OSError:
    text = f"dcbnl {what} {ifname}: {os.strerror(code)}"
    if code == errno.EOPNOTSUPP:
        return DcbUnsupported(code, text)
    if code == errno.ENODEV:
        return OSError(code, f"dcbnl {what} {ifname}: no such interface")
    return OSError(code, text)
