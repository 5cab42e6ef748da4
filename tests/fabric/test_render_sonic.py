"""SONiC renderer: golden files, and structural checks against the YANG enumerations and the apply
order for every committed and golden intent; the checker itself must catch broken configs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fabric.golden_files import INTENTS, check_golden

from geryon.fabric.intent import IntentError, QosIntent, default_intent, load_intent, parse_intent
from geryon.fabric.render import sonic

ROOT = Path(__file__).resolve().parents[2]
ALL_INTENTS = sorted((ROOT / "switch-configs" / "intents").glob("*.yaml")) + sorted(INTENTS.glob("*.yaml"))


def test_golden() -> None:
    assert len(check_golden("sonic")) >= 3


@pytest.fixture(params=ALL_INTENTS, ids=lambda p: p.stem)
def rendered(request: pytest.FixtureRequest) -> tuple[QosIntent, dict[str, Any]]:
    intent = load_intent(request.param)
    return intent, json.loads(sonic.render(intent))


def test_structure_is_valid(rendered: tuple[QosIntent, dict[str, Any]]) -> None:
    intent, doc = rendered
    assert sonic.check_document(doc) == []
    db = doc["config_db"]
    assert (
        set(doc) == {"intent", "base", "apply_order", "config_db", "patch"} and doc["intent"] == intent.name
    )
    assert doc["apply_order"] == [t for t in sonic.APPLY_ORDER if t in db]
    for row in db["SCHEDULER"].values():
        assert row["type"] in ("STRICT", "DWRR", "WRR")
    for row in db["PORT_QOS_MAP"].values():
        assert row["pfc_enable"] == ",".join(str(p) for p in intent.lossless_priorities)
        assert row["dscp_to_tc_map"] == intent.map_name != "AZURE"
    ports = intent.ports_for("sonic")
    assert sorted(db["PORT_QOS_MAP"]) == sorted(ports)
    if intent.pfc_watchdog.enabled:
        assert db["PFC_WD"]["GLOBAL"] == {"POLL_INTERVAL": str(intent.pfc_watchdog.poll_ms)}
        assert {r["action"] for p, r in db["PFC_WD"].items() if p != "GLOBAL"} == {intent.pfc_watchdog.action}
    else:
        assert "PFC_WD" not in db


def test_maps_say_what_the_intent_says(rendered: tuple[QosIntent, dict[str, Any]]) -> None:
    intent, doc = rendered
    db = doc["config_db"]
    m = intent.map_name
    dscp_tc = {int(d): int(tc) for d, tc in db["DSCP_TO_TC_MAP"][m].items()}
    tc_q = {int(tc): int(q) for tc, q in db["TC_TO_QUEUE_MAP"][m].items()}
    assert sorted(dscp_tc) == list(range(64))
    for dscp in range(64):
        c = intent.class_of_dscp(dscp)
        if c is None and intent.cnp is not None and dscp == intent.cnp.dscp:
            want_q = intent.cnp.queue
        else:
            want_q = (c or intent.unmatched_class).queue
        assert tc_q[dscp_tc[dscp]] == want_q, dscp
    for port in intent.ports_for("sonic"):
        for c in intent.classes:
            q = db["QUEUE"][f"{port}|{c.queue}"]
            sched = db["SCHEDULER"][q["scheduler"]]
            assert sched["type"] == ("STRICT" if c.scheduler == "strict" else "DWRR")
            if c.weight is not None:
                assert sched["weight"] == str(c.weight)
            # every queue names a WRED profile (load and apply-patch must end equal): all-off without ECN
            if c.ecn is None:
                assert db["WRED_PROFILE"][q["wred_profile"]] == sonic.NO_WRED
            else:
                wred = db["WRED_PROFILE"][q["wred_profile"]]
                assert wred["ecn"] == ("ecn_all" if c.ecn.mode == "mark" else "ecn_none")
                assert wred["green_min_threshold"] == str(c.ecn.min_bytes)
    pg = {int(k): int(v) for k, v in db["TC_TO_PRIORITY_GROUP_MAP"][m].items()}
    assert {p for p, g in pg.items() if g != 0} == set(intent.lossless_priorities)


def test_patch_rebuilds_the_config_db_in_apply_order(rendered: tuple[QosIntent, dict[str, Any]]) -> None:
    _, doc = rendered
    built: dict[str, dict[str, Any]] = {}
    for op in doc["patch"]:
        _, table, *rest = op["path"].split("/")
        if not rest:  # a table the switch lacks (PFC_WD on SONiC's default): added whole
            built[table] = op["value"]
        elif len(rest) == 1:
            built.setdefault(table, {})[rest[0]] = op["value"]
        else:  # CABLE_LENGTH per port, never the whole AZURE key
            assert table == "CABLE_LENGTH", op
            built.setdefault(table, {}).setdefault(rest[0], {})[rest[1]] = op["value"]
    assert built == doc["config_db"]
    tables = [op["path"].split("/")[1] for op in doc["patch"]]
    first = {t: tables.index(t) for t in set(tables)}
    last = {t: len(tables) - 1 - tables[::-1].index(t) for t in set(tables)}
    for before, after in [
        ("SCHEDULER", "QUEUE"),
        ("DSCP_TO_TC_MAP", "PORT_QOS_MAP"),
        ("PORT_QOS_MAP", "PFC_WD"),
    ]:
        if before in first and after in first:
            assert last[before] < first[after], (before, after)


def test_default_intent_fixes_sonics_lossy_dscp_26() -> None:
    # SONiC's own AZURE map sends DSCP 26 to the lossy TC 1; Geryon's map sends it to lossless TC 3.
    doc = sonic.document(default_intent(), ["Ethernet0"])
    db = doc["config_db"]
    assert db["DSCP_TO_TC_MAP"]["GERYON"]["26"] == "3" and "AZURE" not in db["DSCP_TO_TC_MAP"]
    assert db["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3,5"
    assert db["QUEUE"]["Ethernet0|6"] == {"scheduler": "GERYON_cnp", "wred_profile": "GERYON_NO_WRED"}
    # the urgent lossless queue 5 gets the egress lossless buffer (SONiC's default: queues 3-4 only)
    assert db["BUFFER_QUEUE"]["Ethernet0|5-7"] == {"profile": "egress_lossless_profile"}
    assert db["PORT_QOS_MAP"]["Ethernet0"]["pfcwd_sw_enable"] == "3,5"


def test_lossless_priority_zero_is_refused() -> None:
    intent = parse_intent(
        {"name": "z", "cnp": None, "classes": [{"name": "a", "dscp": 1, "priority": 0, "lossless": True}]}
    )
    with pytest.raises(IntentError, match=r"classes\[0\]\.priority: 0 cannot be lossless on SONiC"):
        sonic.render(intent, "Ethernet0")


def test_ports_are_required_and_checked() -> None:
    intent = parse_intent({"name": "p", "classes": [{"name": "a", "dscp": 1, "priority": 1}]})
    with pytest.raises(IntentError, match="ports: no sonic ports"):
        sonic.render(intent)
    with pytest.raises(IntentError, match="'swp1' is not a port selection for sonic"):
        sonic.render(intent, "swp1")


def _mutate(path: str, value: Any, *, delete: bool = False) -> dict[str, Any]:
    doc = sonic.document(load_intent(ROOT / "switch-configs" / "intents" / "roce-ecn.yaml"), ["Ethernet0"])
    doc = copy.deepcopy(doc)
    node = doc["config_db"]
    *parents, leaf = path.split("/")
    for p in parents:
        node = node[p]
    if delete:
        del node[leaf]
    else:
        node[leaf] = value
    return doc


BROKEN = [
    ("SCHEDULER/GERYON_bulk/type", "PRIORITY", "type 'PRIORITY' not in STRICT|DWRR|WRR"),
    ("SCHEDULER/GERYON_bulk/weight", "0", "SCHEDULER|GERYON_bulk|weight: 0 is outside 1-100"),
    ("SCHEDULER/GERYON_bulk/meter_type", "bits", "meter_type 'bits' not in packets|bytes"),
    ("SCHEDULER/GERYON_urgent/weight", "5", "a STRICT scheduler has no weight"),
    ("PORT_QOS_MAP/Ethernet0/pfc_enable", "3;5", "pfc_enable '3;5' is not a list like '3,4'"),
    ("PORT_QOS_MAP/Ethernet0/dscp_to_tc_map", "NOPE", "dscp_to_tc_map 'NOPE' is not in DSCP_TO_TC_MAP"),
    ("PFC_WD/Ethernet0/detection_time", "50", "PFC_WD|Ethernet0|detection_time: 50 is outside 100-5000"),
    ("PFC_WD/Ethernet0/action", "reboot", "action 'reboot' not in drop|forward|alert"),
    ("PFC_WD/GLOBAL/POLL_INTERVAL", "2000", "POLL_INTERVAL: 2000 is outside 100-1000"),
    ("PFC_WD/GLOBAL/POLL_INTERVAL", "900", "detection_time 400 is below POLL_INTERVAL 900"),
    ("QUEUE/Ethernet0|3/scheduler", "GHOST", "scheduler 'GHOST' is not in SCHEDULER"),
    (
        "WRED_PROFILE/GERYON_bulk/green_max_threshold",
        "1",
        "green_max_threshold 1 is below green_min_threshold",
    ),
    ("WRED_PROFILE/GERYON_bulk/ecn", "ecn_sometimes", "ecn 'ecn_sometimes' not a YANG ecn mode"),
    ("WRED_PROFILE/GERYON_bulk/wred_green_enable", "yes", "'yes' is not true|false"),
    ("DSCP_TO_TC_MAP/GERYON/64", "0", "DSCP_TO_TC_MAP|GERYON|64: not a DSCP 0-63"),
    ("TC_TO_QUEUE_MAP/GERYON/3", "9", "TC_TO_QUEUE_MAP|GERYON|3: 9 is outside 0-7"),
    ("CABLE_LENGTH/AZURE/Ethernet0", "5 meters", "'5 meters' is not a length like 5m"),
]


@pytest.mark.parametrize(("path", "value", "message"), BROKEN, ids=[b[0] + "=" + b[1] for b in BROKEN])
def test_checker_catches_broken_configs(path: str, value: Any, message: str) -> None:
    problems = sonic.check_document(_mutate(path, value))
    assert any(message in p for p in problems), problems


def test_checker_catches_a_watchdog_without_pfc_and_a_bad_apply_order() -> None:
    doc = _mutate("PORT_QOS_MAP/Ethernet0/pfc_enable", "")
    assert any("a watchdog on a port without PFC" in p for p in sonic.check_document(doc))
    doc = sonic.document(default_intent(), ["Ethernet0"])
    wd = [op for op in doc["patch"] if op["path"].startswith("/PFC_WD")]
    rest = [op for op in doc["patch"] if not op["path"].startswith("/PFC_WD")]
    problems = sonic.check_patch_order(wd + rest)
    assert any("DSCP_TO_TC_MAP after PFC_WD" in p for p in problems), problems
    assert sonic.check_patch_order([{"op": "remove", "path": "/QUEUE/x"}])[0].startswith(
        "patch[0]: not an add of a table"
    )
