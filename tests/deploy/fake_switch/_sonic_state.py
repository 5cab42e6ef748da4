"""State of the fake SONiC switch (tests/deploy/fake_switch/config, sonic-cfggen): $FAKE_SONIC_STATE
holds running.json (CONFIG_DB), saved.json (/etc/sonic/config_db.json) and checkpoints/<name>.json.

Semantics, from sonic-utilities (config/main.py) and sonic-config-engine as documented:
  config load -y FILE       sonic-cfggen -j FILE --write-to-db: ConfigDBConnector.mod_config, every
                            key's fields set, the key's other fields kept, nothing deleted
  config apply-patch FILE   generic_config_updater: RFC 6902 on the whole running config, all or
                            nothing (an op whose parent is missing fails the patch, nothing written);
  config apply-patch --dry-run FILE   the same, prints the result, writes nothing
  config checkpoint NAME / rollback NAME / delete-checkpoint NAME   GCU checkpoints of the running config
  config save -y            running -> saved
  sonic-cfggen -d --print-data   prints the running config
$FAKE_SONIC_FAIL=apply: `config load` writes its first table then exits 1 (a half-applied load),
`config apply-patch` exits 1 without writing (GCU is atomic). Every call goes to calls.log.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("FAKE_SONIC_STATE", "/tmp/fake-sonic"))


def log(argv: list[str]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.log", "a") as f:
        f.write(" ".join(argv) + "\n")


def read(name: str = "running.json") -> dict[str, Any]:
    p = STATE / name
    return json.loads(p.read_text()) if p.exists() else {}


def write(db: dict[str, Any], name: str = "running.json") -> None:
    p = STATE / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(db, indent=2, sort_keys=True))


def die(msg: str) -> None:
    print(msg, file=sys.stderr)
    sys.exit(1)


def patched(db: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(db)
    for i, op in enumerate(ops):
        if op.get("op") != "add":
            die(f"Error: patch[{i}]: only add is simulated")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for p in parts[:-1]:
            if not isinstance(node, dict) or p not in node:
                die(f"Error: Failed to apply patch: can't replace a non-existent object '{p}' ({op['path']})")
            node = node[p]
        node[parts[-1]] = copy.deepcopy(op["value"])
    return out
