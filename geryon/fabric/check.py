"""Host/switch QoS consistency: does the host agent mark, queue and pause traffic the way the switches do?

Pure logic. Inputs: the host agent's `AgentConfig`, the switch `QosIntent` and optionally the effective
QoS of a real switch config (`SwitchQos`, e.g. parsed from a SONiC config_db by
geryon.fabric.sonic_config). Output: a list of `Mismatch`, each naming what disagrees, where, what was
expected and what was found. A mismatch is silent in production: traffic the host sends lossless on
a switch queue without PFC is dropped, a strict class behind a DWRR queue waits; hence this check.

Switch priority = traffic class (TC): SONiC's DSCP_TO_TC_MAP gives the TC, PFC (pfc_enable) is per
TC/priority, TC_TO_QUEUE_MAP picks the egress queue and the queue's SCHEDULER serves it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from geryon.agent.config import AgentConfig
from geryon.fabric.intent import QosIntent


@dataclass(frozen=True)
class Scheduler:
    """How a switch queue is served: "strict", "dwrr" or "wrr" (with a weight)."""

    kind: str
    weight: int | None = None

    def __str__(self) -> str:
        return self.kind.upper() if self.weight is None else f"{self.kind.upper()} weight {self.weight}"


@dataclass(frozen=True)
class PortQos:
    """The effective QoS of one switch port, vendor-neutral."""

    dscp_to_tc: Mapping[int, int]  # only the DSCPs the config maps
    tc_to_queue: Mapping[int, int]
    pfc_enable: frozenset[int]  # lossless TCs/priorities
    schedulers: Mapping[int, Scheduler]  # queue -> scheduler; absent = none configured
    dscp_map: str = "DSCP_TO_TC_MAP"  # how a message names this port's DSCP map
    default_tc: int = 0  # where unmapped DSCPs go (SAI default: TC 0)
    # Buffers, where the config says (None: not in this config, not checked). Queues whose egress
    # buffer profile is lossless; TC -> ingress priority group (PG 0 is the lossy PG in SONiC's
    # templates); PFC priority -> PG where the platform maps it (pfc_to_pg_map).
    lossless_queues: frozenset[int] | None = None
    tc_to_pg: Mapping[int, int] | None = None
    pfc_to_pg: Mapping[int, int] | None = None

    def tc_of(self, dscp: int) -> int | None:
        return self.dscp_to_tc.get(dscp)

    def queue_of(self, tc: int) -> int:
        return self.tc_to_queue.get(tc, tc)  # SAI default: TC n -> queue n

    def key(self) -> tuple[Any, ...]:
        return (
            tuple(sorted(self.dscp_to_tc.items())),
            tuple(sorted(self.tc_to_queue.items())),
            tuple(sorted(self.pfc_enable)),
            tuple(sorted(self.schedulers.items(), key=lambda kv: kv[0])),
            self.dscp_map,
            self.default_tc,
            None if self.lossless_queues is None else tuple(sorted(self.lossless_queues)),
            None if self.tc_to_pg is None else tuple(sorted(self.tc_to_pg.items())),
            None if self.pfc_to_pg is None else tuple(sorted(self.pfc_to_pg.items())),
        )


@dataclass(frozen=True)
class SwitchQos:
    """A switch config's effective QoS per port, and where it came from (for messages)."""

    source: str
    ports: Mapping[str, PortQos]

    def groups(self) -> list[tuple[tuple[str, ...], PortQos]]:
        """Ports with identical QoS together, so one bad template gives one line, not one per port."""
        out: dict[tuple[Any, ...], tuple[list[str], PortQos]] = {}
        for name, port in sorted(self.ports.items(), key=lambda kv: _natural(kv[0])):
            out.setdefault(port.key(), ([], port))[0].append(name)
        return [(tuple(names), port) for names, port in out.values()]


def _natural(name: str) -> tuple[Any, ...]:
    """Ethernet4 before Ethernet12."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", name))


@dataclass(frozen=True)
class Mismatch:
    kind: str  # priority | queue | lossless | buffer | pg | scheduler | unmapped | unmatched | cnp
    where: str
    expected: str
    found: str

    def line(self) -> str:
        return f"{self.kind}: {self.where}: expected {self.expected}, found {self.found}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "where": self.where, "expected": self.expected, "found": self.found}


@dataclass(frozen=True)
class _Expect:
    """What one side (intent or host) expects of the switch for one DSCP."""

    owner: str  # "intent class 'bulk'", "host CNP", ...
    priority: int
    queue: int | None  # the host does not know switch queues
    lossless: bool | None  # None: not checked (CNP)
    strict: bool | None  # True: must be strict; False: must not be strict; None: either


def check(host: AgentConfig, intent: QosIntent, switch: SwitchQos | None = None) -> list[Mismatch]:
    """Every disagreement between the host config, the intent and (if given) the switch config."""
    out = _host_vs_intent(host, intent)
    if switch is not None:
        out += _switch_vs(_expectations(host, intent), switch)
        out += _unmatched_vs(intent, switch)
    return out


def _host_vs_intent(host: AgentConfig, intent: QosIntent) -> list[Mismatch]:
    out: list[Mismatch] = []
    for i, hc in enumerate(host.classes):
        for d in hc.dscps:
            where = f"host classes[{i}] {hc.name!r} DSCP {d}"
            ic = intent.class_of_dscp(d)
            if ic is None:
                known = ", ".join(str(x) for c in intent.classes for x in c.dscp)
                rest = intent.unmatched_class
                out.append(
                    Mismatch(
                        "unmapped",
                        where,
                        f"a class of the switch intent for DSCP {d} (intent DSCPs: {known})",
                        f"none: the switches put it with unclassified traffic (intent class {rest.name!r}, "
                        f"priority {rest.priority}, {'lossless' if rest.lossless else 'lossy'})",
                    )
                )
                continue
            if ic.priority != hc.priority:
                out.append(
                    Mismatch(
                        "priority",
                        where,
                        f"priority {ic.priority} (intent class {ic.name!r})",
                        f"priority {hc.priority} on the host",
                    )
                )
            if hc.tsa == "strict" and ic.scheduler != "strict":
                out.append(
                    Mismatch(
                        "scheduler",
                        where,
                        "a strict switch queue (the host class is strict)",
                        f"intent class {ic.name!r} queue {ic.queue} is {ic.scheduler.upper()}",
                    )
                )
    host_ll = set(host.lossless_priorities)
    intent_ll = {c.priority for c in intent.classes if c.lossless}
    for p in sorted(host_ll ^ intent_ll):
        on_host = p in host_ll
        out.append(
            Mismatch(
                "lossless",
                f"priority {p}",
                "lossless on host and switch alike (PFC on both, or on neither)",
                f"host {'lossless (PFC on)' if on_host else 'lossy (no PFC)'}, "
                f"intent {'lossless' if p in intent_ll else 'lossy'}",
            )
        )
    out += _cnp_host_vs_intent(host, intent)
    return out


def _cnp_host_vs_intent(host: AgentConfig, intent: QosIntent) -> list[Mismatch]:
    want = intent.cnp
    have = host.cnp
    if want is None:
        return []
    if have is None:
        return [
            Mismatch(
                "cnp",
                "host cnp",
                f"DSCP {want.dscp} priority {want.priority} (intent)",
                "cnp: null (the NIC's default, which differs by vendor: 56/7, 48/6, 4/6)",
            )
        ]
    if (have.dscp, have.priority) != (want.dscp, want.priority):
        return [
            Mismatch(
                "cnp",
                "host cnp",
                f"DSCP {want.dscp} priority {want.priority} (intent)",
                f"DSCP {have.dscp} priority {have.priority}",
            )
        ]
    return []


def _expectations(host: AgentConfig, intent: QosIntent) -> dict[int, list[_Expect]]:
    exp: dict[int, list[_Expect]] = {}
    for ic in intent.classes:
        for d in ic.dscp:
            exp.setdefault(d, []).append(
                _Expect(
                    f"intent class {ic.name!r}", ic.priority, ic.queue, ic.lossless, ic.scheduler == "strict"
                )
            )
    for hc in host.classes:
        for d in hc.dscps:
            exp.setdefault(d, []).append(
                _Expect(
                    f"host class {hc.name!r}",
                    hc.priority,
                    None,
                    hc.lossless,
                    True if hc.tsa == "strict" else None,
                )
            )
    if intent.cnp is not None:
        exp.setdefault(intent.cnp.dscp, []).append(
            _Expect("intent CNP", intent.cnp.priority, intent.cnp.queue, None, True)
        )
    if host.cnp is not None:
        exp.setdefault(host.cnp.dscp, []).append(_Expect("host CNP", host.cnp.priority, None, None, True))
    return exp


def _switch_vs(exp: Mapping[int, Sequence[_Expect]], switch: SwitchQos) -> list[Mismatch]:
    out: list[Mismatch] = []
    for ports, port in switch.groups():
        where_ports = _ports_label(ports)
        for d in sorted(exp):
            # (kind, expected, found) -> owners: intent and host agreeing give one line naming both.
            found: dict[tuple[str, str, str], list[str]] = {}
            for e in exp[d]:
                for problem in _check_dscp(d, e, port):
                    found.setdefault(problem, []).append(e.owner)
            for (kind, expected, got), owners in found.items():
                out.append(
                    Mismatch(kind, f"switch {where_ports} DSCP {d} ({', '.join(owners)})", expected, got)
                )
    return out


def _unmatched_vs(intent: QosIntent, switch: SwitchQos) -> list[Mismatch]:
    """DSCPs no class names belong to the intent's `unmatched` class: one line per port group."""
    rest = intent.unmatched_class
    named = {d for c in intent.classes for d in c.dscp} | ({intent.cnp.dscp} if intent.cnp else set())
    out: list[Mismatch] = []
    for ports, port in switch.groups():
        wrong: dict[int, list[int]] = {}
        for d in range(64):
            if d in named:
                continue
            tc = port.tc_of(d)
            tc = port.default_tc if tc is None else tc
            if tc != rest.priority:
                wrong.setdefault(tc, []).append(d)
        if wrong:
            found = "; ".join(f"TC {tc} for DSCP {_ranges(ds)}" for tc, ds in sorted(wrong.items()))
            out.append(
                Mismatch(
                    "unmatched",
                    f"switch {_ports_label(ports)} DSCPs no intent class names ({port.dscp_map})",
                    f"TC {rest.priority} (intent unmatched class {rest.name!r})",
                    found,
                )
            )
    return out


def _ranges(values: Sequence[int]) -> str:
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def _check_dscp(d: int, e: _Expect, port: PortQos) -> Iterable[tuple[str, str, str]]:
    tc = port.tc_of(d)
    if tc is None:
        tc = port.default_tc
        q = port.queue_of(tc)
        yield (
            "unmapped",
            f"TC {e.priority}",
            f"DSCP {d} not in {port.dscp_map}: default TC {tc} -> queue {q}",
        )
    else:
        q = port.queue_of(tc)
        if tc != e.priority:
            yield ("priority", f"TC {e.priority}", f"TC {tc} -> queue {q} ({port.dscp_map})")
        elif e.queue is not None and q != e.queue:
            yield ("queue", f"TC {tc} -> queue {e.queue}", f"TC {tc} -> queue {q}")
    pfc = ",".join(str(p) for p in sorted(port.pfc_enable)) or "none"
    if e.lossless is True and tc not in port.pfc_enable:
        yield ("lossless", "lossless (PFC)", f"TC {tc} (queue {q}) is lossy (pfc_enable: {pfc})")
    elif e.lossless is False and tc in port.pfc_enable:
        yield ("lossless", "lossy (no PFC)", f"TC {tc} (queue {q}) is lossless (pfc_enable: {pfc})")
    if e.lossless is True:
        yield from _lossless_buffers(tc, q, port)
    sched = port.schedulers.get(q)
    is_strict = sched is not None and sched.kind == "strict"
    shown = str(sched) if sched is not None else "no scheduler configured"
    if e.strict is True and not is_strict:
        yield ("scheduler", f"queue {q} STRICT", f"queue {q} {shown}")
    elif e.strict is False and is_strict:
        yield ("scheduler", f"queue {q} weighted (DWRR/WRR)", f"queue {q} {shown}")


def _lossless_buffers(tc: int, q: int, port: PortQos) -> Iterable[tuple[str, str, str]]:
    """PFC alone is not lossless: the queue needs an egress lossless buffer (else it drops at egress
    while the sender is paused) and the priority its own ingress PG (the PG that reserves headroom)."""
    if port.lossless_queues is not None and q not in port.lossless_queues:
        have = ",".join(str(x) for x in sorted(port.lossless_queues)) or "none"
        yield (
            "buffer",
            f"queue {q} with an egress lossless buffer profile (BUFFER_QUEUE)",
            f"queue {q} has a lossy or no egress buffer (lossless queues: {have})",
        )
    if port.tc_to_pg is not None:
        pg = port.tc_to_pg.get(tc)
        if pg is None or pg == 0:
            shown = "no PG" if pg is None else "PG 0, the lossy PG"
            yield ("pg", f"TC {tc} on its own lossless PG (tc_to_pg_map)", f"TC {tc} -> {shown}")
    if port.pfc_to_pg is not None and tc not in port.pfc_to_pg:
        yield ("pg", f"PFC priority {tc} in pfc_to_pg_map", f"pfc_to_pg_map has no priority {tc}")


def _ports_label(ports: Sequence[str]) -> str:
    if len(ports) == 1:
        return ports[0]
    if len(ports) <= 4:
        return ",".join(ports)
    return f"{','.join(ports[:3])} and {len(ports) - 3} more ports"
