"""What a SONiC switch does with a rendered config, for the load-versus-patch tests.

- `config load FILE` (sonic-utilities config/main.py -> `sonic-cfggen -j FILE --write-to-db`, which calls
  ConfigDBConnector.mod_config): for every table and key it *modifies* the key, i.e. sets the named
  fields and leaves the key's other fields as they were (hmset); nothing is ever deleted.
- `config apply-patch FILE` (generic_config_updater): applies the RFC 6902 operations to the whole
  running config as one JSON document (jsonpatch), validates the result against the YANG models and
  only then writes it; an "add" replaces the member it names whole (RFC 6902 section 4.1) and fails when
  the parent does not exist, which fails the whole patch.

Written here from those documented semantics (no SONiC code copied).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

VENDOR = Path(__file__).resolve().parents[3] / "shared" / "vendor" / "sonic-yang"
DEFAULTS = VENDOR / "defaults"

# SONiC's own default QoS + buffer config_db of a platform (sonic-config-engine sample outputs):
# (qos file, buffer file, buffer model).
PLATFORMS = {
    "dell-s6100": ("qos-dell6100.json", "buffers-dell6100.json", "traditional"),
    "mellanox-sn4600c": ("qos-mellanox4600c-c64.json", "buffers-mellanox4600c-t1.json", "traditional"),
    "mellanox-sn4600c-dynamic": (
        "qos-mellanox4600c-c64.json",
        "buffers-mellanox4600c-t1-dynamic.json",
        "dynamic",
    ),
}


class PatchError(ValueError):
    """apply-patch refuses the patch (a path whose parent is missing)."""


def _ports_of(db: Mapping[str, Any]) -> list[str]:
    ports: set[str] = set()
    for table in ("PORT_QOS_MAP", "BUFFER_QUEUE", "BUFFER_PG", "QUEUE"):
        for key in db.get(table, {}):
            name = key.partition("|")[0]
            if name.startswith("Ethernet"):
                ports.add(name)
    return sorted(ports, key=lambda p: int(p[len("Ethernet") :]))


def platform_default(name: str) -> dict[str, Any]:
    """The platform's default QoS and buffer tables merged, with the PORT and DEVICE_METADATA rows the
    YANG references need (ports: those the default tables name)."""
    qos_file, buffer_file, model = PLATFORMS[name]
    db: dict[str, Any] = {}
    for f in (qos_file, buffer_file):
        for table, rows in json.loads((DEFAULTS / f).read_text()).items():
            db.setdefault(table, {}).update(rows)
    ports = [p for p in _ports_of(db) if p in db.get("PORT_QOS_MAP", {})]
    db["PORT"] = {p: {"lanes": str(i * 4), "speed": "100000", "mtu": "9100"} for i, p in enumerate(ports)}
    db["DEVICE_METADATA"] = {
        "localhost": {"hostname": "sonic", "hwsku": name, "type": "ToRRouter", "buffer_model": model}
    }
    # The buffer samples cover more ports than the QoS sample: keep the ports both know.
    for table in list(db):
        if table in ("PORT", "DEVICE_METADATA"):
            continue
        rows = db[table]
        for key in list(rows):
            port = key.partition("|")[0]
            if port.startswith("Ethernet") and port not in db["PORT"]:
                del rows[key]
        if table == "CABLE_LENGTH":
            for lst in rows.values():
                for port in list(lst):
                    if port not in db["PORT"]:
                        del lst[port]
    return db


def config_load(running: Mapping[str, Any], config_db: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(running))
    for table, rows in config_db.items():
        for key, fields in rows.items():
            out.setdefault(table, {}).setdefault(key, {}).update(copy.deepcopy(fields))
    return out


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_patch(running: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(dict(running))
    for i, op in enumerate(ops):
        if op["op"] != "add":
            raise PatchError(f"patch[{i}]: this simulation knows only add, got {op['op']}")
        *parents, leaf = [_unescape(p) for p in op["path"].split("/")[1:]]
        node: Any = out
        for p in parents:
            if not isinstance(node, dict) or p not in node:
                raise PatchError(f"patch[{i}]: {op['path']}: member {p!r} not found")
            node = node[p]
        node[leaf] = copy.deepcopy(op["value"])
    return out
