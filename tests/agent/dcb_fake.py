"""A fake kernel at the netlink SOCKET boundary for dcbnl, because no NIC here has DCB ops.

It takes the bytes a client sends, parses them the way net/dcb/dcbnl.c does (dcb_doit, dcbnl_ieee_set,
dcbnl_ieee_del, dcbnl_ieee_fill), keeps per-interface DCB state like an mlx5-ish NIC and answers with the
reply bytes the kernel would send: the RTM_GETDCB/RTM_SETDCB reply, then the NLMSG_ERROR ack.

It is written with plain struct on purpose, independent of geryon.agent.dcbnl, so an encoding mistake in
the client cannot hide behind the same mistake here.

Use: kernel = FakeDcbKernel({"eth0": FakeNic()}); DcbnlClient(sock_factory=kernel.socket).
Reusable by the engine tests: kernel.fail_next("eth0", "ets", errno.EIO) makes the next ETS write fail.

Real drivers report ETS/PFC in shapes a request may not have; FakeNic(driver=...) answers as they do
(the kernel functions each shape is taken from are named where it is built):
- "mlx5": mlx5e_dcbnl_ieee_getets reads the firmware's TC groups and bandwidth: a fresh port is all
  vendor TCs (group 7) at 100%; a strict TC reads 100% (mlx5e_build_tc_tx_bw gives strict and vendor
  TCs MLX5E_MAX_BW_ALLOC); willing is never set (0). mlx5e_dcbnl_ieee_getpfc: pfc_cap = max_tc + 1,
  delay = the cable length (MLX5E_DEFAULT_CABLE_LEN, 7 m).
- "ice": ice_dcb_sw_dflt_cfg (a fresh port in software DCBX mode): willing 1, TC 0 ets 100%, the rest
  strict 0%, one APP entry (ethertype FCoE 0x8906 -> priority 3); ice_dcbnl_getets copies tc_tx_bw
  into tc_rx_bw and fills the recommendation tables. ice_dcb_bwchk on a set: bandwidth summed over
  all TCs; a sum of 0 puts 100% on TC 0 (even a strict one), another sum than 100 is -EINVAL.
- "bnxt": bnxt_dcbnl_ieee_getets in host DCBX mode before any set reports all zeros (every TC strict,
  every priority on TC 0) with ets_cap = max_tc; after a set it reports the request as cached.
  bnxt_dcbnl_ieee_getpfc: pfc_cap = max_lltc (2 on most boards).
Per-TC max rate (DCB_ATTR_IEEE_MAXRATE) exists on mlx5 (and the generic fake) only: ice and bnxt have no
ieee_getmaxrate, so dcbnl_ieee_fill leaves it out and dcbnl_ieee_set answers -EOPNOTSUPP.
"""

from __future__ import annotations

import errno
import queue
import struct
from collections import deque
from dataclasses import dataclass, field

RTM_GETDCB, RTM_SETDCB = 78, 79
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLM_F_CAPPED = 0x100
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF
DCB_CMD_IEEE_SET, DCB_CMD_IEEE_GET, DCB_CMD_SDCBX, DCB_CMD_IEEE_DEL = 20, 21, 23, 27
DCBX_HOST, DCBX_LLD, DCBX_CEE, DCBX_IEEE = 0x01, 0x02, 0x04, 0x08
DCB_CMD_MAX = 27
DCB_ATTR_IFNAME, DCB_ATTR_IEEE, DCB_ATTR_DCBX = 1, 13, 14
IEEE_ETS, IEEE_PFC, IEEE_APP_TABLE, IEEE_MAXRATE, DCB_BUFFER, IEEE_TRUST_TABLE = 1, 2, 3, 7, 10, 11
BUFFER_CELL = 128  # the fake mlx5's port_buff_cell_sz (illustrative; real NICs report theirs)
ATTR_IEEE_APP, ATTR_DCB_APP = 1, 2
SEL_DSCP, SEL_PCP = 5, 255
TSA_STRICT, TSA_CBS, TSA_ETS, TSA_VENDOR = 0, 1, 2, 255
ETS_SIZE, PFC_SIZE = 59, 136
HDR = struct.Struct("=IHHII")


def nla(attr_type: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), attr_type) + payload
    return raw + b"\0" * (-len(raw) % 4)


def parse_nlas(data: bytes) -> list[tuple[int, bytes]]:
    """(type without flags, payload) for each attribute; raises EINVAL on a malformed one (nla_validate)."""
    out = []
    off = 0
    while off + 4 <= len(data):
        length, atype = struct.unpack_from("=HH", data, off)
        if length < 4 or off + length > len(data):
            raise OSError(errno.EINVAL, "malformed attribute")
        out.append((atype & NLA_TYPE_MASK, data[off + 4 : off + length]))
        off += (length + 3) & ~3
    return out


def ets_bytes(
    willing: int = 0,
    ets_cap: int = 8,
    tc_tx_bw: tuple[int, ...] = (0,) * 8,
    tc_tsa: tuple[int, ...] = (0,) * 8,
    prio_tc: tuple[int, ...] = (0,) * 8,
) -> bytes:
    """struct ieee_ets: willing, ets_cap, cbs, then tc_tx_bw, tc_rx_bw, tc_tsa, prio_tc, 3 reco tables."""
    return (
        bytes([willing, ets_cap, 0]) + bytes(tc_tx_bw) + bytes(8) + bytes(tc_tsa) + bytes(prio_tc) + bytes(24)
    )


def pfc_bytes(pfc_cap: int = 8, pfc_en: int = 0, mbc: int = 0, delay: int = 0, requests: int = 0) -> bytes:
    """struct ieee_pfc: u8 pfc_cap, pfc_en, mbc, pad, u16 delay, pad[2], u64 requests[8], indications[8]."""
    return (
        struct.pack("=BBBxHxx", pfc_cap, pfc_en, mbc, delay)
        + struct.pack("=8Q", *([requests] * 8))
        + bytes(64)
    )


@dataclass
class FakeNic:
    """One interface. dcb=False models veth (no dcbnl_ops); trust=None: kernel or driver without apptrust."""

    dcb: bool = True
    ets_settable: bool = True  # False: the driver lacks ieee_setets, and dcbnl_ieee_set skips ETS silently
    ets_cap: int = 8
    pfc_cap: int = 8
    trust: list[int] | None = field(default_factory=lambda: [SEL_PCP])
    trust_choices: tuple[tuple[int, ...], ...] = ((SEL_PCP,), (SEL_DSCP,), (SEL_DSCP, SEL_PCP))
    ets: bytes = b""
    pfc: bytes = b""
    apps: list[tuple[int, int, int]] = field(
        default_factory=list
    )  # (selector, priority, protocol), list order
    dcbx: int | None = 0x08 | 0x01  # DCB_CAP_DCBX_VER_IEEE | DCB_CAP_DCBX_HOST
    driver: str = "generic"  # "mlx5", "ice", "bnxt": answer in that driver's shapes (module docstring)
    maxrate: list[int] | None = None  # kbit/s per TC as the driver reports it; None: no ieee_getmaxrate
    # (prio2buffer[8], buffer_size[8] bytes, total_size) as dcbnl_getbuffer reports; None: no buffer ops
    buffer: tuple[list[int], list[int], int] | None = None
    # What the switch advertises by DCBX, for drivers with the peer ops (None: the driver has none)
    peer_ets: bytes | None = None
    peer_pfc: bytes | None = None
    peer_apps: list[tuple[int, int, int]] | None = None  # (selector, priority, protocol)

    def __post_init__(self) -> None:
        if self.driver not in ("generic", "mlx5", "ice", "bnxt"):
            raise ValueError(f"driver {self.driver!r}")
        if not self.ets:
            if self.driver == "mlx5":
                self.ets = ets_bytes(ets_cap=self.ets_cap, tc_tsa=(TSA_VENDOR,) * 8, prio_tc=tuple(range(8)))
            elif self.driver == "ice":
                self.ets = ets_bytes(
                    willing=1,
                    ets_cap=self.ets_cap,
                    tc_tsa=(TSA_ETS,) + (TSA_STRICT,) * 7,
                    tc_tx_bw=(100,) + (0,) * 7,
                )
            else:
                self.ets = ets_bytes(ets_cap=self.ets_cap)
        if not self.pfc:
            self.pfc = pfc_bytes(pfc_cap=self.pfc_cap, delay=7 if self.driver == "mlx5" else 0)
        if self.driver == "mlx5" and self.dcbx == DCBX_HOST | DCBX_IEEE:
            self.dcbx = DCBX_CEE | DCBX_IEEE  # mlx5e_dcbnl_initialize: the firmware's agent runs DCBX
        if self.maxrate is None and self.driver in ("generic", "mlx5"):
            self.maxrate = [0] * 8  # ice and bnxt have no ieee_{get,set}maxrate
        if self.buffer is None and self.driver in ("generic", "mlx5"):
            # illustrative sizes: one lossy buffer 0 holding every priority, as a port in automatic mode
            self.buffer = ([0] * 8, [1023 * BUFFER_CELL] + [0] * 7, 2048 * BUFFER_CELL)
        if self.driver == "ice" and not self.apps:
            self.apps = [(1, 3, 0x8906)]  # ice_dcb_sw_dflt_cfg: ICE_APP_SEL_ETHTYPE, FCoE, priority 3

    def reported_ets(self) -> bytes:
        """struct ieee_ets as this driver's getets fills it from what it stores."""
        if self.driver == "mlx5":
            tsa = self.ets[19:27]
            bw = bytes(
                100 if t in (TSA_STRICT, TSA_VENDOR) else b for t, b in zip(tsa, self.ets[3:11], strict=True)
            )
            return bytes([0, self.ets_cap, 0]) + bw + self.ets[11:]
        if self.driver == "ice":
            tx_bw, tsa, prio_tc = self.ets[3:11], self.ets[19:27], self.ets[27:35]
            return self.ets[:3] + tx_bw + tx_bw + tsa + prio_tc + tx_bw + tsa + prio_tc
        return self.ets

    # decoded views, for assertions in tests
    @property
    def tc_tsa(self) -> tuple[int, ...]:
        return tuple(self.ets[19:27])

    @property
    def tc_tx_bw(self) -> tuple[int, ...]:
        return tuple(self.ets[3:11])

    @property
    def prio_tc(self) -> tuple[int, ...]:
        return tuple(self.ets[27:35])

    @property
    def pfc_en(self) -> int:
        return self.pfc[1]

    def dscp_map(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for sel, prio, proto in self.apps:
            if sel == SEL_DSCP:
                out.setdefault(proto, set()).add(prio)
        return out


class FakeDcbKernel:
    def __init__(self, nics: dict[str, FakeNic]):
        self.nics = nics
        self.requests: list[bytes] = []  # every message received, as bytes
        self._failures: dict[tuple[str, str], int] = {}
        self._subscribers: list[FakeEventSocket] = []

    def socket(self) -> FakeNetlinkSocket:
        return FakeNetlinkSocket(self)

    def event_socket(self) -> FakeEventSocket:
        """A socket bound to RTNLGRP_DCB: it receives what dcbnl_ieee_notify sends after each set/del."""
        sock = FakeEventSocket()
        self._subscribers.append(sock)
        return sock

    def notify(self, ifname: str, cmd: int = DCB_CMD_IEEE_SET) -> None:
        """dcbnl_notify(dev, RTM_SETDCB, cmd, seq 0, portid 0): the interface's whole IEEE state, to the
        group. Called after every successful IEEE set/del, as dcbnl_ieee_set/del do; tests may call it
        to model another tool (mlnx_qos, dcb) changing the NIC."""
        nic = self.nics[ifname]
        payload = struct.pack("=BBH", 0, cmd, 0) + self._fill(ifname, nic)
        msg = HDR.pack(HDR.size + len(payload), RTM_SETDCB, 0, 0, 0) + payload
        for sub in self._subscribers:
            sub.deliver(msg)

    def fail_next(self, ifname: str, what: str, err: int) -> None:
        """Make the next write of `what` ("ets", "pfc", "app", "trust") on ifname fail with errno err."""
        self._failures[(ifname, what)] = err

    def _injected(self, ifname: str, what: str) -> int:
        return self._failures.pop((ifname, what), 0)

    # -- dcb_doit --

    def handle(self, data: bytes) -> list[bytes]:
        out = []
        off = 0
        while off + HDR.size <= len(data):
            length, mtype, flags, seq, _pid = HDR.unpack_from(data, off)
            if length < HDR.size or off + length > len(data):
                break
            msg = data[off : off + length]
            self.requests.append(msg)
            out.extend(self._doit(msg, mtype, flags, seq))
            off += (length + 3) & ~3
        return out

    def _doit(self, msg: bytes, mtype: int, flags: int, seq: int) -> list[bytes]:
        reply = b""
        try:
            if mtype not in (RTM_GETDCB, RTM_SETDCB):
                raise OSError(errno.EOPNOTSUPP, "not a dcb message")
            if len(msg) < HDR.size + 4:
                raise OSError(errno.EINVAL, "short dcbmsg")
            _family, cmd, _pad = struct.unpack_from("=BBH", msg, HDR.size)
            tb = dict(parse_nlas(msg[HDR.size + 4 :]))
            if cmd > DCB_CMD_MAX or cmd not in (
                DCB_CMD_IEEE_GET,
                DCB_CMD_IEEE_SET,
                DCB_CMD_IEEE_DEL,
                DCB_CMD_SDCBX,
            ):
                raise OSError(errno.EOPNOTSUPP if cmd <= DCB_CMD_MAX else errno.EINVAL, "command")
            if DCB_ATTR_IFNAME not in tb:
                raise OSError(errno.EINVAL, "no ifname")
            ifname = tb[DCB_ATTR_IFNAME].split(b"\0", 1)[0].decode()
            nic = self.nics.get(ifname)
            if nic is None:
                raise OSError(errno.ENODEV, ifname)
            if not nic.dcb:
                raise OSError(errno.EOPNOTSUPP, "no dcbnl_ops")
            if cmd == DCB_CMD_IEEE_GET:
                body, rtype = self._fill(ifname, nic), RTM_GETDCB
            elif cmd == DCB_CMD_SDCBX:  # dcbnl_setdcbx: the driver's u8 answer in DCB_ATTR_DCBX
                if nic.dcbx is None:
                    raise OSError(errno.EOPNOTSUPP, "no setdcbx op")
                if DCB_ATTR_DCBX not in tb or len(tb[DCB_ATTR_DCBX]) < 1:
                    raise OSError(errno.EINVAL, "no DCB_ATTR_DCBX")
                status = self._setdcbx(nic, tb[DCB_ATTR_DCBX][0])
                body, rtype = nla(DCB_ATTR_DCBX, bytes([status])), RTM_SETDCB
            else:
                if DCB_ATTR_IEEE not in tb:
                    raise OSError(errno.EINVAL, "no DCB_ATTR_IEEE")
                ieee = parse_nlas(tb[DCB_ATTR_IEEE])
                err = (
                    self._ieee_set(ifname, nic, ieee)
                    if cmd == DCB_CMD_IEEE_SET
                    else self._ieee_del(nic, ieee)
                )
                body, rtype = nla(DCB_ATTR_IEEE, bytes([err & 0xFF])), RTM_SETDCB
                if not err:
                    self.notify(ifname, cmd)
            payload = struct.pack("=BBH", 0, cmd, 0) + body
            reply = HDR.pack(HDR.size + len(payload), rtype, flags, seq, 0) + payload
            code = 0
        except OSError as exc:
            code = exc.errno or errno.EINVAL
            reply = b""
        out = [reply] if reply else []
        if code or flags & NLM_F_ACK:
            # netlink_ack: a success ACK carries only the request's header (NLM_F_CAPPED); an error echoes the
            # whole request, since this socket did not set NETLINK_CAP_ACK.
            echo, ack_flags = (msg, 0) if code else (msg[: HDR.size], NLM_F_CAPPED)
            ack = HDR.pack(HDR.size + 4 + len(echo), NLMSG_ERROR, ack_flags, seq, 0) + struct.pack(
                "=i", -code
            )
            out.append(ack + echo)
        return out

    @staticmethod
    def _setdcbx(nic: FakeNic, mode: int) -> int:
        """The driver's setdcbx: 0 = done, 1 = not done (a u8, not an errno)."""
        if nic.driver == "mlx5":  # mlx5e_dcbnl_setdcbx
            if mode & DCBX_LLD:
                return 1
            if not mode:  # back to the firmware's DCBX agent
                nic.dcbx = DCBX_CEE | DCBX_IEEE
                return 0
            if not mode & DCBX_HOST:
                return 1
            nic.dcbx = mode
            return 0
        if nic.driver == "ice":  # ice_dcbnl_setdcbx: no LLD-managed, not CEE+IEEE, host only; same = 1
            if mode & DCBX_LLD or (mode & DCBX_IEEE and mode & DCBX_CEE) or not mode & DCBX_HOST:
                return 1
            if mode == nic.dcbx:
                return 1  # ICE_DCB_NO_HW_CHG
            nic.dcbx = mode
            return 0
        if nic.driver == "bnxt":  # bnxt_dcbnl_setdcbx: host IEEE only
            if mode & (DCBX_LLD | DCBX_CEE) or not mode & DCBX_HOST:
                return 1
            nic.dcbx = mode
            return 0
        nic.dcbx = mode
        return 0

    # -- dcbnl_ieee_fill --

    def _fill(self, ifname: str, nic: FakeNic) -> bytes:
        ieee = nla(IEEE_ETS, nic.reported_ets()) + nla(IEEE_PFC, nic.pfc)
        apps = b"".join(
            nla(ATTR_DCB_APP if sel == SEL_PCP else ATTR_IEEE_APP, struct.pack("=BBH", sel, prio, proto))
            for sel, prio, proto in nic.apps
        )
        ieee += nla(IEEE_APP_TABLE | NLA_F_NESTED, apps)
        if nic.buffer is not None:  # dcbnl_ieee_fill: only when the driver has dcbnl_getbuffer
            p2b, sizes, total = nic.buffer
            ieee += nla(DCB_BUFFER, bytes(p2b) + struct.pack("=8II", *sizes, total))
        if nic.maxrate is not None:  # dcbnl_ieee_fill: only when the driver has ieee_getmaxrate
            ieee += nla(IEEE_MAXRATE, struct.pack("=8Q", *nic.maxrate))
        ieee += nla(12 | NLA_F_NESTED, b"")  # DCB_ATTR_DCB_REWR_TABLE, empty
        if nic.trust is not None:
            trust = b"".join(
                nla(ATTR_DCB_APP if s == SEL_PCP else ATTR_IEEE_APP, bytes([s])) for s in nic.trust
            )
            ieee += nla(IEEE_TRUST_TABLE | NLA_F_NESTED, trust)
        # dcbnl_ieee_fill: the peer objects last, each only if the driver has its op; the peer APP table
        # is built by dcbnl_build_peer_app as a nest of DCB_ATTR_IEEE_APP entries (no info attribute).
        if nic.peer_ets is not None:
            ieee += nla(4, nic.peer_ets)
        if nic.peer_pfc is not None:
            ieee += nla(5, nic.peer_pfc)
        if nic.peer_apps is not None:
            entries = b"".join(nla(ATTR_IEEE_APP, struct.pack("=BBH", *a)) for a in nic.peer_apps)
            ieee += nla(6 | NLA_F_NESTED, entries)
        body = nla(DCB_ATTR_IFNAME, ifname.encode() + b"\0") + nla(DCB_ATTR_IEEE, ieee)
        if nic.dcbx is not None:
            body += nla(DCB_ATTR_DCBX, bytes([nic.dcbx]))
        return body

    # -- dcbnl_ieee_set / dcbnl_ieee_del: return 0 or a negative errno (goes into the u8 status) --

    def _ieee_set(self, ifname: str, nic: FakeNic, ieee: list[tuple[int, bytes]]) -> int:
        attrs = dict(ieee)
        if IEEE_ETS in attrs and nic.ets_settable:
            err = self._injected(ifname, "ets") or self._set_ets(nic, attrs[IEEE_ETS])
            if err:
                return -err
        if IEEE_PFC in attrs:
            err = self._injected(ifname, "pfc") or self._set_pfc(nic, attrs[IEEE_PFC])
            if err:
                return -err
        if DCB_BUFFER in attrs:
            if nic.buffer is None:
                return -errno.EOPNOTSUPP  # dcbnl_ieee_set: no dcbnl_setbuffer op
            err = self._injected(ifname, "buffer") or self._set_buffer(nic, attrs[DCB_BUFFER])
            if err:
                return -err
        if IEEE_MAXRATE in attrs:
            if nic.maxrate is None:
                return -errno.EOPNOTSUPP  # dcbnl_ieee_set: no ieee_setmaxrate op
            err = self._injected(ifname, "maxrate") or self._set_maxrate(nic, attrs[IEEE_MAXRATE])
            if err:
                return -err
        if IEEE_APP_TABLE in attrs:
            err = self._injected(ifname, "app")
            if err:
                return -err
            for app in self._apps(attrs[IEEE_APP_TABLE]):
                if isinstance(app, int):
                    return -app
                if app in nic.apps:
                    return -errno.EEXIST
                nic.apps.insert(0, app)  # list_add: newest first
        if IEEE_TRUST_TABLE in attrs:
            err = self._injected(ifname, "trust") or self._set_trust(nic, attrs[IEEE_TRUST_TABLE])
            if err:
                return -err
        return 0

    def _ieee_del(self, nic: FakeNic, ieee: list[tuple[int, bytes]]) -> int:
        attrs = dict(ieee)
        if IEEE_APP_TABLE in attrs:
            for app in self._apps(attrs[IEEE_APP_TABLE]):
                if isinstance(app, int):
                    return -app
                if app not in nic.apps:
                    return -errno.ENOENT
                nic.apps.remove(app)
        return 0

    @staticmethod
    def _apps(table: bytes) -> list[tuple[int, int, int] | int]:
        out: list[tuple[int, int, int] | int] = []
        for atype, payload in parse_nlas(table):
            if atype not in (ATTR_IEEE_APP, ATTR_DCB_APP):
                continue  # dcbnl_app_table_setdel skips other types
            if len(payload) < 4:
                out.append(errno.ERANGE)
                break
            sel, prio, proto = struct.unpack_from("=BBH", payload)
            if (atype == ATTR_DCB_APP) != (sel == SEL_PCP) or not (1 <= sel <= SEL_DSCP or sel == SEL_PCP):
                out.append(errno.EINVAL)
                break
            if prio >= 8 or (sel == SEL_DSCP and proto >= 64):
                out.append(errno.EINVAL)  # what mlx5's ieee_setapp refuses
                break
            out.append((sel, prio, proto))
        return out

    @staticmethod
    def _set_ets(nic: FakeNic, payload: bytes) -> int:
        if len(payload) < ETS_SIZE:
            return errno.ERANGE  # the nla policy's minimum length
        tx_bw, tsa, prio_tc = payload[3:11], payload[19:27], payload[27:35]
        if nic.driver == "ice":  # ice_dcbnl_setets -> ice_dcb_bwchk: the sum over all TCs, whatever their TSA
            if any(tc >= nic.ets_cap for tc in prio_tc) or sum(tx_bw) not in (0, 100):
                return errno.EINVAL
            if not sum(tx_bw):
                tx_bw = bytes([100]) + tx_bw[1:]
            nic.ets = payload[:3] + tx_bw + payload[11:35] + bytes(24)
            return 0
        for t, b in zip(tsa, tx_bw, strict=True):
            if t != TSA_ETS and b:
                return errno.EINVAL  # dcbnl_ieee_set: BW only on ETS TCs
            if t not in (TSA_STRICT, TSA_ETS, TSA_VENDOR):
                return errno.EINVAL  # mlx5 has no credit-based shaper
        if TSA_ETS in tsa and sum(tx_bw) != 100:
            return errno.EINVAL
        if any(tc >= nic.ets_cap for tc in prio_tc):
            return errno.EINVAL
        # the device keeps its own willing/ets_cap/cbs; it stores the tables it was given
        nic.ets = bytes([payload[0], nic.ets_cap, 0]) + payload[3:35] + bytes(24)
        return 0

    @staticmethod
    def _set_buffer(nic: FakeNic, payload: bytes) -> int:
        if len(payload) < 44:
            return errno.ERANGE
        assert nic.buffer is not None
        p2b = list(payload[:8])
        sizes = list(struct.unpack_from("=8I", payload, 8))
        total = nic.buffer[2]
        if any(b >= 8 for b in p2b):
            return errno.EINVAL
        if nic.driver == "mlx5":
            # mlx5e_dcbnl_setbuffer -> mlx5e_port_manual_buffer_config: the sizes must fit the port buffer;
            # the port keeps them in cells, so they read back rounded down (the total is the port's own)
            if sum(sizes) > total:
                return errno.EINVAL
            sizes = [sz // BUFFER_CELL * BUFFER_CELL for sz in sizes]
        nic.buffer = (p2b, sizes, total)
        return 0

    @staticmethod
    def _set_maxrate(nic: FakeNic, payload: bytes) -> int:
        if len(payload) < 64:
            return errno.ERANGE
        rates = list(struct.unpack_from("=8Q", payload))
        if nic.driver == "mlx5":
            # mlx5e_dcbnl_ieee_setmaxrate: 8-bit units of 100 Mbit/s up to 25.5 Gbit/s, then of 1 Gbit/s up
            # to 255 Gbit/s (rounded down, at least 1 unit), -EINVAL beyond; getmaxrate reads unit * value.
            out = []
            for r in rates:
                if not r:
                    out.append(0)
                elif r <= 255 * 100_000:
                    out.append(max(r // 100_000, 1) * 100_000)
                elif r <= 255 * 1_000_000:
                    out.append(r // 1_000_000 * 1_000_000)
                else:
                    return errno.EINVAL
            rates = out
        nic.maxrate = rates
        return 0

    @staticmethod
    def _set_pfc(nic: FakeNic, payload: bytes) -> int:
        if len(payload) < PFC_SIZE:
            return errno.ERANGE
        _cap, en, mbc, delay = struct.unpack_from("=BBBxH", payload)
        if bin(en).count("1") > nic.pfc_cap:
            return errno.EINVAL
        old_delay = struct.unpack_from("=H", nic.pfc, 4)[0]
        if nic.driver == "mlx5" and not 0 < delay < 1000:
            delay = old_delay  # mlx5e_dcbnl_ieee_setpfc: the cable length changes only for 0 < delay < 1000
        elif nic.driver == "ice":
            delay = old_delay  # ice_dcbnl_setpfc ignores delay (ice_dcbnl_getpfc reads it from PRTDCB_GENC)
        nic.pfc = pfc_bytes(pfc_cap=nic.pfc_cap, pfc_en=en, mbc=mbc, delay=delay)
        return 0

    @staticmethod
    def _set_trust(nic: FakeNic, table: bytes) -> int:
        if nic.trust is None:
            return errno.EOPNOTSUPP  # no dcbnl_setapptrust op
        sels: list[int] = []
        for atype, payload in parse_nlas(table):
            if atype not in (ATTR_IEEE_APP, ATTR_DCB_APP) or len(payload) != 1:
                return errno.EINVAL
            sel = payload[0]
            if (atype == ATTR_DCB_APP) != (sel == SEL_PCP) or sel in sels:
                return errno.EINVAL
            sels.append(sel)
        if tuple(sels) not in nic.trust_choices:
            return errno.EOPNOTSUPP
        nic.trust = sels
        return 0


class FakeNetlinkSocket:
    """Datagram semantics: each send() is answered by reply datagrams that recv() returns one at a time."""

    def __init__(self, kernel: FakeDcbKernel):
        self.kernel = kernel
        self.closed = False
        self._queue: deque[bytes] = deque()

    def send(self, data: bytes, /) -> int:
        if self.closed:
            raise OSError(errno.EBADF, "closed")
        self._queue.extend(self.kernel.handle(bytes(data)))
        return len(data)

    def recv(self, bufsize: int, /) -> bytes:
        if self.closed:
            raise OSError(errno.EBADF, "closed")
        if not self._queue:
            raise BlockingIOError(
                errno.EAGAIN, "nothing to read: the client waits for a reply that never comes"
            )
        return self._queue.popleft()[:bufsize]

    def close(self) -> None:
        self.closed = True


class FakeEventSocket:
    """A group subscription: recv() blocks until a notification arrives; close() ends it (b"")."""

    def __init__(self) -> None:
        self._queue: queue.Queue[bytes] = queue.Queue()
        self.closed = False

    def deliver(self, msg: bytes) -> None:
        if not self.closed:
            self._queue.put(msg)

    def recv(self, bufsize: int, /) -> bytes:
        return self._queue.get()[:bufsize]

    def close(self) -> None:
        self.closed = True
        self._queue.put(b"")
