"""Cumulus Linux (NVUE): the intent as `nv set` commands, one per line (a shell script).

Profiles named after the intent's map_name in lower case (e.g. `geryon`) carry the per-port parts and
are bound to the selected ports: DSCP trust and DSCP -> switch priority (`qos mapping`), the scheduler
(`qos egress-scheduler`: strict, or dwrr with bw-percent = weight), PFC (`qos pfc`, tx and rx, with
the cable length hint), ECN/RED (`qos congestion-control`). Switch priority -> queue
(`qos egress-queue-mapping`) exists only as `default-global` in NVUE, so it is set there: it applies to
every port. PFC watchdog: `nv set qos pfc-watchdog polling-interval` and `robustness` (polls before it
acts = detection_time / poll_interval, rounded up) globally, `qos pfc-watchdog state enable` per port.
NVUE has no watchdog action or restoration time: it always drops while the storm lasts and restores
after a poll interval without pause frames, so only `action: drop` renders; restoration_time is
ignored (noted in a comment).

Lossless buffers: by default Cumulus gives the whole buffer to the lossy pool, so PFC on a priority
without a lossless pool has no headroom to pause with. The script first binds the lossless priorities to
`qos traffic-pool default-lossless` (switch-priority, memory-percent LOSSLESS_POOL_PERCENT) and shrinks
`default-lossy` to the rest.

Version gate: the script starts by reading /etc/os-release and exits 2, before any `nv set`, on a
release older than the features need (per-interface QoS profiles: Cumulus Linux 5.4; PFC watchdog: 5.6,
NVUE reference "Version History"); if a command still fails part-way, the EXIT trap detaches the
pending revision (`nv config detach`), so nothing is left half-staged. The intent's
`platform.nvue_version` (the oldest release the fleet runs) is refused at render time when it is below
what the intent needs. The script stages only: the rollout applies with `nv config apply --confirm
300s -y` (NVUE rolls back by itself unless confirmed), checks, confirms with `nv config apply
--confirm-yes` and `nv config save`s (deploy/ansible, role switch_qos; the confirm flags as NVUE's
reference and NAPALM's Cumulus driver use them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from geryon.fabric.intent import IntentError, QosIntent, compress_ports, parse_ports

PROFILES_VERSION = (5, 4)  # `nv set interface <if> qos <feature> profile <name>`
WATCHDOG_VERSION = (5, 6)  # `nv set qos pfc-watchdog ...`
# Share of the shared buffer for the lossless pool: an even split, a starting point (not measured;
# a fabric with mostly lossless traffic may raise it). The lossy pool gets the rest.
LOSSLESS_POOL_PERCENT = 50


def needed_version(intent: QosIntent) -> tuple[int, int]:
    """The oldest Cumulus Linux release that takes everything the script sets."""
    return WATCHDOG_VERSION if intent.pfc_watchdog.enabled else PROFILES_VERSION


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _gate(need: tuple[int, int], why: str) -> list[str]:
    """POSIX sh: VERSION_ID from os-release (GERYON_OS_RELEASE overrides the path, for tests), exit 2
    before anything is staged when older than `need`."""
    major, minor = need
    return [
        f"# needs Cumulus Linux {_v(need)} or later ({why}); older: exit 2, nothing staged",
        'release="${GERYON_OS_RELEASE:-/etc/os-release}"',
        'version=$(sed -n \'s/^VERSION_ID="\\{0,1\\}\\([0-9]*\\.[0-9]*\\).*/\\1/p\' "$release" 2>/dev/null)',
        "major=${version%%.*}; minor=${version#*.}",
        f'if [ -z "$version" ] || [ "$major" -lt {major} ] || '
        f'{{ [ "$major" -eq {major} ] && [ "$minor" -lt {minor} ]; }}; then',
        f'    echo "geryon: needs Cumulus Linux {_v(need)} or later ({why}); this switch runs '
        '${version:-an unknown release}; nothing staged" >&2',
        "    exit 2",
        "fi",
        "# a command failing part-way: drop the pending revision instead of leaving it half-staged",
        "trap 'rc=$?; [ $rc -eq 0 ] || nv config detach; exit $rc' EXIT",
    ]


def _ids(values: Iterable[int]) -> str:
    """NVUE id lists: 0-25,27-45,47."""
    nums = sorted(set(values))
    runs: list[list[int]] = []
    for n in nums:
        if runs and runs[-1][1] + 1 == n:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def port_list(ports: Sequence[str]) -> str:
    """NVUE interface ranges as its documentation writes them: swp1-swp4,swp6."""
    out = []
    for item in compress_ports(ports):
        head, sep, tail = item.rpartition("-")
        if sep and tail.isdigit() and head:
            prefix = head.rstrip("0123456789")
            out.append(f"{head}-{prefix}{tail}")
        else:
            out.append(item)
    return ",".join(out)


def render(intent: QosIntent, ports: Sequence[str] | str | None = None) -> str:
    names = _ports(intent, ports)
    profile = intent.map_name.lower()
    wd = intent.pfc_watchdog
    if wd.enabled and wd.action != "drop":
        raise IntentError(
            f"pfc_watchdog.action: {wd.action!r} has no Cumulus equivalent (NVUE's watchdog always drops "
            "while a storm lasts); use drop for Cumulus"
        )
    need = needed_version(intent)
    if intent.platform.nvue_version < need:
        what = "the PFC watchdog" if need == WATCHDOG_VERSION else "per-interface QoS profiles"
        hint = " (or pfc_watchdog.enabled: false)" if need == WATCHDOG_VERSION else ""
        raise IntentError(
            f"platform.nvue_version: {_v(intent.platform.nvue_version)} is too old: {what} needs Cumulus "
            f"Linux {_v(need)}; raise it{hint}"
        )
    why = "PFC watchdog" if need == WATCHDOG_VERSION else "per-interface QoS profiles"
    lines = [
        f"#!/bin/sh\n# Geryon QoS intent {intent.name!r} for Cumulus Linux (NVUE); "
        "geryon render-switch --os cumulus",
        "set -e",
        "",
        *_gate(need, why),
        "",
        "# DSCP -> switch priority (trust DSCP)",
        f"nv set qos mapping {profile} trust l3",
    ]
    by_prio: dict[int, list[int]] = {}
    for dscp, prio in intent.dscp_to_priority().items():
        by_prio.setdefault(prio, []).append(dscp)
    for prio in sorted(by_prio):
        lines.append(f"nv set qos mapping {profile} dscp {_ids(by_prio[prio])} switch-priority {prio}")
    lines += ["", "# switch priority -> egress queue (NVUE supports only the default-global profile here)"]
    for prio, queue in intent.priority_to_queue().items():
        lines.append(
            f"nv set qos egress-queue-mapping default-global switch-priority {prio} traffic-class {queue}"
        )
    lines += ["", "# egress scheduling: strict queues first, DWRR shares of what they leave"]
    if intent.cnp is not None:
        lines.append(f"nv set qos egress-scheduler {profile} traffic-class {intent.cnp.queue} mode strict")
    for c in intent.classes:
        base = f"nv set qos egress-scheduler {profile} traffic-class {c.queue}"
        if c.scheduler == "strict":
            lines.append(f"{base} mode strict")
        else:
            lines.append(f"{base} mode dwrr")
            lines.append(f"{base} bw-percent {c.weight}")
    lossless = intent.lossless_priorities
    if lossless:
        prios = ",".join(str(p) for p in lossless)
        lines += [
            "",
            "# a lossless buffer pool for the lossless priorities first (by default all of it is lossy)",
            f"nv set qos traffic-pool default-lossy memory-percent {100 - LOSSLESS_POOL_PERCENT}",
            f"nv set qos traffic-pool default-lossless memory-percent {LOSSLESS_POOL_PERCENT}",
            f"nv set qos traffic-pool default-lossless switch-priority {prios}",
        ]
        lines += ["", "# PFC on the lossless switch priorities"]
        lines.append(f"nv set qos pfc {profile} switch-priority {','.join(str(p) for p in lossless)}")
        lines.append(f"nv set qos pfc {profile} tx enable")
        lines.append(f"nv set qos pfc {profile} rx enable")
        if intent.buffer.cable_length_m is not None:
            lines.append(f"nv set qos pfc {profile} cable-length {intent.buffer.cable_length_m}")
    ecn_classes = [c for c in intent.classes if c.ecn is not None]
    if ecn_classes:
        lines += ["", "# ECN marking (mark) or random early drop (drop) per queue"]
        for c in ecn_classes:
            assert c.ecn is not None
            base = f"nv set qos congestion-control {profile} traffic-class {c.queue}"
            mark = c.ecn.mode == "mark"
            lines.append(f"{base} ecn {'enable' if mark else 'disable'}")
            lines.append(f"{base} red {'disable' if mark else 'enable'}")
            lines.append(f"{base} min-threshold {c.ecn.min_bytes}")
            lines.append(f"{base} max-threshold {c.ecn.max_bytes}")
            lines.append(f"{base} probability {c.ecn.probability}")
    if wd.enabled:
        robustness = max(1, math.ceil(wd.detection_ms / wd.poll_ms))
        lines += [
            "",
            f"# PFC watchdog: acts after {robustness} polls of {wd.poll_ms} ms ({wd.detection_ms} ms);",
            f"# NVUE restores after a quiet poll (restoration_time {wd.restoration_ms} ms is not settable)",
            f"nv set qos pfc-watchdog polling-interval {wd.poll_ms}",
            f"nv set qos pfc-watchdog robustness {robustness}",
        ]
    sel = port_list(names)
    lines += ["", f"# the selected ports ({len(names)})"]
    lines.append(f"nv set interface {sel} qos mapping profile {profile}")
    lines.append(f"nv set interface {sel} qos egress-scheduler profile {profile}")
    if lossless:
        lines.append(f"nv set interface {sel} qos pfc profile {profile}")
    if ecn_classes:
        lines.append(f"nv set interface {sel} qos congestion-control profile {profile}")
    if wd.enabled:
        lines.append(f"nv set interface {sel} qos pfc-watchdog state enable")
    lines += [
        "",
        "# staged only; the rollout: nv config diff; nv config apply --confirm 300s -y; check;",
        "# nv config apply --confirm-yes; nv config save (unconfirmed, NVUE rolls back after 300 s)",
    ]
    return "\n".join(lines) + "\n"


def _ports(intent: QosIntent, ports: Sequence[str] | str | None) -> tuple[str, ...]:
    if ports is None:
        names = intent.ports_for("cumulus")
        if not names:
            raise IntentError("ports: no cumulus ports; give ports.cumulus in the intent or --ports")
        return names
    return parse_ports("cumulus", ports if isinstance(ports, str) else list(ports), "ports")
