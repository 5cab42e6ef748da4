"""The vendor-neutral QoS intent: one YAML file, validated into a frozen `QosIntent`.

Pure logic (no kernel, no switch), so a bad intent is refused before any renderer runs. Every error is
an `IntentError` (a ValueError) whose message starts with the field's path (`classes[1].dscp: DSCP 26
is already used by classes[0] (urgent)`) and says what is allowed. The schema is documented in
geryon/fabric/schema.md; switch-configs/intents/geryon-2class.yaml is `default_intent()` spelled out.

The model: a packet's DSCP selects a switch priority (= the traffic class, TC), the priority selects an
egress queue; PFC pauses per priority (the lossless classes), the queue is scheduled strict or DWRR and
may carry ECN/WRED. DSCPs no class names go to the `unmatched` class (the least urgent by default), as
on the testbed's Linux switch.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from geryon.agent.config import ConfigError, default_classes
from geryon.agent.config import parse_size as _agent_size
from geryon.fields import Fields, kind, load_yaml

Scheduler = Literal["strict", "dwrr"]
EcnMode = Literal["mark", "drop"]
WatchdogAction = Literal["drop", "forward", "alert"]

OSES = ("sonic", "cumulus", "eos", "linux")
VERSION = 1
MAX_CLASSES = 8  # 8 switch priorities / queues
# SONiC YANG (sonic-pfcwd): detection_time 100-5000 ms, restoration_time 100-60000 ms, POLL_INTERVAL
# 100-1000 ms, both times >= the poll interval. Cumulus (100-5000 ms) and EOS (seconds) take these too.
DETECTION_MS = (100, 5000)
RESTORATION_MS = (100, 60000)
POLL_MS = (100, 1000)
CABLE_M = (1, 40000)  # SONiC CABLE_LENGTH values are "<n>m"

# Short enough that "<MAP>_<class>" fits SONiC's 32-character profile names.
_CLASS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")
_INTENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_MAP_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,11}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")
_CABLE = re.compile(r"^([0-9]+)m$")

# Port selection, per OS: a comma-separated list (or a YAML list) of items.
#   sonic:   Ethernet<n> | Ethernet<a>-<b>[:<step>]       (Ethernet0-124:4 = Ethernet0, 4, ..., 124)
#   cumulus: swp<n>[s<m>] | swp<a>-<b> | swp<n>s<a>-<b>     (swp1-32; swp1s0-3 are breakout ports)
#   eos:     Ethernet<n>[/<m>] | Ethernet<a>-<b> | Ethernet<n>/<a>-<b>   (Ethernet1/1-32)
#   linux:   interface names (1-15 characters), no ranges
_SONIC_PORT = re.compile(r"^Ethernet([0-9]{1,4})(?:-([0-9]{1,4})(?::([0-9]{1,3}))?)?$")
_CUMULUS_PORT = re.compile(r"^swp([0-9]{1,3})(?:s([0-9])(?:-([0-9]))?|-([0-9]{1,3}))?$")
_EOS_PORT = re.compile(r"^Ethernet(?:([0-9]{1,2})/)?([0-9]{1,3})(?:-([0-9]{1,3}))?$")
_PORT_SYNTAX = {
    "sonic": "Ethernet<n> or Ethernet<a>-<b>[:<step>], e.g. Ethernet0-124:4",
    "cumulus": "swp<n>, swp<a>-<b>, swp<n>s<m> or swp<n>s<a>-<b>, e.g. swp1-32",
    "eos": "Ethernet<n>, Ethernet<n>/<m>, Ethernet<a>-<b> or Ethernet<n>/<a>-<b>, e.g. Ethernet1/1-32",
    "linux": "interface names (1-15 characters, no '/' or spaces), e.g. s-ps0,s-wk0",
}
MAX_PORTS = 1024


class IntentError(ValueError):
    """The QoS intent is malformed; the message names the field and what is allowed."""


@dataclass(frozen=True)
class EcnSpec:
    """WRED/ECN on a class's queue: `mark` sets ECN CE on ECN-capable packets (what lossless RoCE
    queues use, DCQCN); `drop` drops early (lossy queues only)."""

    mode: EcnMode
    min_bytes: int
    max_bytes: int
    probability: int  # percent (1-100), the marking/drop probability at max_bytes


@dataclass(frozen=True)
class IntentClass:
    """One traffic class. Index 0 in `QosIntent.classes` is the most urgent."""

    name: str
    dscp: tuple[int, ...]
    priority: int  # switch priority = traffic class (TC), the PFC unit
    queue: int  # egress queue
    lossless: bool  # PFC on `priority`
    scheduler: Scheduler
    weight: int | None  # DWRR weight in percent of what strict queues leave; None for strict
    ecn: EcnSpec | None = None


@dataclass(frozen=True)
class CnpSpec:
    """DCQCN congestion notification packets: their own priority and a strict queue, never starved."""

    dscp: int
    priority: int
    queue: int


@dataclass(frozen=True)
class PfcWatchdog:
    enabled: bool
    action: WatchdogAction
    detection_ms: int
    restoration_ms: int
    poll_ms: int


@dataclass(frozen=True)
class BufferHints:
    """Hints, not buffer carving: each OS sizes its own pools and headroom from these where it can
    (see schema.md for which OS uses which)."""

    cable_length_m: int | None = None  # lossless headroom grows with the cable (SONiC, Cumulus)


# What each renderer must know about the switch that the QoS model itself does not say.
SONIC_BUFFER_MODELS = ("static", "dynamic")
EOS_FAMILIES = ("trident", "tomahawk", "jericho")
NVUE_MIN = (5, 0)  # NVUE's QoS commands (`nv set qos ...`) start with Cumulus Linux 5.0
_NVUE_VERSION = re.compile(r"^([0-9]{1,2})\.([0-9]{1,2})$")


@dataclass(frozen=True)
class Platform:
    """Switch platform facts the renderers need (schema.md, `platform`)."""

    # SONiC's buffer model (DEVICE_METADATA|localhost buffer_model): "static" (SONiC's default,
    # buffermgrd derives lossless PGs from pfc_enable) or "dynamic" (lossless PGs are BUFFER_PG rows
    # with profile NULL). None: not said, take the switch's own (render-switch --base) or static.
    sonic_buffer_model: str | None = None
    # Arista EOS chip family: Trident/Tomahawk name unicast queues `uc-tx-queue N`, Jericho `tx-queue N`.
    eos_family: str = "trident"
    # The oldest Cumulus Linux release the NVUE script must run on; features it lacks are refused.
    nvue_version: tuple[int, int] = (5, 6)


DEFAULT_WATCHDOG = PfcWatchdog(enabled=True, action="drop", detection_ms=200, restoration_ms=200, poll_ms=200)


@dataclass(frozen=True)
class QosIntent:
    name: str
    classes: tuple[IntentClass, ...]
    unmatched: str  # the class DSCPs no class names go to
    cnp: CnpSpec | None
    pfc_watchdog: PfcWatchdog = DEFAULT_WATCHDOG
    buffer: BufferHints = BufferHints()
    ports: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    map_name: str = "GERYON"  # SONiC/EOS map and profile names ("AZURE" is SONiC's own default)
    max_lossless: int = 2
    description: str = ""
    platform: Platform = Platform()

    def class_of_dscp(self, dscp: int) -> IntentClass | None:
        """The class that names this DSCP, or None (the CNP DSCP and unnamed DSCPs)."""
        for c in self.classes:
            if dscp in c.dscp:
                return c
        return None

    def class_named(self, name: str) -> IntentClass:
        return next(c for c in self.classes if c.name == name)

    @property
    def unmatched_class(self) -> IntentClass:
        return self.class_named(self.unmatched)

    @property
    def lossless_priorities(self) -> tuple[int, ...]:
        return tuple(sorted(c.priority for c in self.classes if c.lossless))

    def dscp_to_priority(self) -> dict[int, int]:
        """All 64 DSCPs -> switch priority: class DSCPs, the CNP DSCP, the rest to `unmatched`."""
        rest = self.unmatched_class.priority
        out = dict.fromkeys(range(64), rest)
        for c in self.classes:
            for d in c.dscp:
                out[d] = c.priority
        if self.cnp is not None:
            out[self.cnp.dscp] = self.cnp.priority
        return out

    def priority_to_queue(self) -> dict[int, int]:
        """Switch priority -> queue for the priorities in use (classes and CNP)."""
        out = {c.priority: c.queue for c in self.classes}
        if self.cnp is not None:
            out[self.cnp.priority] = self.cnp.queue
        return dict(sorted(out.items()))

    def strict_queues(self) -> tuple[int, ...]:
        """Strict queues, most urgent first: the CNP queue, then the strict classes in order."""
        qs = [c.queue for c in self.classes if c.scheduler == "strict"]
        if self.cnp is not None:
            qs.insert(0, self.cnp.queue)
        return tuple(qs)

    def ports_for(self, os_name: str) -> tuple[str, ...]:
        return self.ports.get(os_name, ())


def default_intent() -> QosIntent:
    """Geryon's two classes, agreeing with the host agent's defaults (geryon.agent.config): urgent DSCP
    46 -> priority 5 -> queue 5, strict; bulk DSCP 26 -> priority 3 -> queue 3, DWRR; both lossless;
    CNP DSCP 48 -> priority 6, strict queue 6."""
    host = default_classes()
    classes = tuple(
        IntentClass(
            name=c.name,
            dscp=c.dscps,
            priority=c.priority,
            queue=c.priority,
            lossless=c.lossless,
            scheduler="strict" if c.tsa == "strict" else "dwrr",
            weight=None if c.tsa == "strict" else 100,  # the only DWRR queue: all that strict leaves
        )
        for c in host
    )
    return QosIntent(
        name="geryon-2class",
        description="Geryon's default: urgent (strict) and bulk (DWRR) classes, both lossless, CNP strict.",
        classes=classes,
        unmatched=classes[-1].name,
        cnp=CnpSpec(dscp=48, priority=6, queue=6),
        # A 32-port switch of each kind; the Linux switch's ports depend on the testbed, so none.
        ports=MappingProxyType(
            {
                "sonic": parse_ports("sonic", "Ethernet0-124:4"),
                "cumulus": parse_ports("cumulus", "swp1-32"),
                "eos": parse_ports("eos", "Ethernet1-32"),
            }
        ),
    )


# ---------------------------------------------------------------------------------------------
# Parsing


def load_intent(path: str | Path) -> QosIntent:
    """Reads and validates an intent YAML file. Raises IntentError (never anything else) on bad input."""
    data = load_yaml(path, IntentError, "intent")
    return parse_intent(data, where=str(Path(path)))


def parse_intent(data: Any, where: str = "intent") -> QosIntent:
    """Validates a mapping (parsed YAML or JSON) into a QosIntent. `where` prefixes every error."""
    try:
        return _parse(data)
    except IntentError as e:
        raise IntentError(f"{where}: {e}") from None


_TOP_KEYS = (
    "version",
    "name",
    "description",
    "map_name",
    "classes",
    "unmatched",
    "cnp",
    "max_lossless",
    "strict_queues",
    "pfc_watchdog",
    "buffer",
    "ports",
    "platform",
)
_PLATFORM_KEYS = ("sonic_buffer_model", "eos_family", "nvue_version")
_CLASS_KEYS = ("name", "dscp", "priority", "queue", "lossless", "scheduler", "weight", "ecn")
_ECN_KEYS = ("mode", "min", "max", "probability")
_WD_KEYS = ("enabled", "action", "detection_time", "restoration_time", "poll_interval")


def _parse(data: Any) -> QosIntent:
    if data is None:
        raise IntentError("(top level): empty intent; at least name and classes are required")
    m = _mapping(data, "(top level)", _TOP_KEYS)
    if "version" in m and m["version"] != VERSION:
        raise IntentError(f"version: {_kind(m['version'])} is not supported; allowed: {VERSION}")
    for key in ("name", "classes"):
        if key not in m:
            raise IntentError(f"{key}: required")
    name = m["name"]
    if not isinstance(name, str) or not _INTENT_NAME.match(name):
        raise IntentError(
            f"name: {_kind(name)} is not an intent name (lowercase letters, digits, _ or -; <= 64)"
        )
    description = m.get("description", "")
    if not isinstance(description, str):
        raise IntentError(f"description: expected a string, got {_kind(description)}")
    map_name = m.get("map_name", "GERYON")
    if not isinstance(map_name, str) or not _MAP_NAME.match(map_name) or map_name == "AZURE":
        raise IntentError(
            f"map_name: {_kind(map_name)} is not allowed; uppercase letters, digits and _ (<= 32), "
            "not AZURE (SONiC's own default maps)"
        )
    max_lossless = _int(m.get("max_lossless", 2), "max_lossless", 0, 8)
    cnp = _cnp(m["cnp"]) if "cnp" in m else CnpSpec(dscp=48, priority=6, queue=6)
    strict = _strict_queues(m["strict_queues"], m["classes"], cnp) if "strict_queues" in m else None
    classes = _classes(m["classes"], strict)
    _check_classes(classes, cnp, max_lossless)
    unmatched = m.get("unmatched", classes[-1].name)
    names = [c.name for c in classes]
    if not isinstance(unmatched, str) or unmatched not in names:
        raise IntentError(f"unmatched: {_kind(unmatched)} is not a class; allowed: {', '.join(names)}")
    lossless = any(c.lossless for c in classes)
    watchdog = _watchdog(m.get("pfc_watchdog"), lossless)
    return QosIntent(
        name=name,
        description=description.strip(),
        classes=classes,
        unmatched=unmatched,
        cnp=cnp,
        pfc_watchdog=watchdog,
        buffer=_buffer(m.get("buffer")),
        ports=_ports(m.get("ports")),
        map_name=map_name,
        max_lossless=max_lossless,
        platform=_platform(m.get("platform")),
    )


_fields = Fields(IntentError)
_kind = kind
_mapping = _fields.mapping
_int = _fields.integer
_bool = _fields.boolean
_choice = _fields.choice
_list = _fields.items


def _size(value: Any, name: str) -> int:
    try:
        return _agent_size(value, name)
    except ConfigError as e:
        raise IntentError(str(e)) from None


def _ms(value: Any, name: str, bounds: tuple[int, int]) -> int:
    """Milliseconds: an integer, or a string like 200ms / 1.5s."""
    if isinstance(value, str):
        mt = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s)\s*", value)
        if not mt:
            raise IntentError(f"{name}: {value!r} is not a duration; write e.g. 200ms, 1.5s or milliseconds")
        ms = float(mt.group(1)) * (1000 if mt.group(2) == "s" else 1)
        if ms != int(ms):
            raise IntentError(f"{name}: {value!r} is not a whole number of milliseconds")
        value = int(ms)
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise IntentError(f"{name}: expected milliseconds {lo}-{hi} (or e.g. 200ms), got {_kind(value)}")
    if not lo <= value <= hi:
        raise IntentError(f"{name}: {value} ms is out of range; allowed {lo}-{hi} ms")
    return value


def _dscps(value: Any, name: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (_int(value, name, 0, 63),)
    items = _list(value, name)
    if not items:
        raise IntentError(f"{name}: must list at least one DSCP (0-63)")
    out: list[int] = []
    for j, d in enumerate(items):
        d = _int(d, f"{name}[{j}]", 0, 63)
        if d in out:
            raise IntentError(f"{name}[{j}]: DSCP {d} is listed twice")
        out.append(d)
    return tuple(out)


def _class_items(value: Any) -> list[Any]:
    items = _list(value, "classes")
    if not 1 <= len(items) <= MAX_CLASSES:
        raise IntentError(f"classes: {len(items)} classes; allowed 1-{MAX_CLASSES} (index 0 = most urgent)")
    return items


def _strict_queues(value: Any, classes_value: Any, cnp: CnpSpec | None) -> frozenset[int]:
    """The top-level `strict_queues` list: each entry must be the queue of a class (or of CNP)."""
    items = _list(value, "strict_queues")
    defined: dict[int, str] = {}
    for i, item in enumerate(_class_items(classes_value)):
        if isinstance(item, Mapping):
            q = item.get("queue", item.get("priority"))
            if isinstance(q, int) and not isinstance(q, bool):
                defined.setdefault(q, f"classes[{i}]")
    if cnp is not None:
        defined.setdefault(cnp.queue, "cnp")
    out: set[int] = set()
    for j, q in enumerate(items):
        q = _int(q, f"strict_queues[{j}]", 0, 7)
        if q not in defined:
            have = ", ".join(f"{k} ({v})" for k, v in sorted(defined.items()))
            raise IntentError(f"strict_queues[{j}]: queue {q} is no defined class; defined queues: {have}")
        if q in out:
            raise IntentError(f"strict_queues[{j}]: queue {q} is listed twice")
        out.add(q)
    return frozenset(out)


def _classes(value: Any, strict: frozenset[int] | None = None) -> tuple[IntentClass, ...]:
    items = _class_items(value)
    out = []
    for i, item in enumerate(items):
        n = f"classes[{i}]"
        m = _mapping(item, n, _CLASS_KEYS)
        for key in ("name", "dscp", "priority"):
            if key not in m:
                raise IntentError(f"{n}.{key}: required")
        name = m["name"]
        if not isinstance(name, str) or not _CLASS_NAME.match(name):
            raise IntentError(
                f"{n}.name: {_kind(name)} is not a class name (a lowercase letter, then lowercase letters, "
                "digits, _ or -; <= 32)"
            )
        priority = _int(m["priority"], f"{n}.priority", 0, 7)
        queue = _int(m.get("queue", priority), f"{n}.queue", 0, 7)
        if strict is not None:
            derived = "strict" if queue in strict else "dwrr"
            if "scheduler" in m and m["scheduler"] != derived:
                raise IntentError(
                    f"{n}.scheduler: {_kind(m['scheduler'])} contradicts strict_queues, which "
                    f"{'lists' if derived == 'strict' else 'does not list'} queue {queue}"
                )
        else:
            derived = "strict" if i == 0 else "dwrr"
        scheduler = _choice(m.get("scheduler", derived), f"{n}.scheduler", ("strict", "dwrr"))
        weight: int | None
        if scheduler == "dwrr":
            if "weight" not in m:
                raise IntentError(f"{n}.weight: required for scheduler: dwrr (percent 1-100)")
            weight = _int(m["weight"], f"{n}.weight", 1, 100)
        else:
            if "weight" in m:
                raise IntentError(f"{n}.weight: only for scheduler: dwrr (a strict queue has no weight)")
            weight = None
        lossless = _bool(m.get("lossless", False), f"{n}.lossless")
        ecn = _ecn(m["ecn"], f"{n}.ecn") if m.get("ecn") is not None else None
        if ecn is not None and lossless and ecn.mode == "drop":
            raise IntentError(
                f"{n}: both lossless (lossless: true, PFC) and lossy (ecn.mode: drop, WRED drops); "
                "a lossless class may only mark (ecn.mode: mark), or make it lossless: false"
            )
        out.append(
            IntentClass(
                name=name,
                dscp=_dscps(m["dscp"], f"{n}.dscp"),
                priority=priority,
                queue=queue,
                lossless=lossless,
                scheduler=scheduler,  # type: ignore[arg-type]
                weight=weight,
                ecn=ecn,
            )
        )
    return tuple(out)


def _ecn(value: Any, n: str) -> EcnSpec:
    m = _mapping(value, n, _ECN_KEYS)
    for key in ("min", "max"):
        if key not in m:
            raise IntentError(f"{n}.{key}: required (a size like 150kb)")
    lo, hi = _size(m["min"], f"{n}.min"), _size(m["max"], f"{n}.max")
    if lo > hi:
        raise IntentError(f"{n}.min: {lo} bytes is above {n}.max ({hi} bytes)")
    return EcnSpec(
        mode=_choice(m.get("mode", "mark"), f"{n}.mode", ("mark", "drop")),  # type: ignore[arg-type]
        min_bytes=lo,
        max_bytes=hi,
        probability=_int(m.get("probability", 5), f"{n}.probability", 1, 100),
    )


def _cnp(value: Any) -> CnpSpec | None:
    if value is None:
        return None
    m = _mapping(value, "cnp", ("dscp", "priority", "queue"))
    for key in ("dscp", "priority"):
        if key not in m:
            raise IntentError(f"cnp.{key}: required (or cnp: null for no CNP class)")
    priority = _int(m["priority"], "cnp.priority", 0, 7)
    return CnpSpec(
        dscp=_int(m["dscp"], "cnp.dscp", 0, 63),
        priority=priority,
        queue=_int(m.get("queue", priority), "cnp.queue", 0, 7),
    )


def _check_classes(classes: tuple[IntentClass, ...], cnp: CnpSpec | None, max_lossless: int) -> None:
    names: dict[str, int] = {}
    dscp_owner: dict[int, int] = {}
    prio_owner: dict[int, int] = {}
    queue_owner: dict[int, int] = {}

    def who(i: int) -> str:
        return f"classes[{i}] ({classes[i].name})"

    seen_dwrr = None
    for i, c in enumerate(classes):
        n = f"classes[{i}]"
        if c.name in names:
            raise IntentError(f"{n}.name: {c.name!r} is already the name of classes[{names[c.name]}]")
        names[c.name] = i
        for d in c.dscp:
            if d in dscp_owner:
                raise IntentError(f"{n}.dscp: {d} already used by {who(dscp_owner[d])}")
            dscp_owner[d] = i
        if c.priority in prio_owner:
            raise IntentError(
                f"{n}.priority: {c.priority} already used by {who(prio_owner[c.priority])} "
                "(each class needs its own priority: PFC pauses per priority)"
            )
        prio_owner[c.priority] = i
        if c.queue in queue_owner:
            raise IntentError(f"{n}.queue: {c.queue} already used by {who(queue_owner[c.queue])}")
        queue_owner[c.queue] = i
        # Most urgent first: a strict queue below a DWRR one would be more urgent than its position says.
        if c.scheduler == "dwrr" and seen_dwrr is None:
            seen_dwrr = i
        if c.scheduler == "strict" and seen_dwrr is not None:
            raise IntentError(
                f"{n}.scheduler: strict after the dwrr {who(seen_dwrr)}; list the strict classes first "
                "(classes are most urgent first)"
            )
    weights = [c.weight for c in classes if c.weight is not None]
    if weights and sum(weights) != 100:
        parts = ", ".join(f"classes[{i}].weight={c.weight}" for i, c in enumerate(classes) if c.weight)
        raise IntentError(f"weight: the dwrr weights must sum to 100 percent, got {sum(weights)} ({parts})")
    if cnp is not None:
        if cnp.priority in prio_owner:
            raise IntentError(
                f"cnp.priority: {cnp.priority} is the data priority of {who(prio_owner[cnp.priority])}; "
                "CNPs need a priority of their own"
            )
        if cnp.dscp in dscp_owner:
            raise IntentError(f"cnp.dscp: {cnp.dscp} already used by {who(dscp_owner[cnp.dscp])}")
        if cnp.queue in queue_owner:
            raise IntentError(
                f"cnp.queue: {cnp.queue} already used by {who(queue_owner[cnp.queue])}; "
                "CNPs need a strict queue of their own"
            )
    lossless = [c.name for c in classes if c.lossless]
    if len(lossless) > max_lossless:
        raise IntentError(
            f"classes: {len(lossless)} lossless classes ({', '.join(lossless)}) but max_lossless is "
            f"{max_lossless} (lossless priorities the switches have headroom for); make some lossless: false"
        )
    # Switches serve strict queues highest queue number first, and EOS/Broadcom-style schedulers
    # keep every round-robin queue below the strict ones: the numbers must follow the urgency.
    order = ([("cnp", cnp.queue)] if cnp is not None else []) + [
        (f"classes[{i}]", c.queue) for i, c in enumerate(classes) if c.scheduler == "strict"
    ]
    for (hi_name, hi_q), (lo_name, lo_q) in itertools.pairwise(order):
        if lo_q > hi_q:
            raise IntentError(
                f"{lo_name}.queue: strict queue {lo_q} is above queue {hi_q} of the more urgent {hi_name}; "
                "switches serve strict queues highest number first (CNP, then the classes in order)"
            )
    if order:
        lowest_strict = min(q for _, q in order)
        for i, c in enumerate(classes):
            if c.scheduler == "dwrr" and c.queue > lowest_strict:
                raise IntentError(
                    f"classes[{i}].queue: dwrr queue {c.queue} is above strict queue {lowest_strict}; "
                    "switches keep round-robin queues below every strict queue"
                )


def _watchdog(value: Any, lossless: bool) -> PfcWatchdog:
    d = DEFAULT_WATCHDOG
    if value is None:
        return PfcWatchdog(lossless, d.action, d.detection_ms, d.restoration_ms, d.poll_ms)
    m = _mapping(value, "pfc_watchdog", _WD_KEYS)
    enabled = _bool(m.get("enabled", lossless), "pfc_watchdog.enabled")
    if enabled and not lossless:
        raise IntentError("pfc_watchdog.enabled: true, but no class is lossless (nothing for it to watch)")
    wd = PfcWatchdog(
        enabled=enabled,
        action=_choice(m.get("action", d.action), "pfc_watchdog.action", ("drop", "forward", "alert")),  # type: ignore[arg-type]
        detection_ms=_ms(
            m.get("detection_time", d.detection_ms), "pfc_watchdog.detection_time", DETECTION_MS
        ),
        restoration_ms=_ms(
            m.get("restoration_time", d.restoration_ms), "pfc_watchdog.restoration_time", RESTORATION_MS
        ),
        poll_ms=_ms(m.get("poll_interval", d.poll_ms), "pfc_watchdog.poll_interval", POLL_MS),
    )
    for key, value_ms in (("detection_time", wd.detection_ms), ("restoration_time", wd.restoration_ms)):
        if value_ms < wd.poll_ms:
            raise IntentError(
                f"pfc_watchdog.{key}: {value_ms} ms is below poll_interval ({wd.poll_ms} ms); "
                "the watchdog cannot act faster than it polls"
            )
    return wd


def _buffer(value: Any) -> BufferHints:
    if value is None:
        return BufferHints()
    m = _mapping(value, "buffer", ("cable_length",))
    cable = None
    if "cable_length" in m:
        raw = m["cable_length"]
        mt = _CABLE.match(raw) if isinstance(raw, str) else None
        if not mt or not CABLE_M[0] <= int(mt.group(1)) <= CABLE_M[1]:
            raise IntentError(
                f"buffer.cable_length: {_kind(raw)} is not a cable length; write meters like 5m "
                f"({CABLE_M[0]}-{CABLE_M[1]}m)"
            )
        cable = int(mt.group(1))
    return BufferHints(cable_length_m=cable)


def _platform(value: Any) -> Platform:
    if value is None:
        return Platform()
    m = _mapping(value, "platform", _PLATFORM_KEYS)
    model = m.get("sonic_buffer_model")
    if model is not None:
        model = _choice(model, "platform.sonic_buffer_model", SONIC_BUFFER_MODELS)
    family = _choice(m.get("eos_family", "trident"), "platform.eos_family", EOS_FAMILIES)
    version = Platform().nvue_version
    if "nvue_version" in m:
        raw = m["nvue_version"]
        # YAML reads 5.6 as a float; 5.10 would read as 5.1, so versions must be quoted past .9
        text = str(raw) if isinstance(raw, (str, float)) and not isinstance(raw, bool) else None
        mt = _NVUE_VERSION.match(text) if text is not None else None
        if mt is None or (int(mt.group(1)), int(mt.group(2))) < NVUE_MIN:
            raise IntentError(
                f'platform.nvue_version: {_kind(raw)} is not a Cumulus Linux release like "5.6" '
                f"(major.minor, at least {NVUE_MIN[0]}.{NVUE_MIN[1]}, where NVUE's QoS commands start)"
            )
        version = (int(mt.group(1)), int(mt.group(2)))
    return Platform(sonic_buffer_model=model, eos_family=family, nvue_version=version)


def _ports(value: Any) -> Mapping[str, tuple[str, ...]]:
    if value is None:
        return MappingProxyType({})
    m = _mapping(value, "ports", OSES)
    return MappingProxyType({os_name: parse_ports(os_name, m[os_name], f"ports.{os_name}") for os_name in m})


def parse_ports(os_name: str, value: Any, name: str = "ports") -> tuple[str, ...]:
    """The ports a selection names, expanded in order ("Ethernet0-8:4" -> Ethernet0, Ethernet4,
    Ethernet8). `value` is a comma-separated string or a list of strings. Raises IntentError."""
    if os_name not in OSES:
        raise IntentError(f"os: {os_name!r} is not a switch OS; allowed: {', '.join(OSES)}")
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    else:
        items = [s.strip() if isinstance(s, str) else s for s in _list(value, name)]
    out: list[str] = []
    for j, item in enumerate(items):
        where = f"{name}[{j}]" if not isinstance(value, str) else name
        if not isinstance(item, str) or not item:
            raise IntentError(f"{where}: {_kind(item)} is not a port; write {_PORT_SYNTAX[os_name]}")
        for port in _expand(os_name, item, where):
            if port in out:
                raise IntentError(f"{where}: port {port} is selected twice")
            out.append(port)
            if len(out) > MAX_PORTS:
                raise IntentError(f"{name}: more than {MAX_PORTS} ports")
    if not out:
        raise IntentError(f"{name}: selects no port; write {_PORT_SYNTAX[os_name]}")
    return tuple(out)


def _expand(os_name: str, item: str, where: str) -> list[str]:
    bad = IntentError(
        f"{where}: {item!r} is not a port selection for {os_name}; write {_PORT_SYNTAX[os_name]}"
    )

    def span(a: str, b: str | None, step: int = 1) -> range:
        lo, hi = int(a), int(b) if b is not None else int(a)
        if hi < lo:
            raise IntentError(f"{where}: {item!r}: the range ends ({hi}) before it starts ({lo})")
        if step < 1:
            raise IntentError(f"{where}: {item!r}: the step must be at least 1")
        return range(lo, hi + 1, step)

    if os_name == "linux":
        if not _IFNAME.match(item) or item in (".", ".."):
            raise bad
        return [item]
    if os_name == "sonic":
        mt = _SONIC_PORT.match(item)
        if not mt:
            raise bad
        if mt.group(3) is not None and mt.group(2) is None:
            raise bad
        return [f"Ethernet{n}" for n in span(mt.group(1), mt.group(2), int(mt.group(3) or 1))]
    if os_name == "cumulus":
        mt = _CUMULUS_PORT.match(item)
        if not mt:
            raise bad
        if mt.group(2) is not None:
            return [f"swp{mt.group(1)}s{n}" for n in span(mt.group(2), mt.group(3))]
        return [f"swp{n}" for n in span(mt.group(1), mt.group(4))]
    mt = _EOS_PORT.match(item)  # eos
    if not mt:
        raise bad
    slot = f"{mt.group(1)}/" if mt.group(1) is not None else ""
    return [f"Ethernet{slot}{n}" for n in span(mt.group(2), mt.group(3))]


def compress_ports(ports: Sequence[str]) -> list[str]:
    """Runs of consecutive port numbers with the same prefix as ranges, in the first port's order:
    [swp1, swp2, swp3, swp7] -> [swp1-3, swp7]. (Cumulus and EOS take such ranges.)"""
    out: list[tuple[str, int, int]] = []
    singles: list[str] = []
    for p in ports:
        mt = re.fullmatch(r"(.*?)([0-9]+)", p)
        if mt is None or (mt.group(2).startswith("0") and mt.group(2) != "0"):
            singles.append(p)
            continue
        prefix, n = mt.group(1), int(mt.group(2))
        if out and out[-1][0] == prefix and out[-1][2] + 1 == n:
            out[-1] = (prefix, out[-1][1], n)
        else:
            out.append((prefix, n, n))
    ranges = [f"{p}{a}" if a == b else f"{p}{a}-{b}" for p, a, b in out]
    return ranges + singles
