"""A SONiC config_db (rendered by Geryon, or exported from a switch) -> its effective QoS per port.

Reads the tables that decide where a packet goes and whether it may be dropped: DSCP_TO_TC_MAP,
TC_TO_QUEUE_MAP, PORT_QOS_MAP (which maps a port uses, pfc_enable), QUEUE (the scheduler of each
port queue) and SCHEDULER (type and weight); for the lossless classes also TC_TO_PRIORITY_GROUP_MAP
and PFC_PRIORITY_TO_PRIORITY_GROUP_MAP (tc_to_pg_map, pfc_to_pg_map: a port without tc_to_pg_map has
the SAI default, every TC on PG 0) and BUFFER_QUEUE (a queue is lossless at egress when its profile's
pool, or else the profile's own name, says "lossless", as SONiC's templates name them; a config
without a BUFFER_QUEUE table, e.g. a QoS-only fragment, is not checked for it). WRED and the PFC
watchdog are ignored.
Both reference styles are accepted: a plain name ("AZURE") and the older "[DSCP_TO_TC_MAP|AZURE]";
so is the document `geryon render-switch --os sonic` prints (its "config_db" member).

SAI defaults where the config says nothing: an unmapped DSCP goes to TC 0, TC n goes to queue n, a
port without pfc_enable has no lossless priority. PORT_QOS_MAP "global" supplies the DSCP map of
ports that name none. Pure logic; errors are SonicConfigError naming the table, key and field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geryon.fabric.check import PortQos, Scheduler, SwitchQos

_REF = re.compile(r"^\[([A-Z_]+)\|([^\]]+)\]$")
_SCHEDULER_TYPES = {"STRICT": "strict", "DWRR": "dwrr", "WRR": "wrr"}
MAX_TC = 15  # SONiC allows TC 0-15 on some ASICs; priorities (PFC) stop at 7
MAX_QUEUE = 15


class SonicConfigError(ValueError):
    """The config_db is malformed or inconsistent; the message names the table, key and field."""


def load_sonic_config(path: str | Path) -> SwitchQos:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SonicConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SonicConfigError(f"{path}: not JSON (line {e.lineno}: {e.msg}); expected a config_db") from None
    return parse_sonic_config(data, source=f"sonic config_db {path}")


def parse_sonic_config(data: Any, source: str = "sonic config_db") -> SwitchQos:
    if not isinstance(data, Mapping):
        raise SonicConfigError(f"config_db: expected a JSON object of tables, got {type(data).__name__}")
    if isinstance(
        data.get("config_db"), Mapping
    ):  # `geryon render-switch --os sonic` output: the tables inside
        data = data["config_db"]
    dscp_maps = {
        name: _int_map(m, f"DSCP_TO_TC_MAP|{name}", 63, MAX_TC)
        for name, m in _table(data, "DSCP_TO_TC_MAP").items()
    }
    tc_maps = {
        name: _int_map(m, f"TC_TO_QUEUE_MAP|{name}", MAX_TC, MAX_QUEUE)
        for name, m in _table(data, "TC_TO_QUEUE_MAP").items()
    }
    schedulers = {name: _scheduler(name, s) for name, s in _table(data, "SCHEDULER").items()}
    port_qos = _table(data, "PORT_QOS_MAP")
    glob = port_qos.get("global", {})
    per_port: dict[str, Mapping[str, Any]] = {}
    for key, fields in port_qos.items():
        if key == "global":
            continue
        if not isinstance(fields, Mapping):
            raise SonicConfigError(f"PORT_QOS_MAP|{key}: expected an object of fields")
        for port in key.split(","):
            per_port[port.strip()] = fields
    ports = list(_table(data, "PORT")) + [p for p in per_port if p not in _table(data, "PORT")]
    if not ports:
        raise SonicConfigError("PORT_QOS_MAP: no port has a QoS map (and no PORT table): nothing to check")
    queue_sched = _queue_schedulers(_table(data, "QUEUE"), schedulers)
    pg_maps = {
        name: _int_map(m, f"TC_TO_PRIORITY_GROUP_MAP|{name}", MAX_TC, 7)
        for name, m in _table(data, "TC_TO_PRIORITY_GROUP_MAP").items()
    }
    pfc_pg_maps = {
        name: _int_map(m, f"PFC_PRIORITY_TO_PRIORITY_GROUP_MAP|{name}", 7, 7)
        for name, m in _table(data, "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP").items()
    }
    lossless_queues = (
        _lossless_queues(_table(data, "BUFFER_QUEUE"), _table(data, "BUFFER_PROFILE"))
        if "BUFFER_QUEUE" in data
        else None
    )
    out: dict[str, PortQos] = {}
    for port in ports:
        fields = per_port.get(port, {})
        where = f"PORT_QOS_MAP|{port}"
        dscp_name = fields.get("dscp_to_tc_map") or glob.get("dscp_to_tc_map")
        where_dscp = where if "dscp_to_tc_map" in fields else "PORT_QOS_MAP|global"
        dscp_to_tc = _deref(dscp_name, "DSCP_TO_TC_MAP", dscp_maps, f"{where_dscp}.dscp_to_tc_map")
        tc_name = fields.get("tc_to_queue_map")
        tc_to_queue = _deref(tc_name, "TC_TO_QUEUE_MAP", tc_maps, f"{where}.tc_to_queue_map")
        tc_to_pg = _deref(
            fields.get("tc_to_pg_map"), "TC_TO_PRIORITY_GROUP_MAP", pg_maps, f"{where}.tc_to_pg_map"
        )
        pfc_to_pg = _deref(
            fields.get("pfc_to_pg_map"),
            "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP",
            pfc_pg_maps,
            f"{where}.pfc_to_pg_map",
        )
        out[port] = PortQos(
            dscp_to_tc=dscp_to_tc if dscp_to_tc is not None else {},
            tc_to_queue=tc_to_queue if tc_to_queue is not None else {},
            pfc_enable=_pfc(fields.get("pfc_enable", ""), f"{where}.pfc_enable"),
            schedulers=queue_sched.get(port, {}),
            dscp_map=f"DSCP_TO_TC_MAP|{_name(dscp_name)}"
            if dscp_name
            else "any DSCP_TO_TC_MAP (none on port)",
            lossless_queues=None if lossless_queues is None else lossless_queues.get(port, frozenset()),
            tc_to_pg=tc_to_pg if tc_to_pg is not None else {},
            pfc_to_pg=pfc_to_pg,
        )
    return SwitchQos(source=source, ports=out)


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    t = data.get(name, {})
    if not isinstance(t, Mapping):
        raise SonicConfigError(f"{name}: expected an object keyed by name, got {type(t).__name__}")
    return t


def _name(ref: str) -> str:
    m = _REF.match(ref.strip())
    return m.group(2) if m else ref.strip()


def _deref(ref: Any, table: str, known: Mapping[str, Any], where: str) -> Any:
    if ref is None or ref == "":
        return None
    if not isinstance(ref, str):
        raise SonicConfigError(f"{where}: expected a {table} name, got {type(ref).__name__}")
    m = _REF.match(ref.strip())
    if m and m.group(1) != table:
        raise SonicConfigError(f"{where}: {ref!r} refers to {m.group(1)}, expected a {table} entry")
    name = _name(ref)
    if name not in known:
        have = ", ".join(sorted(known)) or "none"
        raise SonicConfigError(f"{where}: {name!r} is not in {table} (have: {have})")
    return known[name]


def _int(value: Any, where: str, hi: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise SonicConfigError(f"{where}: {value!r} is not a number 0-{hi}") from None
    if not 0 <= n <= hi:
        raise SonicConfigError(f"{where}: {n} is outside 0-{hi}")
    return n


def _int_map(m: Any, where: str, key_hi: int, value_hi: int) -> dict[int, int]:
    if not isinstance(m, Mapping):
        raise SonicConfigError(f"{where}: expected an object of number -> number")
    return {_int(k, f"{where} key", key_hi): _int(v, f"{where}.{k}", value_hi) for k, v in m.items()}


def _scheduler(name: str, s: Any) -> Scheduler:
    where = f"SCHEDULER|{name}"
    if not isinstance(s, Mapping):
        raise SonicConfigError(f"{where}: expected an object (type, weight)")
    kind = str(s.get("type", "")).upper()
    if kind not in _SCHEDULER_TYPES:
        raise SonicConfigError(f"{where}.type: {s.get('type')!r}; allowed: STRICT, DWRR, WRR")
    weight = _int(s["weight"], f"{where}.weight", 100) if "weight" in s else None
    return Scheduler(_SCHEDULER_TYPES[kind], None if kind == "STRICT" else weight)


def _pfc(value: Any, where: str) -> frozenset[int]:
    if not isinstance(value, str):
        raise SonicConfigError(f'{where}: expected a comma-separated list of priorities like "3,4"')
    return frozenset(_int(p, where, 7) for p in value.split(",") if p.strip())


def _indices(text: str, where: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a = _int(lo, where, MAX_QUEUE)
        b = _int(hi, where, MAX_QUEUE) if hi else a
        if b < a:
            raise SonicConfigError(f"{where}: range {part!r} runs backwards")
        out += range(a, b + 1)
    return out


def _lossless_queues(queues: Mapping[str, Any], profiles: Mapping[str, Any]) -> dict[str, frozenset[int]]:
    """BUFFER_QUEUE "PORTS|QUEUES" -> profile: the queues whose egress profile is lossless, per port."""
    out: dict[str, set[int]] = {}
    for key, fields in queues.items():
        where = f"BUFFER_QUEUE|{key}"
        ports, sep, qs = key.rpartition("|")
        if not sep or not ports or not isinstance(fields, Mapping):
            raise SonicConfigError(f"{where}: expected a key PORTS|QUEUES with a profile field")
        name = _name(str(fields.get("profile", "")))
        profile = profiles.get(name)
        pool = _name(str(profile.get("pool", ""))) if isinstance(profile, Mapping) else ""
        lossless = "lossless" in (pool or name)
        for p in ports.split(","):
            got = out.setdefault(p.strip(), set())
            if lossless:
                got.update(_indices(qs, where))
    return {p: frozenset(q) for p, q in out.items()}


def _queue_schedulers(
    queues: Mapping[str, Any], schedulers: Mapping[str, Scheduler]
) -> dict[str, dict[int, Scheduler]]:
    """QUEUE keys are "PORTS|QUEUES" ("Ethernet0,Ethernet4|3-4"); each names a SCHEDULER."""
    out: dict[str, dict[int, Scheduler]] = {}
    for key, fields in queues.items():
        where = f"QUEUE|{key}"
        ports, sep, qs = key.rpartition("|")
        if not sep or not ports:
            raise SonicConfigError(f"{where}: expected a key PORTS|QUEUES like Ethernet0|3-4")
        if not isinstance(fields, Mapping):
            raise SonicConfigError(f"{where}: expected an object of fields")
        sched = _deref(fields.get("scheduler"), "SCHEDULER", schedulers, f"{where}.scheduler")
        if sched is None:
            continue
        for port in ports.split(","):
            for q in _indices(qs, where):
                out.setdefault(port.strip(), {})[q] = sched
    return out
