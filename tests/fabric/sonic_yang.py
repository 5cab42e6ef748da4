"""A config_db validated against SONiC's YANG models with yanglint (libyang 2, Debian libyang2-tools).

config_db JSON -> YANG instance data, as SONiC's own mapping does it (src/sonic-yang-mgmt/
sonic_yang_ext.py): table T of module sonic-x is container sonic-x/T/T_LIST; a key `a|b` fills the
list's keys in order; map tables (DSCP_TO_TC_MAP, ...) hold an inner list of key/value pairs; a
comma-separated value of a leaf-list is split. XML is written (not JSON) because libyang's JSON
parser wants numbers unquoted while config_db stores every value as a string.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from fabric.sonic_switch import VENDOR

YANG = VENDOR / "yang"

# table: (module, list keys, inner map list (key leaf, value leaf) or None)
TABLES: dict[str, tuple[str, tuple[str, ...], tuple[str, str] | None]] = {
    "PORT": ("sonic-port", ("name",), None),
    "DSCP_TO_TC_MAP": ("sonic-dscp-tc-map", ("name",), ("dscp", "tc")),
    "TC_TO_QUEUE_MAP": ("sonic-tc-queue-map", ("name",), ("tc", "qindex")),
    "TC_TO_PRIORITY_GROUP_MAP": ("sonic-tc-priority-group-map", ("name",), ("tc", "pg")),
    "MAP_PFC_PRIORITY_TO_QUEUE": ("sonic-pfc-priority-queue-map", ("name",), ("pfc_priority", "qindex")),
    "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP": (
        "sonic-pfc-priority-priority-group-map",
        ("name",),
        ("pfc_priority", "pg"),
    ),
    "SCHEDULER": ("sonic-scheduler", ("name",), None),
    "WRED_PROFILE": ("sonic-wred-profile", ("name",), None),
    "QUEUE": ("sonic-queue", ("ifname", "qindex"), None),
    "PORT_QOS_MAP": ("sonic-port-qos-map", ("ifname",), None),
    "PFC_WD": ("sonic-pfcwd", ("ifname",), None),
    "CABLE_LENGTH": ("sonic-cable-length", ("name",), ("port", "length")),
    "BUFFER_POOL": ("sonic-buffer-pool", ("name",), None),
    "BUFFER_PROFILE": ("sonic-buffer-profile", ("name",), None),
    "BUFFER_PG": ("sonic-buffer-pg", ("port", "pg_num"), None),
    "BUFFER_QUEUE": ("sonic-buffer-queue", ("port", "qindex"), None),
    "BUFFER_PORT_INGRESS_PROFILE_LIST": ("sonic-buffer-port-ingress-profile-list", ("port",), None),
    "BUFFER_PORT_EGRESS_PROFILE_LIST": ("sonic-buffer-port-egress-profile-list", ("port",), None),
    "DEFAULT_LOSSLESS_BUFFER_PARAMETER": ("sonic-default-lossless-buffer-parameter", ("name",), None),
    "LOSSLESS_TRAFFIC_PATTERN": ("sonic-lossless-traffic-pattern", ("name",), None),
}
LEAF_LISTS = {"profile_list", "adv_speeds", "adv_interface_types"}


def skip_reason() -> str | None:
    if not YANG.is_dir():
        return f"SONiC YANG models not found at {YANG} (test data kept outside the project)"
    if shutil.which("yanglint") is None:
        return "yanglint not installed (Debian libyang2-tools; scripts/bootstrap.sh installs it)"
    return None


def _namespace(module: str) -> str:
    for line in (YANG / f"{module}.yang").read_text().splitlines():
        line = line.strip()
        if line.startswith("namespace"):
            return line.split('"')[1]
    raise AssertionError(f"{module}.yang has no namespace")


def _fields(fields: Mapping[str, Any]) -> str:
    out = []
    for name, value in fields.items():
        values = str(value).split(",") if name in LEAF_LISTS else [str(value)]
        out += [f"<{name}>{escape(v)}</{name}>" for v in values]
    return "".join(out)


def to_xml(db: Mapping[str, Any]) -> str:
    """The config_db as YANG XML instance data (an unknown table is an error, as in SONiC)."""
    parts = []
    meta = db.get("DEVICE_METADATA", {}).get("localhost")
    if meta is not None:
        ns = _namespace("sonic-device_metadata")
        parts.append(
            f'<sonic-device_metadata xmlns="{ns}"><DEVICE_METADATA><localhost>'
            f"{_fields(meta)}</localhost></DEVICE_METADATA></sonic-device_metadata>"
        )
    for table, rows in db.items():
        if table == "DEVICE_METADATA":
            continue
        if table not in TABLES:
            raise AssertionError(f"{table}: no YANG mapping in tests/fabric/sonic_yang.py")
        module, keys, inner = TABLES[table]
        entries = []
        for key, fields in rows.items():
            kv = dict(zip(keys, key.split("|"), strict=True))
            head = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in kv.items())
            if inner is None:
                body = _fields(fields)
            else:
                ik, iv = inner
                body = "".join(
                    f"<{table}><{ik}>{escape(k)}</{ik}><{iv}>{escape(str(v))}</{iv}></{table}>"
                    for k, v in fields.items()
                )
            entries.append(f"<{table}_LIST>{head}{body}</{table}_LIST>")
        parts.append(
            f'<{module} xmlns="{_namespace(module)}"><{table}>{"".join(entries)}</{table}></{module}>'
        )
    return "".join(parts)


def validate(db: Mapping[str, Any]) -> str:
    """yanglint's complaints about the config_db ("" when it is valid)."""
    modules = sorted({TABLES[t][0] for t in db if t in TABLES} | {"sonic-device_metadata"})
    with tempfile.TemporaryDirectory(prefix="geryon-yang-") as tmp:
        data = Path(tmp) / "config.xml"
        data.write_text(to_xml(db))
        proc = subprocess.run(
            ["yanglint", "-p", str(YANG), "-t", "config", "-f", "xml"]
            + [str(YANG / f"{m}.yang") for m in modules]
            + [str(data)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if proc.returncode == 0:
        return ""
    # "when condition ... check skip" warnings are noise (conditions on DEVICE_METADATA fields unset)
    errors = [
        line for line in (proc.stderr + proc.stdout).splitlines() if "libyang err" in line or "[E]" in line
    ]
    return "\n".join(errors).strip() or f"yanglint exit {proc.returncode}"
