"""Arista EOS: the intent as CLI configuration text (what `eos_config` or a config session takes).

Global maps: `qos map dscp <list> to traffic-class <tc>` for all 64 DSCPs (TC = switch priority) and
`qos map traffic-class <tc> to tx-queue <q>`. A `qos profile <map_name>` carries the per-port parts:
`qos trust dscp`, `priority-flow-control on` with `priority-flow-control priority <p> no-drop` per
lossless priority, and per queue (`uc-tx-queue N` or `tx-queue N`, below): `priority strict`, or
`no priority` + `bandwidth percent <weight>` (DWRR), plus `random-detect ecn ...` (mark) or
`random-detect drop ...` (drop) with thresholds in bytes. The PFC watchdog is global
(`priority-flow-control pause watchdog default timeout / recovery-time / polling-interval` in seconds,
`... action drop`); each selected port gets `service-profile <map_name>` (one `interface` block per
port: no range syntax to get wrong).

Queue keyword by chip family (intent `platform.eos_family`; Arista's QoS chapter, "QoS Configuration:
Trident and Tomahawk Platform Switches" vs "Jericho Platform Switches"): Trident/Tomahawk (7050X, 7060X,
7260X, the usual RoCE leaves; the default) configure unicast queues as `uc-tx-queue N` and refuse
`tx-queue N`; Jericho (7280R, 7500R) takes `tx-queue N`. The watchdog's polling interval is at most
half the smaller of timeout and recovery-time (so a stuck queue is seen at least twice before it acts):
the intent's poll_interval is lowered to that where it is larger, to a multiple of 10 ms. EOS keeps
traffic class and tx-queue 7 for control traffic, so the intent may not use priority or queue 7 here.
EOS's watchdog actions are errdisable (its default), drop and no-drop; only `action: drop` renders.
"""

from __future__ import annotations

from collections.abc import Sequence

from geryon.fabric.intent import IntentClass, IntentError, QosIntent, parse_ports


def _seconds(ms: int) -> str:
    text = f"{ms / 1000:.3f}".rstrip("0").rstrip(".")
    return text


def queue_keyword(intent: QosIntent) -> str:
    return "tx-queue" if intent.platform.eos_family == "jericho" else "uc-tx-queue"


def polling_ms(intent: QosIntent) -> int:
    """The intent's poll interval, at most half of min(timeout, recovery-time), in whole 10 ms."""
    wd = intent.pfc_watchdog
    half = min(wd.detection_ms, wd.restoration_ms) // 2
    return max(10, min(wd.poll_ms, half) // 10 * 10)


def render(intent: QosIntent, ports: Sequence[str] | str | None = None) -> str:
    names = _ports(intent, ports)
    _check(intent)
    wd = intent.pfc_watchdog
    queue_kw = queue_keyword(intent)
    out = [
        f"! Geryon QoS intent {intent.name!r} for Arista EOS ({intent.platform.eos_family} family); "
        "geryon render-switch --os eos",
        "!",
    ]
    by_tc: dict[int, list[int]] = {}
    for dscp, prio in intent.dscp_to_priority().items():
        by_tc.setdefault(prio, []).append(dscp)
    for tc in sorted(by_tc):
        out.append(f"qos map dscp {' '.join(str(d) for d in sorted(by_tc[tc]))} to traffic-class {tc}")
    for tc, queue in intent.priority_to_queue().items():
        out.append(f"qos map traffic-class {tc} to tx-queue {queue}")
    if wd.enabled:
        out += [
            "!",
            f"priority-flow-control pause watchdog default timeout {_seconds(wd.detection_ms)}",
            f"priority-flow-control pause watchdog default recovery-time {_seconds(wd.restoration_ms)}",
            f"priority-flow-control pause watchdog default polling-interval {_seconds(polling_ms(intent))}",
            "priority-flow-control pause watchdog action drop",
        ]
    out += ["!", f"qos profile {intent.map_name}", "   qos trust dscp"]
    lossless = intent.lossless_priorities
    if lossless:
        out.append("   priority-flow-control on")
        out += [f"   priority-flow-control priority {p} no-drop" for p in lossless]
        if wd.enabled:
            out.append("   priority-flow-control pause watchdog")
    queues: list[tuple[int, IntentClass | None]] = [(c.queue, c) for c in intent.classes]
    if intent.cnp is not None:
        queues.append((intent.cnp.queue, None))
    for queue, c in sorted(queues, key=lambda x: x[0]):
        out += ["   !", f"   {queue_kw} {queue}"]
        if c is None:
            out.append("      !! CNP (DCQCN congestion notifications)")
            out.append("      priority strict")
            continue
        out.append(f"      !! class {c.name}")
        if c.scheduler == "strict":
            out.append("      priority strict")
        else:
            out.append("      no priority")
            out.append(f"      bandwidth percent {c.weight}")
        if c.ecn is not None:
            e = c.ecn
            thresholds = f"minimum-threshold {e.min_bytes} bytes maximum-threshold {e.max_bytes} bytes"
            if e.mode == "mark":
                out.append(f"      random-detect ecn {thresholds} max-mark-probability {e.probability}")
            else:
                out.append(f"      random-detect drop {thresholds} drop-probability {e.probability}")
    for port in names:
        out += ["!", f"interface {port}", f"   service-profile {intent.map_name}"]
    if intent.buffer.cable_length_m is not None:
        out += ["!", f"! buffer.cable_length {intent.buffer.cable_length_m}m: EOS sizes PFC headroom itself"]
    out.append("!")
    return "\n".join(out) + "\n"


def _check(intent: QosIntent) -> None:
    for i, c in enumerate(intent.classes):
        for field in ("priority", "queue"):
            if getattr(c, field) == 7:
                raise IntentError(
                    f"classes[{i}].{field}: 7 is reserved for control traffic on EOS (traffic class and "
                    "tx-queue 7); use 0-6"
                )
    if intent.cnp is not None and 7 in (intent.cnp.priority, intent.cnp.queue):
        raise IntentError("cnp: priority/queue 7 is reserved for control traffic on EOS; use 0-6")
    wd = intent.pfc_watchdog
    for field, ms in (("detection_time", wd.detection_ms), ("restoration_time", wd.restoration_ms)):
        if wd.enabled and ms % 10:
            raise IntentError(
                f"pfc_watchdog.{field}: {ms} ms; EOS takes seconds with 2 decimals, use a multiple of 10 ms"
            )
    if wd.enabled and wd.action != "drop":
        raise IntentError(
            f"pfc_watchdog.action: {wd.action!r} is not rendered for EOS (its watchdog errdisables, drops "
            "or stops dropping, none of which is SONiC's forward/alert); use drop for EOS"
        )


def _ports(intent: QosIntent, ports: Sequence[str] | str | None) -> tuple[str, ...]:
    if ports is None:
        names = intent.ports_for("eos")
        if not names:
            raise IntentError("ports: no eos ports; give ports.eos in the intent or --ports")
        return names
    return parse_ports("eos", ports if isinstance(ports, str) else list(ports), "ports")
