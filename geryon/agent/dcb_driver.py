"""The DCB driver: NIC ETS, PFC, DSCP APP entries and trust, through dcbnl (geryon.agent.dcbnl).

Targets per interface, with the JSON value each holds:
    <if>/dcb/ets              {"willing": false, "prio_tc": [8], "tc_tsa": ["strict"|"ets"|..], "tc_bw": [8]}
    <if>/dcb/pfc              {"pfc_en": [lossless priorities]}
    <if>/dcb/app/dscp/<dscp>  the 802.1p priority the APP table maps this DSCP to; None = no entry
    <if>/dcb/trust            ["dscp"] or ["pcp"]: the APP trust order (kernel >= 6.2 and driver support)
    <if>/dcb/pause            {"autoneg", "rx", "tx"}: link-level pause (ethtool), off wherever PFC is on
    <if>/dcb/pfc_storm_timeout ms: PFC storm prevention (ethtool tunable pfc-prevention-tout), 0 = off
    <if>/dcb/buffer           {"prio2buffer": [8], "buffer_size": [8 bytes]}: NIC receive buffers
    <if>/dcb/cable_length     metres: ieee_pfc.delay, which mlx5 takes as the cable length (PFC headroom)
    <if>/dcb/dcbx             ["host", "ieee"]: the DCBX mode bits by name (only with `dcbx: host`)
    <if>/dcb/maxrate          [8 x kbit/s]: per-TC transmit limit, 0 = none (only when a class sets maxrate)

One target per DSCP (not one for the whole APP table) so Geryon owns only the DSCPs its config names
and leaves an operator's other entries alone. A device without DCB ops (veth) raises Unsupported.

Under `dcbx: lld_managed` an LLDP agent owns ETS/PFC/APP/trust/DCBX: `desired` names none of them (only
pause and the storm timeout, which are ethtool's) and `lld_check` compares the NIC's own state with the
classes instead; `peer_check` compares the switch's advertisement, in every mode.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from geryon.agent.config import AgentConfig, ConfigError
from geryon.agent.dcbnl import (
    DCB_APP_SEL_PCP,
    DCB_CAP_DCBX_HOST,
    DCB_CAP_DCBX_LLD_MANAGED,
    DCBX_FLAGS,
    IEEE_8021QAZ_APP_SEL_DSCP,
    TSA_NAMES,
    App,
    Buffer,
    DcbnlClient,
    DcbUnsupported,
    Ets,
    IeeeState,
    Maxrate,
    Pfc,
    dcbx_names,
    pfc_mask,
)
from geryon.agent.driver import DriverError, Unsupported
from geryon.agent.ethtool import Ethtool, EthtoolUnsupported, Pause, kernel_ioctl
from geryon.agent.peer import PeerCheck, PeerMismatch, peer_mismatches

TSA_BY_NAME = {name: num for num, name in TSA_NAMES.items()}
TRUST_SELECTORS = {"dscp": IEEE_8021QAZ_APP_SEL_DSCP, "pcp": DCB_APP_SEL_PCP}
TRUST_NAMES = {sel: name for name, sel in TRUST_SELECTORS.items()}
KINDS = ("ets", "pfc", "app", "trust")


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)  # journal values are JSON: tuples == lists


OBJECT_KINDS = (
    "ets",
    "pfc",
    "trust",
    "maxrate",
    "dcbx",
    "cable_length",
    "buffer",
    "pause",
    "pfc_storm_timeout",
)
ETHTOOL_KINDS = ("pause", "pfc_storm_timeout")


def _no_ethtool(ifname: str, request: bytes) -> bytes:
    raise OSError(errno.EOPNOTSUPP, "no ethtool access for this driver instance")


def parse_target(target: str) -> tuple[str, str, int | None]:
    """'eth0/dcb/app/dscp/46' -> ('eth0', 'app', 46); 'eth0/dcb/pfc' -> ('eth0', 'pfc', None)."""
    parts = target.split("/")
    if len(parts) == 3 and parts[1] == "dcb" and parts[2] in OBJECT_KINDS:
        return parts[0], parts[2], None
    if len(parts) == 5 and parts[1:4] == ["dcb", "app", "dscp"] and parts[4].isdigit() and int(parts[4]) < 64:
        return parts[0], "app", int(parts[4])
    raise DriverError(
        target,
        "not a DCB target (<if>/dcb/ets|pfc|trust|maxrate|dcbx|cable_length|buffer or <if>/dcb/app/...)",
    )


def ets_value(ets: Ets) -> dict[str, Any]:
    """The ETS as the device reports it (a TSA this module has no name for shows as its number)."""
    return {
        "willing": ets.willing,
        "prio_tc": list(ets.prio_tc),
        "tc_tsa": [TSA_NAMES.get(t, str(t)) for t in ets.tc_tsa],
        "tc_bw": list(ets.tc_tx_bw),
    }


def ets_from_value(target: str, value: dict[str, Any], ets_cap: int = 0) -> Ets:
    """A value (desired, or a journaled "before" read from the device) as a request the device takes."""
    try:
        tsa = tuple(TSA_BY_NAME[t] if t in TSA_BY_NAME else int(t) for t in value["tc_tsa"])
        ets = Ets(
            willing=bool(value.get("willing", False)),
            tc_tsa=tsa,
            tc_tx_bw=tuple(value["tc_bw"]),
            prio_tc=tuple(value["prio_tc"]),
            ets_cap=ets_cap,
        ).as_request()
        ets.check_request()
        return ets
    except (KeyError, TypeError, ValueError) as e:
        raise DriverError(target, f"not an ETS value the device can take ({e}): {value!r}") from None


DCBX_HOST_IEEE = ["host", "ieee"]  # what `dcb dcbx set dev X host ieee` asks for


def dcbx_mode(target: str, value: Any) -> int:
    """A DCBX value (names, as observed) as the mode to request. Neither host nor lld_managed is how
    mlx5 reports its firmware agent; the request for that is mode 0 (mlx5e_dcbnl_setdcbx)."""
    by_name = {name: bit for bit, name in DCBX_FLAGS.items()}
    try:
        mode = 0
        for name in value:
            mode |= by_name[name] if name in by_name else int(name, 16)
    except (KeyError, TypeError, ValueError):
        raise DriverError(target, f"not a DCBX value (names of {sorted(by_name)}): {value!r}") from None
    if not mode & (DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_LLD_MANAGED):
        return 0
    return mode


# mlx5 keeps buffer sizes in cells of port_buff_cell_sz and reads back the size rounded down to a cell
# (mlx5e_port_manual_buffer_config / mlx5e_port_query_buffer); a size that far below counts as equal.
BUFFER_ROUNDING = 1024


def buffer_same(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """The priority -> buffer map exactly; sizes only when wanted, down to the NIC's cell rounding."""
    if list(have.get("prio2buffer", [])) != list(want.get("prio2buffer", [])):
        return False
    if "buffer_size" not in want:
        return True
    got = list(have.get("buffer_size", []))
    asked = list(want["buffer_size"])
    return len(got) == len(asked) and all(
        0 <= a - g < BUFFER_ROUNDING for g, a in zip(got, asked, strict=True)
    )


def maxrate_kbits(config: AgentConfig) -> list[int] | None:
    """The per-TC max rates in kbit/s (struct ieee_maxrate's unit; TC = the class priority, 0 = no
    limit), or None when no class sets `maxrate` (then Geryon leaves the NIC's limits alone)."""
    if all(c.maxrate_bits is None for c in config.classes):
        return None
    out = [0] * 8
    for c in config.classes:
        if c.maxrate_bits is not None:
            out[c.priority] = c.maxrate_bits // 1000
    return out


def ets_meaning(value: Any) -> Any:
    """What an ETS value means for traffic, so desired and observed compare by meaning, not encoding:
    the prio->TC map, willing, and for each TC a priority uses its TSA and, for ets TCs only, its share.
    A strict or vendor TC's bandwidth is ignored (mlx5 reports 100%, ice may report 100% on a strict
    TC 0), and so is a TC no priority maps to (it carries no traffic)."""
    if not isinstance(value, dict):
        return value
    try:
        prio_tc = [int(tc) for tc in value["prio_tc"]]
        tsa, bw = list(value["tc_tsa"]), list(value["tc_bw"])
        tcs = {
            tc: (tsa[tc], bw[tc] if tsa[tc] == "ets" else None)
            for tc in sorted(set(prio_tc))
            if tc < len(tsa)
        }
    except (KeyError, TypeError, ValueError, IndexError):
        return value
    return {"willing": bool(value.get("willing")), "prio_tc": prio_tc, "tcs": tcs}


class DcbDriver:
    name = "dcb"

    def __init__(
        self,
        netns: str | None = None,
        client_factory: Callable[[], DcbnlClient] | None = None,
        ethtool: Ethtool | None = None,
    ) -> None:
        self._client = client_factory() if client_factory is not None else DcbnlClient(netns=netns)
        if ethtool is None:
            # A driver built on an injected dcbnl client (tests) never reaches the host's own NICs.
            ethtool = Ethtool(kernel_ioctl(netns) if client_factory is None else _no_ethtool)
        self._ethtool = ethtool

    def close(self) -> None:
        self._client.close()

    # -- desired --

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        ets = config.ets()
        ets_val = {
            "willing": False,  # a willing NIC lets the switch's DCBX override what we set
            "prio_tc": list(ets.prio_tc),
            "tc_tsa": list(ets.tc_tsa),
            "tc_bw": list(ets.tc_bw),
        }
        out: dict[str, Any] = {}
        for ifname in config.interfaces:
            if config.dcbx == "lld_managed":
                # The LLDP agent owns ETS/PFC/APP/trust (the NIC refuses host writes): nothing of DCB is
                # written, `lld_check` compares it with the classes instead. Link-level pause and the
                # storm timeout are ethtool settings no DCBX TLV carries: still Geryon's.
                if config.lossless_priorities:
                    out[f"{ifname}/dcb/pause"] = {"rx": False, "tx": False}
                if config.pfc_storm_timeout is not None:
                    out[f"{ifname}/dcb/pfc_storm_timeout"] = config.pfc_storm_timeout
                continue
            if config.dcbx == "host":
                # First, so the rest is written in host mode: a NIC whose firmware runs DCBX (mlx5's
                # default) would otherwise let the switch's advertisements override it.
                out[f"{ifname}/dcb/dcbx"] = DCBX_HOST_IEEE
            out[f"{ifname}/dcb/ets"] = ets_val
            out[f"{ifname}/dcb/pfc"] = {"pfc_en": list(config.lossless_priorities)}
            if config.cable_length is not None:
                out[f"{ifname}/dcb/cable_length"] = config.cable_length
            if config.lossless_priorities:
                # PFC and link-level pause on one port: the NIC may send global pause that stops every
                # priority, lossy ones included. Where PFC is on, global pause is off.
                out[f"{ifname}/dcb/pause"] = {"rx": False, "tx": False}
            if config.pfc_storm_timeout is not None:
                out[f"{ifname}/dcb/pfc_storm_timeout"] = config.pfc_storm_timeout
            prio2buffer = config.prio2buffer()
            if prio2buffer is not None:
                buf: dict[str, Any] = {"prio2buffer": list(prio2buffer)}
                if config.buffer_sizes is not None:
                    buf["buffer_size"] = list(config.buffer_sizes)
                out[f"{ifname}/dcb/buffer"] = buf
            # With PCP trust the DSCP APP table is not used, and mlx5 switches to DSCP trust on the first
            # DSCP entry (mlx5e_dcbnl_ieee_setapp): write none, release any Geryon wrote earlier.
            if config.trust == "dscp":
                for dscp, prio in config.app_entries():
                    out[f"{ifname}/dcb/app/dscp/{dscp}"] = prio
            out[f"{ifname}/dcb/trust"] = [config.trust]
            limits = maxrate_kbits(config)
            if limits is not None:
                out[f"{ifname}/dcb/maxrate"] = limits
        return out

    def check(self, config: AgentConfig) -> None:
        """Host-specific config errors: more lossless priorities than a NIC's PFC supports, or a TC
        the NIC does not have (ets_cap; bnxt has as many TCs as CoS queues, often fewer than 8)."""
        want = len(config.lossless_priorities)
        top_tc = max(config.ets().prio_tc)
        for ifname in config.interfaces:
            try:
                state = self._client.get_ieee(ifname)
            except OSError:
                continue  # no DCB here (veth) or no such interface: observe reports it
            pfc = state.pfc
            if state.ets is not None and state.ets.ets_cap and top_tc >= state.ets.ets_cap:
                raise ConfigError(
                    f"classes: the classes and CNP need traffic class {top_tc} (TC = priority), but "
                    f"{ifname} has {state.ets.ets_cap} TCs (ets_cap); use priorities below "
                    f"{state.ets.ets_cap}"
                )
            if pfc is not None and pfc.pfc_cap and want > pfc.pfc_cap:
                raise ConfigError(
                    f"classes: {want} lossless priorities {list(config.lossless_priorities)}, but "
                    f"{ifname} supports {pfc.pfc_cap} (pfc_cap); make fewer classes lossless"
                )

    @staticmethod
    def same(target: str, have: Any, want: Any) -> bool:
        """Equal in meaning (the engine asks this instead of comparing JSON)."""
        if target.endswith("/dcb/ets"):
            return _canon(ets_meaning(have)) == _canon(ets_meaning(want))
        if target.endswith("/dcb/buffer") and isinstance(have, dict) and isinstance(want, dict):
            return buffer_same(have, want)
        if target.endswith("/dcb/pause") and isinstance(have, dict) and isinstance(want, dict):
            return all(have.get(k) == v for k, v in want.items())  # autoneg only when asked for
        return _canon(have) == _canon(want)

    def peer_check(self, config: AgentConfig) -> PeerCheck:
        """The switch's DCBX advertisement against the config on every interface whose NIC reports it
        (no DCB, or a driver without the peer ops: left out, nothing is known about that port)."""
        checked: list[str] = []
        found: list[PeerMismatch] = []
        for ifname in config.interfaces:
            try:
                state = self._client.get_ieee(ifname)
            except OSError:
                continue
            if state.peer_ets is None and state.peer_pfc is None and not state.peer_apps:
                continue
            checked.append(ifname)
            found += peer_mismatches(config, ifname, state)
        return PeerCheck(tuple(checked), tuple(found), time.time())

    def lld_check(self, config: AgentConfig) -> PeerCheck | None:
        """Under `dcbx: lld_managed`, the NIC's own ETS/PFC/APP (as the LLDP agent set them) against the
        classes, with the rules of the peer check, and the DCBX mode (the LLDP agent must be in charge,
        or nobody keeps the NIC's DCB as configured). None in any other mode."""
        if config.dcbx != "lld_managed":
            return None
        checked: list[str] = []
        found: list[PeerMismatch] = []
        for ifname in config.interfaces:
            try:
                state = self._client.get_ieee(ifname)
            except OSError as e:
                found.append(
                    PeerMismatch(
                        ifname, "none", ifname, "DCB managed by an LLDP agent", e.strerror or str(e), "lld"
                    )
                )
                continue
            checked.append(ifname)
            if state.dcbx is not None and not state.dcbx & DCB_CAP_DCBX_LLD_MANAGED:
                found.append(
                    PeerMismatch(
                        ifname,
                        "dcbx",
                        ifname,
                        "DCBX mode lld_managed",
                        " ".join(dcbx_names(state.dcbx)),
                        "lld",
                    )
                )
            if state.ets is None and state.pfc is None:
                found.append(PeerMismatch(ifname, "none", ifname, "IEEE ETS/PFC", "none reported", "lld"))
                continue
            own = dataclasses.replace(state, peer_ets=state.ets, peer_pfc=state.pfc, peer_apps=state.apps)
            found += [dataclasses.replace(m, side="lld") for m in peer_mismatches(config, ifname, own)]
        return PeerCheck(tuple(checked), tuple(found), time.time())

    def lld_report(self, config: AgentConfig) -> list[str]:
        check = self.lld_check(config)
        return [m.line() for m in check.mismatches] if check is not None else []

    def peer_report(self, config: AgentConfig) -> list[str]:
        """Where the switch's DCBX advertisement disagrees with the config, one line each."""
        return [m.line() for m in self.peer_check(config).mismatches]

    # -- observe --

    def _state(self, target: str, ifname: str) -> IeeeState:
        try:
            return self._client.get_ieee(ifname)
        except DcbUnsupported:
            raise Unsupported(target, f"{ifname} has no DCB operations (no DCB-capable NIC driver)") from None
        except OSError as e:
            raise DriverError(target, f"reading DCB state: {e.strerror or e}") from None

    def _ethtool_value(self, target: str, ifname: str, kind: str) -> Any:
        if kind == "pause":
            # Only where PFC can be on: a NIC without DCB PFC keeps its link-level pause (its only flow
            # control); turning that off would lose frames the host could have paused.
            pfc = self._state(target, ifname).pfc
            if pfc is None:
                raise Unsupported(target, f"{ifname} reports no IEEE PFC: link-level pause is left as it is")
        try:
            if kind == "pause":
                p = self._ethtool.get_pause(ifname)
                return {"autoneg": p.autoneg, "rx": p.rx, "tx": p.tx}
            return self._ethtool.get_pfc_storm_timeout(ifname)
        except EthtoolUnsupported:
            raise Unsupported(target, f"{ifname}: the driver has no ethtool {kind} op") from None
        except OSError as e:
            raise DriverError(target, e.strerror or str(e)) from None

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        states: dict[str, IeeeState] = {}
        out: dict[str, Any] = {}
        for target in targets:
            ifname, kind, dscp = parse_target(target)
            if kind in ETHTOOL_KINDS:
                out[target] = self._ethtool_value(target, ifname, kind)
                continue
            if ifname not in states:
                states[ifname] = self._state(target, ifname)
            out[target] = self._value(target, states[ifname], kind, dscp)
        return out

    @staticmethod
    def _value(target: str, state: IeeeState, kind: str, dscp: int | None) -> Any:
        if kind == "ets":
            if state.ets is None:
                raise Unsupported(target, f"{state.ifname} reports no IEEE ETS")
            return ets_value(state.ets)
        if kind == "pfc":
            if state.pfc is None:
                raise Unsupported(target, f"{state.ifname} reports no IEEE PFC")
            return {"pfc_en": list(state.pfc.priorities)}
        if kind == "buffer":
            if state.buffer is None:
                raise Unsupported(
                    target, f"{state.ifname}: the driver has no receive buffer ops (dcbnl_getbuffer)"
                )
            return {
                "prio2buffer": list(state.buffer.prio2buffer),
                "buffer_size": list(state.buffer.buffer_size),
            }
        if kind == "cable_length":
            if state.pfc is None:
                raise Unsupported(target, f"{state.ifname} reports no IEEE PFC")
            return state.pfc.delay
        if kind == "dcbx":
            if state.dcbx is None:
                raise Unsupported(target, f"{state.ifname}: the driver reports no DCBX mode (getdcbx)")
            return dcbx_names(state.dcbx)
        if kind == "maxrate":
            if state.maxrate is None:
                raise Unsupported(
                    target, f"{state.ifname}: the driver has no per-TC max rate (ieee_getmaxrate)"
                )
            return list(state.maxrate.tc_maxrate)
        if kind == "trust":
            if state.trust is None:
                raise Unsupported(
                    target,
                    "no APP trust table (needs kernel >= 6.2 and driver support; mlx5 trusts DSCP "
                    "once DSCP APP entries exist)",
                )
            return [TRUST_NAMES.get(s, str(s)) for s in state.trust]
        prios = sorted(
            a.priority for a in state.apps if a.selector == IEEE_8021QAZ_APP_SEL_DSCP and a.protocol == dscp
        )
        if not prios:
            return None
        return prios[0] if len(prios) == 1 else prios

    # -- write --

    def _write_ethtool(self, target: str, ifname: str, kind: str, value: Any) -> None:
        if value is None:
            return
        try:
            if kind == "pause":
                pause = Pause(bool(value.get("autoneg", False)), bool(value["rx"]), bool(value["tx"]))
                self._ethtool.set_pause(ifname, pause)
            else:
                self._ethtool.set_pfc_storm_timeout(ifname, int(value))
        except EthtoolUnsupported as e:
            raise Unsupported(target, e.strerror or str(e)) from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DriverError(target, str(e)) from None

    def write(self, target: str, value: Any) -> None:
        ifname, kind, dscp = parse_target(target)
        if kind in ETHTOOL_KINDS:
            self._write_ethtool(target, ifname, kind, value)
            got = self.observe([target])[target]
            if not self.same(target, got, value):
                raise DriverError(target, f"the device accepted {value!r} but reports {got!r}")
            return
        try:
            if kind == "ets":
                self._write_ets(target, ifname, value)
            elif kind == "pfc":
                self._write_pfc(target, ifname, value)
            elif kind == "trust":
                self._write_trust(target, ifname, value)
            elif kind == "buffer":
                if value is not None:
                    # as `dcb buffer set` does: read the struct, change what is asked, write it all back
                    held = self._client.get_buffer(ifname)
                    sizes = value.get("buffer_size", held.buffer_size)
                    self._client.set_buffer(
                        ifname, Buffer(tuple(value["prio2buffer"]), tuple(sizes), held.total_size)
                    )
            elif kind == "cable_length":
                if value is not None:
                    cur = self._client.get_pfc(ifname)  # only the delay changes; pfc_en is the pfc target's
                    self._client.set_pfc(ifname, Pfc(cur.pfc_cap, cur.pfc_en, cur.mbc, int(value)))
                    got = self.observe([target])[target]
                    if got != value:
                        raise DriverError(
                            target,
                            f"the NIC reports {got} after {value}: its driver does not take ieee_pfc.delay "
                            "as the cable length (mlx5 does); drop cable_length for this NIC",
                        )
            elif kind == "dcbx":
                if value is not None:
                    status = self._client.set_dcbx(ifname, dcbx_mode(target, value))
                    got = self.observe([target])[target]
                    if got != list(value):
                        raise DriverError(
                            target, f"the driver answered {status} to DCBX {value!r} and reports {got!r}"
                        )
            elif kind == "maxrate":
                if value is not None:
                    self._client.set_maxrate(ifname, Maxrate(tuple(value)))
            else:
                assert dscp is not None
                self._write_app(ifname, dscp, value)
        except DcbUnsupported as e:
            raise Unsupported(target, e.strerror or str(e)) from None
        except (OSError, ValueError) as e:
            raise DriverError(target, str(e)) from None
        # Some drivers accept a set they do not implement (dcbnl skips an op the driver lacks): read back.
        got = self.observe([target])[target]
        if not self.same(target, got, value):
            raise DriverError(target, f"the device accepted {value!r} but reports {got!r}")

    def _write_ets(self, target: str, ifname: str, value: Any) -> None:
        if value is None:
            return  # ETS cannot be removed; the journal's "before" is a full value
        current = self._client.get_ets(ifname)
        # Echo ets_cap as the NIC reported it, as iproute2's dcb does (it writes back what it read).
        self._client.set_ets(ifname, ets_from_value(target, value, current.ets_cap))

    def _write_pfc(self, target: str, ifname: str, value: Any) -> None:
        if value is None:
            return
        prios = list(value["pfc_en"])
        current = self._client.get_pfc(ifname)
        if current.pfc_cap and len(prios) > current.pfc_cap:
            raise DriverError(
                target,
                f"{len(prios)} lossless priorities {prios}, the NIC supports {current.pfc_cap} (pfc_cap)",
            )
        # keep the device's delay and mbc: Geryon only decides which priorities are lossless
        self._client.set_pfc(ifname, Pfc(current.pfc_cap, pfc_mask(prios), current.mbc, current.delay))

    def _write_trust(self, target: str, ifname: str, value: Any) -> None:
        if value is None:
            return
        try:
            sels = [TRUST_SELECTORS[name] for name in value]
        except (KeyError, TypeError):
            raise DriverError(
                target, f"trust must be a list of {sorted(TRUST_SELECTORS)}, got {value!r}"
            ) from None
        self._client.set_trust(ifname, sels)

    def _write_app(self, ifname: str, dscp: int, value: Any) -> None:
        want = set() if value is None else {value} if isinstance(value, int) else set(value)
        have = self._dscp_prios(ifname, dscp)
        # Add first: mlx5 replaces the DSCP's old entry itself when a new one is added; the generic
        # kernel keeps both, so whatever is left over is deleted afterwards.
        self._client.add_apps(ifname, [App.dscp(dscp, p) for p in sorted(want - have)])
        extra = self._dscp_prios(ifname, dscp) - want
        self._client.del_apps(ifname, [App.dscp(dscp, p) for p in sorted(extra)])

    def _dscp_prios(self, ifname: str, dscp: int) -> set[int]:
        apps = self._client.get_apps(ifname)
        return {a.priority for a in apps if a.selector == IEEE_8021QAZ_APP_SEL_DSCP and a.protocol == dscp}
