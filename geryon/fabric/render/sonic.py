"""SONiC: the intent as config_db tables, with an apply order SONiC accepts.

The rendered document (JSON, sorted keys) has:
  "config_db"    the merged tables, for `config load` (`jq .config_db sonic.json > qos.json`);
  "patch"        the same content as RFC 6902 "add" operations, one per table key, in apply order, for
                 `config apply-patch` (`jq .patch sonic.json > qos.patch.json`);
  "apply_order"  the table order of "patch": maps and profiles (DSCP_TO_TC_MAP, TC_TO_QUEUE_MAP,
                 TC_TO_PRIORITY_GROUP_MAP, MAP_PFC_PRIORITY_TO_QUEUE, SCHEDULER, WRED_PROFILE, CABLE_LENGTH)
                 before the objects referring to them (QUEUE, PORT_QOS_MAP), PFC_WD last: the watchdog
                 needs PFC enabled on the port first (PFC_WD before PORT_QOS_MAP is a known failure).
  "intent"       the intent's name.

Mapping: TC = switch priority; TC -> queue as the intent says; lossless priorities -> PG of the same
number, every other TC -> PG 0 (so a lossless class cannot use priority 0); PFC priority -> the
lossless class's queue. Names: maps are `<map_name>` (e.g. GERYON, never SONiC's AZURE), schedulers
and WRED profiles `<map_name>_<class>` and `<map_name>_cnp`. Values follow the sonic-yang-models
enumerations and ranges, which check_config_db() verifies before anything is printed.
"""

from __future__ import annotations

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
    "SCHEDULER",
    "WRED_PROFILE",
    "CABLE_LENGTH",
    "QUEUE",
    "PORT_QOS_MAP",
    "PFC_WD",
)
# CABLE_LENGTH is per port; buffermgrd reads the table SONiC's own templates write, keyed AZURE.
CABLE_LENGTH_KEY = "AZURE"

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
}
_PORT_QOS_REFS = {
    "dscp_to_tc_map": "DSCP_TO_TC_MAP",
    "tc_to_queue_map": "TC_TO_QUEUE_MAP",
    "tc_to_pg_map": "TC_TO_PRIORITY_GROUP_MAP",
    "pfc_to_queue_map": "MAP_PFC_PRIORITY_TO_QUEUE",
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


def tables(intent: QosIntent, ports: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The config_db tables for the intent on `ports`, keyed as config_db JSON keys them."""
    m = intent.map_name
    for i, c in enumerate(intent.classes):
        if c.lossless and c.priority == 0:
            raise IntentError(
                f"classes[{i}].priority: 0 cannot be lossless on SONiC (PG 0 carries every lossy priority)"
            )
    dscp_map = intent.dscp_to_priority()
    prio_queue = intent.priority_to_queue()
    rest_queue = intent.unmatched_class.queue
    lossless = intent.lossless_priorities
    lossless_queues = sorted(c.queue for c in intent.classes if c.lossless)
    by_prio = {c.priority: c for c in intent.classes}
    t: dict[str, dict[str, Any]] = {name: {} for name in APPLY_ORDER}
    t["DSCP_TO_TC_MAP"][m] = {str(d): str(p) for d, p in dscp_map.items()}
    # TCs nothing maps to still need an entry: they follow the unmatched class.
    t["TC_TO_QUEUE_MAP"][m] = {str(tc): str(prio_queue.get(tc, rest_queue)) for tc in range(8)}
    t["TC_TO_PRIORITY_GROUP_MAP"][m] = {str(tc): str(tc if tc in lossless else 0) for tc in range(8)}
    t["MAP_PFC_PRIORITY_TO_QUEUE"][m] = {
        str(p): str(by_prio[p].queue if p in lossless else p) for p in range(8)
    }
    for c in intent.classes:
        sched = {"type": "STRICT"} if c.scheduler == "strict" else {"type": "DWRR", "weight": str(c.weight)}
        t["SCHEDULER"][_profile(intent, c)] = sched
        if c.ecn is not None:
            t["WRED_PROFILE"][_profile(intent, c)] = _wred(c)
    if intent.cnp is not None:
        t["SCHEDULER"][_profile(intent, None)] = {"type": "STRICT"}
    if intent.buffer.cable_length_m is not None:
        t["CABLE_LENGTH"][CABLE_LENGTH_KEY] = {p: f"{intent.buffer.cable_length_m}m" for p in ports}
    wd = intent.pfc_watchdog
    for port in ports:
        for c in intent.classes:
            q: dict[str, str] = {"scheduler": _profile(intent, c)}
            if c.ecn is not None:
                q["wred_profile"] = _profile(intent, c)
            t["QUEUE"][f"{port}|{c.queue}"] = q
        if intent.cnp is not None:
            t["QUEUE"][f"{port}|{intent.cnp.queue}"] = {"scheduler": _profile(intent, None)}
        pqm = {
            "dscp_to_tc_map": m,
            "tc_to_queue_map": m,
            "tc_to_pg_map": m,
            "pfc_to_queue_map": m,
            "pfc_enable": ",".join(str(p) for p in lossless),
        }
        if wd.enabled:
            pqm["pfcwd_sw_enable"] = ",".join(str(q) for q in lossless_queues)
        t["PORT_QOS_MAP"][port] = pqm
        if wd.enabled:
            t["PFC_WD"][port] = {
                "action": wd.action,
                "detection_time": str(wd.detection_ms),
                "restoration_time": str(wd.restoration_ms),
            }
    if wd.enabled:
        t["PFC_WD"]["GLOBAL"] = {"POLL_INTERVAL": str(wd.poll_ms)}
    return {name: rows for name, rows in t.items() if rows}


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def patch_ops(tabs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """RFC 6902 add operations, one per table key, tables in APPLY_ORDER (keys sorted within)."""
    ops = []
    for name in APPLY_ORDER:
        for key in sorted(tabs.get(name, {}), key=_natural):
            ops.append({"op": "add", "path": _pointer(name, key), "value": tabs[name][key]})
    return ops


def _natural(key: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", key)]


def document(intent: QosIntent, ports: Sequence[str]) -> dict[str, Any]:
    tabs = tables(intent, ports)
    doc = {
        "intent": intent.name,
        "apply_order": [name for name in APPLY_ORDER if name in tabs],
        "config_db": tabs,
        "patch": patch_ops(tabs),
    }
    problems = check_document(doc)
    if problems:  # a renderer bug, not bad input: never print a config SONiC would refuse
        raise AssertionError("SONiC renderer produced an invalid config: " + "; ".join(problems))
    return doc


def render(intent: QosIntent, ports: Sequence[str] | str | None = None) -> str:
    names = _ports(intent, ports)
    return json.dumps(document(intent, names), indent=2, sort_keys=True) + "\n"


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
        if "scheduler" in row and row["scheduler"] not in db.get("SCHEDULER", {}):
            err(f"QUEUE|{key}", f"scheduler {row['scheduler']!r} is not in SCHEDULER")
        if "wred_profile" in row and row["wred_profile"] not in db.get("WRED_PROFILE", {}):
            err(f"QUEUE|{key}", f"wred_profile {row['wred_profile']!r} is not in WRED_PROFILE")
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
    wd = db.get("PFC_WD", {})
    poll = None
    if "GLOBAL" in wd:
        if set(wd["GLOBAL"]) - {"POLL_INTERVAL"}:
            err("PFC_WD|GLOBAL", "only POLL_INTERVAL belongs to GLOBAL")
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
    """Every op is an add of one table key; tables come in APPLY_ORDER, so whatever a key refers to
    was added before it and PFC_WD comes after PORT_QOS_MAP."""
    errs = []
    last = -1
    for i, op in enumerate(ops):
        parts = str(op.get("path", "")).split("/")
        if op.get("op") != "add" or len(parts) != 3 or parts[1] not in APPLY_ORDER:
            errs.append(f"patch[{i}]: not an add of one table key ({op.get('op')} {op.get('path')})")
            continue
        rank = APPLY_ORDER.index(parts[1])
        if rank < last:
            errs.append(
                f"patch[{i}]: {parts[1]} after {APPLY_ORDER[last]} (apply order: {', '.join(APPLY_ORDER)})"
            )
        last = max(last, rank)
    return errs
