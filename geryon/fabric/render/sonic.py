"""SONiC: the intent as config_db tables that `config load` and `config apply-patch` both bring to
the same final state, with an apply order SONiC accepts.

The rendered document (JSON, sorted keys) has:
  "config_db"    the rows to write, for `config load` (`jq .config_db sonic.json > qos.json`);
  "patch"        RFC 6902 operations for `config apply-patch` (`jq .patch sonic.json > qos.patch.json`),
                 in apply order;
  "apply_order"  the table order of "patch": maps and profiles before the objects referring to them,
                 buffers before PFC is enabled on a priority (PORT_QOS_MAP), PFC_WD last (the watchdog
                 needs PFC on the port first);
  "base"         what the patch assumes the switch holds (see below);
  "pending"      with a base only: the rows the switch does not hold yet (empty: nothing to apply);
  "intent"       the intent's name.

Why load and patch can differ, and what the rendering does about it: `config load` merges fields into
each key (a field the file does not name keeps its old value), `config apply-patch` "add" replaces a
whole key, and an "add" below a table the switch does not have is rejected (the whole patch fails).
So every row names every field SONiC's default templates write for that key (QUEUE rows always name a
WRED profile, an all-off `<map>_NO_WRED` where the class has no ECN; PORT_QOS_MAP always has
pfcwd_sw_enable and pfc_to_pg_map); with a base (`render-switch --base`, the switch's running
config_db) the base's other fields of a key are carried into the row too; a table the base lacks is
added whole (`/PFC_WD`), CABLE_LENGTH is patched per port (`/CABLE_LENGTH/AZURE/Ethernet0`), never the
whole AZURE key (that would drop every other port's cable length, and with it their lossless PGs).

Buffers: SONiC's templates give the egress lossless profile to queues 3-4 only and key BUFFER_QUEUE by
ranges (`Ethernet0|3-4`, `|0-2`, `|5-6` or `|5-7`). Geryon writes `egress_lossless_profile` on the
switch's own ranges that hold a lossless queue (a new single-queue key only where no range holds it),
so no key has to be deleted (`config load` cannot delete). Ingress: under the static buffer model
buffermgrd derives the lossless PGs from pfc_enable and CABLE_LENGTH, nothing is written; under the
dynamic model each lossless PG gets a BUFFER_PG row with profile NULL (SONiC computes its headroom).
PFC priority -> PG (PFC_PRIORITY_TO_PRIORITY_GROUP_MAP, the port's pfc_to_pg_map) is written where the
switch has that table (Mellanox/Barefoot: their qos_config.j2 writes AZURE = {3:3, 4:4}), only with a
base: other SAIs do not take the map.

Without a base the patch assumes SONiC's default config on a Mellanox switch as sonic-config-engine's
sample outputs have it (mellanox4600c qos + t1 buffers): the QoS and buffer tables present, no
PFC_PRIORITY_TO_PRIORITY_GROUP_MAP and no PFC_WD table, BUFFER_QUEUE ranges 0-2/3-4/5-7, dynamic
BUFFER_PG ranges 0/3-4. Any other switch: render with --base. Known limits (config load cannot
delete keys): a lossless range such as `3-4` keeps PG/queue 4 lossless when only 3 is, and rows of
classes an earlier intent had stay until removed by hand or by the patch's whole-table adds.

Mapping: TC = switch priority; TC -> queue as the intent says; lossless priorities -> PG of the same
number, every other TC -> PG 0 (so a lossless class cannot use priority 0); PFC priority -> the
lossless class's queue. Names: maps are `<map_name>` (e.g. GERYON, never SONiC's AZURE), schedulers
and WRED profiles `<map_name>_<class>` and `<map_name>_cnp`. Values follow the sonic-yang-models
enumerations and ranges, which check_config_db() verifies before anything is printed.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from geryon.fabric.intent import IntentClass, IntentError, QosIntent, parse_ports

APPLY_ORDER = (
    "DSCP_TO_TC_MAP",
    "TC_TO_QUEUE_MAP",
    "TC_TO_PRIORITY_GROUP_MAP",
    "MAP_PFC_PRIORITY_TO_QUEUE",
    "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP",
    "SCHEDULER",
    "WRED_PROFILE",
    "CABLE_LENGTH",
    "BUFFER_PG",
    "BUFFER_QUEUE",
    "QUEUE",
    "PORT_QOS_MAP",
    "PFC_WD",
)
# CABLE_LENGTH is per port; buffermgrd reads the table SONiC's own templates write, keyed AZURE.
CABLE_LENGTH_KEY = "AZURE"
# The egress lossless buffer profile every SONiC buffer template defines (buffers_config.j2 and the
# platform templates; all the sample outputs of sonic-config-engine have it).
EGRESS_LOSSLESS = "egress_lossless_profile"
# What the patch assumes without a base: SONiC's default config on a Mellanox switch.
DEFAULT_BASE_TABLES = frozenset(
    {
        "DSCP_TO_TC_MAP",
        "TC_TO_QUEUE_MAP",
        "TC_TO_PRIORITY_GROUP_MAP",
        "MAP_PFC_PRIORITY_TO_QUEUE",
        "SCHEDULER",
        "WRED_PROFILE",
        "CABLE_LENGTH",
        "BUFFER_PG",
        "BUFFER_QUEUE",
        "QUEUE",
        "PORT_QOS_MAP",
    }
)
DEFAULT_QUEUE_RANGES = ("0-2", "3-4", "5-7")
DEFAULT_PG_RANGES = ("0", "3-4")

# sonic-yang-models enumerations and ranges (sonic-scheduler, sonic-wred-profile, sonic-pfcwd,
# sonic-port-qos-map, sonic-dscp-tc-map, sonic-cable-length).
SCHEDULER_TYPES = ("STRICT", "DWRR", "WRR")
METER_TYPES = ("packets", "bytes")
WD_ACTIONS = ("drop", "forward", "alert")
ECN_MODES = (
    "ecn_none",
    "ecn_green",
    "ecn_yellow",
    "ecn_red",
    "ecn_green_yellow",
    "ecn_green_red",
    "ecn_yellow_red",
    "ecn_all",
)
COLORS = ("green", "yellow", "red")
_WRED_FIELDS = {
    "ecn",
    *(f"wred_{c}_enable" for c in COLORS),
    *(f"{c}_{k}" for c in COLORS for k in ("min_threshold", "max_threshold", "drop_probability")),
}
_PORT_QOS_FIELDS = {
    "dscp_to_tc_map",
    "tc_to_queue_map",
    "tc_to_pg_map",
    "pfc_to_queue_map",
    "pfc_to_pg_map",
    "pfc_enable",
    "pfcwd_sw_enable",
    "scheduler",
    "dot1p_to_tc_map",
    "tc_to_dscp_map",
}
_PORT_QOS_REFS = {
    "dscp_to_tc_map": "DSCP_TO_TC_MAP",
    "tc_to_queue_map": "TC_TO_QUEUE_MAP",
    "tc_to_pg_map": "TC_TO_PRIORITY_GROUP_MAP",
    "pfc_to_queue_map": "MAP_PFC_PRIORITY_TO_QUEUE",
    "pfc_to_pg_map": "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP",
}
_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9_]{0,31}$")  # map/profile names (YANG pattern, <= 32)
_DSCP_KEY = re.compile(r"^(6[0-3]|[1-5][0-9]?|[0-9])$")
_PRIO_LIST = re.compile(r"^([0-7](,[0-7])*)?$")
_UINT = re.compile(r"^(0|[1-9][0-9]*)$")
_CABLE = re.compile(r"^[0-9]+m$")
_SONIC_PORT = re.compile(r"^Ethernet[0-9]+$")
_QINDEX = re.compile(r"^[0-7](-[0-7])?$")


def _profile(intent: QosIntent, c: IntentClass | None) -> str:
    return f"{intent.map_name}_{c.name if c is not None else 'cnp'}"


def _no_wred(intent: QosIntent) -> str:
    # Upper case: class names are lower case, so this never collides with `<map>_<class>`.
    return f"{intent.map_name}_NO_WRED"


# An all-off WRED profile: a queue without ECN still names one, so that `config load` (which would
# keep the default template's AZURE_LOSSLESS on queues 3-4) and apply-patch end in the same state.
NO_WRED = {"ecn": "ecn_none", **{f"wred_{c}_enable": "false" for c in COLORS}}


def _wred(c: IntentClass) -> dict[str, str]:
    """One WRED profile for a class: `mark` = ECN marking on all colours (non-ECT packets still drop
    at the thresholds, as SONiC's own lossless profile does), `drop` = WRED drops, no marking."""
    assert c.ecn is not None
    e = c.ecn
    out = {"ecn": "ecn_all" if e.mode == "mark" else "ecn_none"}
    for color in COLORS:
        out[f"wred_{color}_enable"] = "true"
        out[f"{color}_min_threshold"] = str(e.min_bytes)
        out[f"{color}_max_threshold"] = str(e.max_bytes)
        out[f"{color}_drop_probability"] = str(e.probability)
    return out


def buffer_model(intent: QosIntent, base: Mapping[str, Any] | None) -> str:
    """The intent's platform.sonic_buffer_model, else the base's DEVICE_METADATA, else static."""
    said = intent.platform.sonic_buffer_model
    have = None
    if base is not None:
        meta = base.get("DEVICE_METADATA", {}).get("localhost", {})
        have = {"traditional": "static", "dynamic": "dynamic"}.get(meta.get("buffer_model", ""))
    if said is not None and have is not None and said != have:
        raise IntentError(
            f"platform.sonic_buffer_model: {said!r}, but the switch's DEVICE_METADATA|localhost "
            f"buffer_model says {have!r} ({meta.get('buffer_model')!r}); make them agree"
        )
    return said or have or "static"


def _indices(qindex: str) -> range:
    lo, _, hi = qindex.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def _ranges(
    table: Mapping[str, Any] | None, port: str, wanted: Sequence[int], default: Sequence[str]
) -> list[str]:
    """The keys (`<qindex>`) of `port`'s rows in a buffer table that hold one of `wanted`: the
    switch's own ranges, plus a single-index key for an index no range holds."""
    own = default
    if table is not None:
        own = [k.rpartition("|")[2] for k in table if k.rpartition("|")[0] == port]
    own = [k for k in own if _QINDEX.match(k)]
    out = [k for k in own if any(i in _indices(k) for i in wanted)]
    covered = {i for k in out for i in _indices(k)}
    out += [str(i) for i in wanted if i not in covered]
    return sorted(out, key=_natural)


def tables(
    intent: QosIntent, ports: Sequence[str], base: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """The config_db rows for the intent on `ports`, keyed as config_db JSON keys them. With a base
    (the switch's config_db), a key the base has keeps the base's fields the rendering does not set."""
    m = intent.map_name
    for i, c in enumerate(intent.classes):
        if c.lossless and c.priority == 0:
            raise IntentError(
                f"classes[{i}].priority: 0 cannot be lossless on SONiC (PG 0 carries every lossy priority)"
            )
    model = buffer_model(intent, base)
    dscp_map = intent.dscp_to_priority()
    prio_queue = intent.priority_to_queue()
    rest_queue = intent.unmatched_class.queue
    lossless = intent.lossless_priorities
    lossless_queues = sorted(c.queue for c in intent.classes if c.lossless)
    by_prio = {c.priority: c for c in intent.classes}
    # Only where the switch's own template wrote it (Mellanox/Barefoot qos_config.j2): other SAIs do
    # not take the map, and without a base the patch cannot know whether the table exists.
    pfc_to_pg = base is not None and "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP" in base
    t: dict[str, dict[str, Any]] = {name: {} for name in APPLY_ORDER}
    t["DSCP_TO_TC_MAP"][m] = {str(d): str(p) for d, p in dscp_map.items()}
    # TCs nothing maps to still need an entry: they follow the unmatched class.
    t["TC_TO_QUEUE_MAP"][m] = {str(tc): str(prio_queue.get(tc, rest_queue)) for tc in range(8)}
    pg_of = {tc: str(tc if tc in lossless else 0) for tc in range(8)}
    t["TC_TO_PRIORITY_GROUP_MAP"][m] = {str(tc): pg for tc, pg in pg_of.items()}
    if pfc_to_pg:
        t["PFC_PRIORITY_TO_PRIORITY_GROUP_MAP"][m] = {str(p): pg for p, pg in pg_of.items()}
    t["MAP_PFC_PRIORITY_TO_QUEUE"][m] = {
        str(p): str(by_prio[p].queue if p in lossless else p) for p in range(8)
    }
    for c in intent.classes:
        sched = {"type": "STRICT"} if c.scheduler == "strict" else {"type": "DWRR", "weight": str(c.weight)}
        t["SCHEDULER"][_profile(intent, c)] = sched
        if c.ecn is not None:
            t["WRED_PROFILE"][_profile(intent, c)] = _wred(c)
    if any(c.ecn is None for c in intent.classes) or intent.cnp is not None:
        t["WRED_PROFILE"][_no_wred(intent)] = dict(NO_WRED)
    if intent.cnp is not None:
        t["SCHEDULER"][_profile(intent, None)] = {"type": "STRICT"}
    if intent.buffer.cable_length_m is not None:
        t["CABLE_LENGTH"][CABLE_LENGTH_KEY] = {p: f"{intent.buffer.cable_length_m}m" for p in ports}
    wd = intent.pfc_watchdog
    bq = base.get("BUFFER_QUEUE") if base is not None else None
    bpg = base.get("BUFFER_PG") if base is not None else None
    for port in ports:
        for c in intent.classes:
            wred = _profile(intent, c) if c.ecn is not None else _no_wred(intent)
            t["QUEUE"][f"{port}|{c.queue}"] = {"scheduler": _profile(intent, c), "wred_profile": wred}
        if intent.cnp is not None:
            t["QUEUE"][f"{port}|{intent.cnp.queue}"] = {
                "scheduler": _profile(intent, None),
                "wred_profile": _no_wred(intent),
            }
        for qindex in _ranges(bq, port, lossless_queues, DEFAULT_QUEUE_RANGES) if lossless else []:
            t["BUFFER_QUEUE"][f"{port}|{qindex}"] = {"profile": EGRESS_LOSSLESS}
        if model == "dynamic":
            for pg in _ranges(bpg, port, lossless, DEFAULT_PG_RANGES) if lossless else []:
                t["BUFFER_PG"][f"{port}|{pg}"] = {"profile": "NULL"}
        pqm = {
            "dscp_to_tc_map": m,
            "tc_to_queue_map": m,
            "tc_to_pg_map": m,
            "pfc_to_queue_map": m,
            "pfc_enable": ",".join(str(p) for p in lossless),
            # always written: the default template's "3,4" must not survive a load
            "pfcwd_sw_enable": ",".join(str(q) for q in lossless_queues) if wd.enabled else "",
        }
        if pfc_to_pg:
            pqm["pfc_to_pg_map"] = m
        t["PORT_QOS_MAP"][port] = pqm
        if wd.enabled:
            t["PFC_WD"][port] = {
                "action": wd.action,
                "detection_time": str(wd.detection_ms),
                "restoration_time": str(wd.restoration_ms),
            }
    if wd.enabled:
        t["PFC_WD"]["GLOBAL"] = {"POLL_INTERVAL": str(wd.poll_ms)}
    out = {name: rows for name, rows in t.items() if rows}
    if base is not None:
        _carry_base_fields(out, base)
    return out


def _carry_base_fields(tabs: dict[str, dict[str, Any]], base: Mapping[str, Any]) -> None:
    """A key the base has keeps the base's fields the rendering does not set: what `config load` would
    leave, written out so that apply-patch's whole-key replace ends the same. CABLE_LENGTH is patched
    per port, so its other ports need no carrying."""
    for name, rows in tabs.items():
        if name == "CABLE_LENGTH":
            continue
        have = base.get(name, {})
        for key, row in rows.items():
            old = have.get(key)
            if isinstance(old, Mapping):
                rows[key] = {**old, **row}


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def patch_ops(
    tabs: Mapping[str, Mapping[str, Any]], base: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """RFC 6902 add operations in APPLY_ORDER (keys sorted within): a table the base lacks is added
    whole, CABLE_LENGTH per port, every other row as one whole key."""

    def has(*path: str) -> bool:
        if base is None:
            return path[0] in DEFAULT_BASE_TABLES and (
                len(path) == 1 or (path[0] == "CABLE_LENGTH" and path[1] == CABLE_LENGTH_KEY)
            )
        node: Any = base
        for p in path:
            if not isinstance(node, Mapping) or p not in node:
                return False
            node = node[p]
        return True

    ops: list[dict[str, Any]] = []
    for name in APPLY_ORDER:
        rows = tabs.get(name, {})
        if not rows:
            continue
        if not has(name):
            ops.append({"op": "add", "path": _pointer(name), "value": copy.deepcopy(dict(rows))})
            continue
        for key in sorted(rows, key=_natural):
            if name == "CABLE_LENGTH" and has(name, key):
                for port in sorted(rows[key], key=_natural):
                    ops.append({"op": "add", "path": _pointer(name, key, port), "value": rows[key][port]})
            else:
                ops.append({"op": "add", "path": _pointer(name, key), "value": rows[key]})
    return ops


def _natural(key: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", key)]


def document(
    intent: QosIntent, ports: Sequence[str], base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The rendered document; `base` is the switch's running config_db (None: SONiC's default)."""
    if base is not None:
        _check_base(intent, base, ports)
    tabs = tables(intent, ports, base)
    doc: dict[str, Any] = {
        "intent": intent.name,
        "base": "the switch's config_db (--base)"
        if base is not None
        else "SONiC default (Mellanox sample; render with --base for a real switch)",
        "apply_order": [name for name in APPLY_ORDER if name in tabs],
        "config_db": tabs,
        "patch": patch_ops(tabs, base),
    }
    if base is not None:
        doc["pending"] = pending(tabs, base)
    problems = check_document(doc)
    if problems:  # a renderer bug, not bad input: never print a config SONiC would refuse
        raise AssertionError("SONiC renderer produced an invalid config: " + "; ".join(problems))
    return doc


def pending(tabs: Mapping[str, Mapping[str, Any]], base: Mapping[str, Any]) -> list[str]:
    """The rows (`TABLE|KEY`, CABLE_LENGTH per port) whose rendered value the base does not hold yet:
    empty when the switch already is as rendered. A rollout keys on this, not on a file it copied, so
    a failed apply or drift on the switch is applied again on the next run."""
    out = []
    for name in APPLY_ORDER:
        have = base.get(name, {})
        for key, row in tabs.get(name, {}).items():
            if name == "CABLE_LENGTH":
                old = have.get(key, {})
                out += [f"{name}|{key}|{p}" for p, v in row.items() if old.get(p) != v]
            elif have.get(key) != row:
                out.append(f"{name}|{key}")
    return out


def _check_base(intent: QosIntent, base: Mapping[str, Any], ports: Sequence[str]) -> None:
    """What the switch's config_db must allow before anything is rendered against it."""
    known = set(base.get("PORT", {})) or set(base.get("PORT_QOS_MAP", {})) - {"global"}
    missing = [p for p in ports if p not in known]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise IntentError(f"ports: {shown} not on the switch (--base has no PORT row for them)")
    profiles = base.get("BUFFER_PROFILE")
    if intent.lossless_priorities and profiles is not None and EGRESS_LOSSLESS not in profiles:
        raise IntentError(
            f"--base: BUFFER_PROFILE has no {EGRESS_LOSSLESS} for the lossless queues (have: "
            f"{', '.join(sorted(profiles)) or 'none'})"
        )
    wd = intent.pfc_watchdog
    if wd.enabled:
        # POLL_INTERVAL is global: sonic-pfcwd.yang wants every port's times >= it, ours and the others'
        for port, row in base.get("PFC_WD", {}).items():
            if port == "GLOBAL" or port in ports or not isinstance(row, Mapping):
                continue
            for field in ("detection_time", "restoration_time"):
                value = str(row.get(field, ""))
                if value.isdigit() and int(value) < wd.poll_ms:
                    raise IntentError(
                        f"pfc_watchdog.poll_interval: {wd.poll_ms} ms is above the switch's PFC_WD|{port} "
                        f"{field} ({value} ms), a port this rendering leaves alone; the poll interval is "
                        "global, so lower it or include that port"
                    )


def render(
    intent: QosIntent, ports: Sequence[str] | str | None = None, base: Mapping[str, Any] | None = None
) -> str:
    names = _ports(intent, ports)
    return json.dumps(document(intent, names, base), indent=2, sort_keys=True) + "\n"


def _ports(intent: QosIntent, ports: Sequence[str] | str | None) -> tuple[str, ...]:
    if ports is None:
        names = intent.ports_for("sonic")
        if not names:
            raise IntentError("ports: no sonic ports; give ports.sonic in the intent or --ports")
        return names
    return parse_ports("sonic", ports if isinstance(ports, str) else list(ports), "ports")


# ---------------------------------------------------------------------------------------------
# Structural checks against the YANG models (what `config load` / GCU validation would refuse)


def check_document(doc: Mapping[str, Any]) -> list[str]:
    """Problems with a rendered document: its config_db tables and its patch order."""
    problems = check_config_db(doc.get("config_db", {}))
    problems += check_patch_order(doc.get("patch", []))
    return problems


def check_config_db(db: Mapping[str, Any]) -> list[str]:
    errs: list[str] = []

    def err(where: str, what: str) -> None:
        errs.append(f"{where}: {what}")

    def uint(where: str, value: Any, lo: int, hi: int) -> int | None:
        if not isinstance(value, str) or not _UINT.match(value):
            err(where, f"{value!r} is not a decimal string")
            return None
        if not lo <= int(value) <= hi:
            err(where, f"{value} is outside {lo}-{hi}")
        return int(value)

    for table in db:
        if table not in APPLY_ORDER:
            err(table, "not a table Geryon renders")
    for name, rows in db.get("DSCP_TO_TC_MAP", {}).items():
        if not _NAME.match(name):
            err(f"DSCP_TO_TC_MAP|{name}", "bad map name")
        for dscp, tc in rows.items():
            if not _DSCP_KEY.match(dscp):
                err(f"DSCP_TO_TC_MAP|{name}|{dscp}", "not a DSCP 0-63")
            uint(f"DSCP_TO_TC_MAP|{name}|{dscp}", tc, 0, 7)
    for table, value_hi in (
        ("TC_TO_QUEUE_MAP", 7),
        ("TC_TO_PRIORITY_GROUP_MAP", 7),
        ("MAP_PFC_PRIORITY_TO_QUEUE", 7),
        ("PFC_PRIORITY_TO_PRIORITY_GROUP_MAP", 7),
    ):
        for name, rows in db.get(table, {}).items():
            if not _NAME.match(name):
                err(f"{table}|{name}", "bad map name")
            for k, v in rows.items():
                uint(f"{table}|{name} key", k, 0, 7)
                uint(f"{table}|{name}|{k}", v, 0, value_hi)
    for name, row in db.get("SCHEDULER", {}).items():
        where = f"SCHEDULER|{name}"
        kind = row.get("type", "WRR")
        if kind not in SCHEDULER_TYPES:
            err(where, f"type {kind!r} not in {'|'.join(SCHEDULER_TYPES)}")
        if "weight" in row:
            uint(f"{where}|weight", row["weight"], 1, 100)
            if kind == "STRICT":
                err(where, "a STRICT scheduler has no weight")
        elif kind in ("DWRR", "WRR"):
            err(where, f"a {kind} scheduler needs a weight")
        if "meter_type" in row and row["meter_type"] not in METER_TYPES:
            err(where, f"meter_type {row['meter_type']!r} not in packets|bytes")
        if "priority" in row:
            uint(f"{where}|priority", row["priority"], 0, 9)
        extra = set(row) - {"type", "weight", "meter_type", "priority", "cir", "pir", "cbs", "pbs"}
        if extra:
            err(where, f"unknown fields {sorted(extra)}")
    for name, row in db.get("WRED_PROFILE", {}).items():
        where = f"WRED_PROFILE|{name}"
        if not _NAME.match(name):
            err(where, "bad profile name")
        extra = set(row) - _WRED_FIELDS
        if extra:
            err(where, f"unknown fields {sorted(extra)}")
        if row.get("ecn", "ecn_none") not in ECN_MODES:
            err(where, f"ecn {row.get('ecn')!r} not a YANG ecn mode")
        for color in COLORS:
            enable = row.get(f"wred_{color}_enable", "false")
            if enable not in ("true", "false"):
                err(f"{where}|wred_{color}_enable", f"{enable!r} is not true|false")
            lo = uint(f"{where}|{color}_min_threshold", row.get(f"{color}_min_threshold", "0"), 0, 2**63)
            hi = uint(f"{where}|{color}_max_threshold", row.get(f"{color}_max_threshold", "0"), 0, 2**63)
            if lo is not None and hi is not None and hi < lo:
                err(where, f"{color}_max_threshold {hi} is below {color}_min_threshold {lo}")
            uint(f"{where}|{color}_drop_probability", row.get(f"{color}_drop_probability", "100"), 0, 100)
    for key, row in db.get("QUEUE", {}).items():
        port, _, qindex = key.partition("|")
        if not _SONIC_PORT.match(port) or not _QINDEX.match(qindex):
            err(f"QUEUE|{key}", "key is not <port>|<queue>")
        if set(row) - {"scheduler", "wred_profile"}:
            err(f"QUEUE|{key}", f"unknown fields {sorted(set(row) - {'scheduler', 'wred_profile'})}")
        if "wred_profile" not in row:
            # config load would keep the switch's old WRED profile, apply-patch would drop it
            err(f"QUEUE|{key}", "names no wred_profile (load and apply-patch would end differently)")
        if "scheduler" in row and row["scheduler"] not in db.get("SCHEDULER", {}):
            err(f"QUEUE|{key}", f"scheduler {row['scheduler']!r} is not in SCHEDULER")
        if "wred_profile" in row and row["wred_profile"] not in db.get("WRED_PROFILE", {}):
            err(f"QUEUE|{key}", f"wred_profile {row['wred_profile']!r} is not in WRED_PROFILE")
    for table in ("BUFFER_QUEUE", "BUFFER_PG"):
        for key, row in db.get(table, {}).items():
            port, _, qindex = key.partition("|")
            if not _SONIC_PORT.match(port) or not _QINDEX.match(qindex):
                err(f"{table}|{key}", "key is not <port>|<index or range>")
            if set(row) != {"profile"} or not (
                isinstance(row["profile"], str) and _NAME.match(row["profile"])
            ):
                err(f"{table}|{key}", f"expected one field profile naming a BUFFER_PROFILE, got {row!r}")
    for port, row in db.get("PORT_QOS_MAP", {}).items():
        where = f"PORT_QOS_MAP|{port}"
        if port != "global" and not _SONIC_PORT.match(port):
            err(where, "not a port name")
        extra = set(row) - _PORT_QOS_FIELDS
        if extra:
            err(where, f"unknown fields {sorted(extra)}")
        for field, table in _PORT_QOS_REFS.items():
            if field in row and row[field] not in db.get(table, {}):
                err(where, f"{field} {row[field]!r} is not in {table}")
        for field in ("pfc_enable", "pfcwd_sw_enable"):
            if field in row and not (isinstance(row[field], str) and _PRIO_LIST.match(row[field])):
                err(where, f"{field} {row[field]!r} is not a list like '3,4'")
        if port != "global" and "pfcwd_sw_enable" not in row:
            err(where, "names no pfcwd_sw_enable (load would keep the switch's, apply-patch drop it)")
    wd = db.get("PFC_WD", {})
    poll = None
    if "GLOBAL" in wd:
        if set(wd["GLOBAL"]) - {"POLL_INTERVAL", "BIG_RED_SWITCH"}:
            err("PFC_WD|GLOBAL", "only POLL_INTERVAL (and BIG_RED_SWITCH) belong to GLOBAL")
        poll = uint("PFC_WD|GLOBAL|POLL_INTERVAL", wd["GLOBAL"].get("POLL_INTERVAL"), 100, 1000)
    for port, row in wd.items():
        if port == "GLOBAL":
            continue
        where = f"PFC_WD|{port}"
        if not _SONIC_PORT.match(port):
            err(where, "not a port name")
        if row.get("action") not in WD_ACTIONS:
            err(where, f"action {row.get('action')!r} not in drop|forward|alert")
        for field, hi in (("detection_time", 5000), ("restoration_time", 60000)):
            value = uint(f"{where}|{field}", row.get(field), 100, hi)
            if value is not None and poll is not None and value < poll:
                err(where, f"{field} {value} is below POLL_INTERVAL {poll}")
        if port not in db.get("PORT_QOS_MAP", {}) or not db["PORT_QOS_MAP"][port].get("pfc_enable"):
            err(where, "a watchdog on a port without PFC (PORT_QOS_MAP pfc_enable)")
    for name, rows in db.get("CABLE_LENGTH", {}).items():
        if not _NAME.match(name):
            err(f"CABLE_LENGTH|{name}", "bad list name")
        for port, length in rows.items():
            if not _SONIC_PORT.match(port) or not (isinstance(length, str) and _CABLE.match(length)):
                err(f"CABLE_LENGTH|{name}|{port}", f"{length!r} is not a length like 5m")
    return errs


def check_patch_order(ops: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every op is an add of a whole table, one table key, or (CABLE_LENGTH only) one port's length;
    tables come in APPLY_ORDER, so whatever a key refers to was added before it and PFC_WD comes after
    PORT_QOS_MAP."""
    errs = []
    last = -1
    for i, op in enumerate(ops):
        parts = str(op.get("path", "")).split("/")
        depth_ok = len(parts) in (2, 3) or (len(parts) == 4 and parts[1] == "CABLE_LENGTH")
        if op.get("op") != "add" or not depth_ok or parts[1] not in APPLY_ORDER:
            errs.append(
                f"patch[{i}]: not an add of a table, a table key or a cable length "
                f"({op.get('op')} {op.get('path')})"
            )
            continue
        rank = APPLY_ORDER.index(parts[1])
        if rank < last:
            errs.append(
                f"patch[{i}]: {parts[1]} after {APPLY_ORDER[last]} (apply order: {', '.join(APPLY_ORDER)})"
            )
        last = max(last, rank)
    return errs
