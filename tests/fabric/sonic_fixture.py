"""SONiC config_db builders for the consistency tests (written here from notes/roce-qos.md, not copied)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
# SONiC's default QoS template, written from the facts in notes/roce-qos.md: DSCP 3->3, 4->4, 46->5,
# 48->6, 8->0, every other DSCP (26 included) -> TC 1; lossless TCs 3,4; all queues DWRR.
SONIC_DEFAULT = FIXTURES / "sonic_default_config_db.json"


def sonic_default() -> dict[str, Any]:
    return json.loads(SONIC_DEFAULT.read_text())


def geryon_config_db(ports: tuple[str, ...] = ("Ethernet0", "Ethernet4")) -> dict[str, Any]:
    """A config_db that agrees with default_intent(): 46->5 strict, 26->3 DWRR, 48->6 strict, rest->3."""
    dscp = {str(d): "3" for d in range(64)}
    dscp.update({"46": "5", "26": "3", "48": "6"})
    key = ",".join(ports)
    return copy.deepcopy(
        {
            "DSCP_TO_TC_MAP": {"GERYON": dscp},
            "TC_TO_QUEUE_MAP": {"GERYON": {str(t): str(t) for t in range(8)}},
            # lossless TCs 3 and 5 on their own PGs, the rest on the lossy PG 0
            "TC_TO_PRIORITY_GROUP_MAP": {"GERYON": {str(t): str(t if t in (3, 5) else 0) for t in range(8)}},
            "SCHEDULER": {
                "GERYON_STRICT": {"type": "STRICT"},
                "GERYON_DWRR_bulk": {"type": "DWRR", "weight": "100"},
            },
            "PORT_QOS_MAP": {
                p: {
                    "dscp_to_tc_map": "GERYON",
                    "tc_to_queue_map": "GERYON",
                    "tc_to_pg_map": "GERYON",
                    "pfc_enable": "3,5",
                }
                for p in ports
            },
            "QUEUE": {
                f"{key}|5-6": {"scheduler": "GERYON_STRICT"},
                f"{key}|3": {"scheduler": "GERYON_DWRR_bulk"},
            },
        }
    )
