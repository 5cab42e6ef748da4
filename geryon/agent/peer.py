"""What the switch advertises by DCBX (the NIC's peer ETS/PFC/APP) against the host's agent config.

RoCE is lossless only when both ends agree: a priority the host makes lossless must have PFC on at the
switch port too, a strict class must be strict there, and the switch must map the class DSCPs to the
same priorities. The NIC learns the switch's view from its LLDP DCBX TLVs and reports it through
dcbnl (DCB_ATTR_IEEE_PEER_ETS/PFC/APP, only for drivers with the peer ops). Pure comparison here;
`geryon check-fabric --peer` reads the NICs and prints the result.
"""

from __future__ import annotations

from dataclasses import dataclass

from geryon.agent.config import AgentConfig
from geryon.agent.dcbnl import ETS, IEEE_8021QAZ_APP_SEL_DSCP, STRICT, TSA_NAMES, IeeeState

# What a disagreement is about: PFC per priority, the ETS TC/TSA of a class, the DSCP APP map, or no
# advertisement at all (the metric's `kind` label).
KINDS = ("pfc", "ets", "app", "none")


@dataclass(frozen=True)
class PeerMismatch:
    interface: str
    kind: str  # one of KINDS
    where: str  # "eth0 priority 3", "eth0 DSCP 26", "eth0"
    expected: str
    found: str
    # whose DCB state this is: "peer" (the switch's advertisement) or "lld" (the NIC's own, as the LLDP
    # agent set it under dcbx: lld_managed)
    side: str = "peer"

    def line(self) -> str:
        return f"{self.side}: {self.where}: expected {self.expected}, found {self.found}"

    def as_json(self) -> dict[str, str]:
        return {
            "interface": self.interface,
            "kind": self.kind,
            "where": self.where,
            "expected": self.expected,
            "found": self.found,
            "side": self.side,
        }


@dataclass(frozen=True)
class PeerCheck:
    """One check of every configured interface: those whose NIC reported the switch's DCBX state, and
    where it disagrees with the config. Interfaces without peer state (no DCB, a driver without the
    peer ops) are not in `interfaces`: nothing is known about their switch port."""

    interfaces: tuple[str, ...]
    mismatches: tuple[PeerMismatch, ...]
    at: float  # unix seconds

    def as_json(self) -> dict[str, object]:
        return {
            "interfaces": list(self.interfaces),
            "mismatches": [m.as_json() for m in self.mismatches],
            "checked_at": self.at,
        }


def peer_mismatches(config: AgentConfig, ifname: str, state: IeeeState) -> list[PeerMismatch]:
    """Every disagreement between the config and what the switch on `ifname` advertises."""
    if state.peer_ets is None and state.peer_pfc is None and not state.peer_apps:
        return [
            PeerMismatch(
                ifname,
                "none",
                ifname,
                "the switch's DCBX advertisement (peer ETS/PFC/APP)",
                "none (the NIC driver reports no peer state, or the switch sends no DCBX TLVs)",
            )
        ]
    out: list[PeerMismatch] = []
    lossless = {c.priority: c.name for c in config.classes if c.lossless}
    if state.peer_pfc is not None:
        on = set(state.peer_pfc.priorities)
        for prio, name in sorted(lossless.items()):
            if prio not in on:
                out.append(
                    PeerMismatch(
                        ifname, "pfc", f"{ifname} priority {prio}", f"PFC on (class {name!r})", "off"
                    )
                )
        for prio in sorted(on - set(lossless)):
            out.append(
                PeerMismatch(ifname, "pfc", f"{ifname} priority {prio}", "PFC off (no lossless class)", "on")
            )
    if state.peer_ets is not None:
        ets = state.peer_ets
        tc_owner: dict[int, str] = {}
        for c in config.classes:
            tc = ets.prio_tc[c.priority]
            tsa = ets.tc_tsa[tc] if tc < len(ets.tc_tsa) else None
            want_strict = c.tsa == "strict"
            if (tsa == STRICT) != want_strict or tsa not in (STRICT, ETS):
                shown = TSA_NAMES.get(tsa, str(tsa)) if tsa is not None else "no such TC"
                out.append(
                    PeerMismatch(
                        ifname,
                        "ets",
                        f"{ifname} priority {c.priority}",
                        f"a {c.tsa} TC (class {c.name!r})",
                        f"TC {tc}, {shown}",
                    )
                )
            if tc in tc_owner:
                out.append(
                    PeerMismatch(
                        ifname,
                        "ets",
                        f"{ifname} priority {c.priority}",
                        f"a TC of its own (class {c.name!r})",
                        f"TC {tc}, shared with class {tc_owner[tc]!r}",
                    )
                )
            tc_owner.setdefault(tc, c.name)
    if state.peer_apps:
        dscp_map: dict[int, set[int]] = {}
        for app in state.peer_apps:
            if app.selector == IEEE_8021QAZ_APP_SEL_DSCP:
                dscp_map.setdefault(app.protocol, set()).add(app.priority)
        if dscp_map:  # a switch that advertises no DSCP entries says nothing about DSCP mapping
            for dscp, prio in config.app_entries():
                have = dscp_map.get(dscp)
                if have is not None and have != {prio}:
                    out.append(
                        PeerMismatch(
                            ifname,
                            "app",
                            f"{ifname} DSCP {dscp}",
                            f"priority {prio}",
                            f"priority {', '.join(map(str, sorted(have)))}",
                        )
                    )
    return out
