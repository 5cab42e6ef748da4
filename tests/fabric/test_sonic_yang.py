"""SONiC rendering against what a switch does with it: from SONiC's own default QoS/buffer config of
several platforms (sonic-config-engine sample outputs, ../shared/vendor/sonic-yang/defaults), `config
load` of the rendered config_db and `config apply-patch` of the rendered patch must end in the same
state, that state must be valid for SONiC's YANG models (yanglint), and the lossless classes must be
lossless in it (egress lossless buffer, PG mapping, PFC). Skips with the reason where the vendored
models or yanglint are absent."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fabric.golden_files import INTENTS
from fabric.sonic_switch import PLATFORMS, apply_patch, config_load, platform_default
from fabric.sonic_yang import skip_reason, validate

from geryon.fabric.intent import IntentError, QosIntent, default_intent, load_intent
from geryon.fabric.render import sonic

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

ROOT = Path(__file__).resolve().parents[2]
ALL_INTENTS = sorted((ROOT / "switch-configs" / "intents").glob("*.yaml")) + sorted(INTENTS.glob("*.yaml"))
# A switch that ran `pfcwd start_default` at boot (DEVICE_METADATA default_pfcwd_status enable) has a
# PFC_WD table: the patch must then add per key, not replace the table.
VARIANTS = [*PLATFORMS, "mellanox-sn4600c+pfcwd"]


def _base(variant: str) -> dict[str, Any]:
    platform, _, extra = variant.partition("+")
    db = platform_default(platform)
    if extra == "pfcwd":
        db["PFC_WD"] = {"GLOBAL": {"POLL_INTERVAL": "200"}}
        for port in db["PORT"]:
            db["PFC_WD"][port] = {"action": "drop", "detection_time": "200", "restoration_time": "200"}
    return db


def _ports(base: dict[str, Any]) -> list[str]:
    return list(base["PORT"])[:4]


def _lossless_problems(intent: QosIntent, state: dict[str, Any], ports: list[str]) -> list[str]:
    """Every lossless class on every port: PFC on its priority, an egress lossless buffer on its queue,
    its priority mapped to its own PG and (dynamic model) a lossless BUFFER_PG row for that PG."""
    out = []
    dynamic = state.get("DEVICE_METADATA", {}).get("localhost", {}).get("buffer_model") == "dynamic"
    for port in ports:
        pqm = state["PORT_QOS_MAP"][port]
        pg_map = state["TC_TO_PRIORITY_GROUP_MAP"][pqm["tc_to_pg_map"]]
        for c in (c for c in intent.classes if c.lossless):
            if str(c.priority) not in pqm["pfc_enable"].split(","):
                out.append(f"{port}: PFC off on priority {c.priority}")
            if pg_map.get(str(c.priority)) != str(c.priority):
                out.append(f"{port}: priority {c.priority} not on its own PG")
            if "pfc_to_pg_map" in pqm:
                pfc_pg = state["PFC_PRIORITY_TO_PRIORITY_GROUP_MAP"][pqm["pfc_to_pg_map"]]
                if pfc_pg.get(str(c.priority)) != str(c.priority):
                    out.append(f"{port}: pfc_to_pg_map does not map {c.priority}")
            queues = [
                r["profile"]
                for k, r in state["BUFFER_QUEUE"].items()
                if k.partition("|")[0] == port and c.queue in sonic._indices(k.partition("|")[2])
            ]
            if queues != [sonic.EGRESS_LOSSLESS]:
                out.append(f"{port}: queue {c.queue} egress buffers {queues}")
            if dynamic:
                pgs = [
                    r["profile"]
                    for k, r in state["BUFFER_PG"].items()
                    if k.partition("|")[0] == port and c.priority in sonic._indices(k.partition("|")[2])
                ]
                if pgs != ["NULL"]:
                    out.append(f"{port}: PG {c.priority} ingress buffers {pgs} (want NULL: dynamic headroom)")
    return out


def _intent_for(path: Path, base: dict[str, Any]) -> QosIntent:
    intent = load_intent(path)
    # the buffer model follows the switch (an intent saying the other one is refused, tested below)
    intent = dataclasses.replace(
        intent, platform=dataclasses.replace(intent.platform, sonic_buffer_model=None)
    )
    try:
        sonic.document(intent, _ports(base), base)
    except IntentError as e:  # an intent SONiC refuses anyway (e.g. lossless priority 0)
        pytest.skip(f"{path.stem}: {e}")
    return intent


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("intent_path", ALL_INTENTS, ids=lambda p: p.stem)
def test_load_and_patch_end_equal_valid_and_lossless(variant: str, intent_path: Path) -> None:
    base = _base(variant)
    intent = _intent_for(intent_path, base)
    ports = _ports(base)
    doc = sonic.document(intent, ports, base)
    loaded = config_load(base, doc["config_db"])
    patched = apply_patch(base, doc["patch"])
    assert loaded == patched, _diff(loaded, patched)
    assert validate(loaded) == ""
    assert _lossless_problems(intent, loaded, ports) == []
    assert doc["pending"]  # SONiC's default never already is Geryon's config
    # Rendering against the new state changes nothing: a second run is a no-op.
    again = sonic.document(intent, ports, loaded)
    assert again["pending"] == []
    assert config_load(loaded, again["config_db"]) == loaded == apply_patch(loaded, again["patch"])


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    out = []
    for t in sorted(set(a) | set(b)):
        for k in sorted(set(a.get(t, {})) | set(b.get(t, {}))):
            if a.get(t, {}).get(k) != b.get(t, {}).get(k):
                out.append(f"{t}|{k}: load {a.get(t, {}).get(k)} patch {b.get(t, {}).get(k)}")
    return f"{len(out)} keys differ: " + "; ".join(out[:8])


@pytest.mark.parametrize("variant", ["mellanox-sn4600c", "mellanox-sn4600c-dynamic"])
def test_the_rendering_without_base_fits_sonics_mellanox_default(variant: str) -> None:
    """The committed renderings (no --base) assume SONiC's default Mellanox config."""
    base = _base(variant)
    model = "dynamic" if variant.endswith("dynamic") else "static"
    for path in sorted((ROOT / "switch-configs" / "intents").glob("*.yaml")):
        intent = load_intent(path)
        intent = dataclasses.replace(
            intent, platform=dataclasses.replace(intent.platform, sonic_buffer_model=model)
        )
        ports = _ports(base)
        doc = sonic.document(intent, ports)
        loaded = config_load(base, doc["config_db"])
        assert loaded == apply_patch(base, doc["patch"]), path.stem
        assert validate(loaded) == "", path.stem
        assert _lossless_problems(intent, loaded, ports) == [], path.stem


def test_pfc_to_pg_map_only_where_the_switch_has_the_table() -> None:
    """Mellanox/Barefoot templates write PFC_PRIORITY_TO_PRIORITY_GROUP_MAP AZURE {3:3, 4:4}; then
    priority 5 needs its own map; elsewhere (Broadcom) the SAI does not take it."""
    base = _base("mellanox-sn4600c")
    ports = _ports(base)
    assert (
        "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP" not in sonic.document(default_intent(), ports, base)["config_db"]
    )
    base["PFC_PRIORITY_TO_PRIORITY_GROUP_MAP"] = {"AZURE": {"3": "3", "4": "4"}}
    for p in base["PORT_QOS_MAP"]:
        if p != "global":
            base["PORT_QOS_MAP"][p]["pfc_to_pg_map"] = "AZURE"
    doc = sonic.document(default_intent(), ports, base)
    loaded = config_load(base, doc["config_db"])
    assert loaded == apply_patch(base, doc["patch"])
    assert validate(loaded) == ""
    assert _lossless_problems(default_intent(), loaded, ports) == []
    assert loaded["PFC_PRIORITY_TO_PRIORITY_GROUP_MAP"]["GERYON"]["5"] == "5"
    assert {loaded["PORT_QOS_MAP"][p]["pfc_to_pg_map"] for p in ports} == {"GERYON"}


def test_patch_shapes_follow_the_base() -> None:
    base = _base("mellanox-sn4600c")
    ports = _ports(base)
    paths = [
        op["path"]
        for op in sonic.document(load_intent(ROOT / "switch-configs/intents/roce-ecn.yaml"), ports, base)[
            "patch"
        ]
    ]
    assert "/PFC_WD" in paths  # no table on the switch: added whole
    assert f"/CABLE_LENGTH/AZURE/{ports[0]}" in paths and "/CABLE_LENGTH/AZURE" not in paths
    with_wd = _base("mellanox-sn4600c+pfcwd")
    paths = [op["path"] for op in sonic.document(default_intent(), ports, with_wd)["patch"]]
    assert "/PFC_WD" not in paths and f"/PFC_WD/{ports[0]}" in paths and "/PFC_WD/GLOBAL" in paths


def test_base_errors_name_the_field() -> None:
    base = _base("mellanox-sn4600c-dynamic")
    with pytest.raises(IntentError, match=r"ports: Ethernet400 not on the switch"):
        sonic.document(default_intent(), ["Ethernet400"], base)
    static = dataclasses.replace(
        default_intent(), platform=dataclasses.replace(default_intent().platform, sonic_buffer_model="static")
    )
    with pytest.raises(IntentError, match=r"platform.sonic_buffer_model: 'static', but the switch"):
        sonic.document(static, _ports(base), base)


BROKEN = [
    ("SCHEDULER", "GERYON_urgent", "type", "PRIORITY", 'Invalid enumeration value "PRIORITY"'),
    ("QUEUE", "{port}|5", "wred_profile", "GHOST", 'Invalid leafref value "GHOST"'),
    ("BUFFER_QUEUE", "{port}|5-7", "profile", "lossless_ghost", 'Invalid leafref value "lossless_ghost"'),
    ("PORT_QOS_MAP", "{port}", "pfc_enable", "3;5", 'Unsatisfied pattern - "3;5"'),
]


@pytest.mark.parametrize(("table", "key", "field", "value", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_yanglint_rejects_a_broken_render(table: str, key: str, field: str, value: str, message: str) -> None:
    base = _base("mellanox-sn4600c")
    port = _ports(base)[0]
    doc = copy.deepcopy(sonic.document(default_intent(), _ports(base), base))
    doc["config_db"][table][key.format(port=port)][field] = value
    assert message in validate(config_load(base, doc["config_db"]))


def test_a_global_poll_interval_above_another_ports_watchdog_is_refused() -> None:
    base = _base("mellanox-sn4600c+pfcwd")  # every port: detection_time 200
    edge = load_intent(INTENTS / "edge.yaml")
    assert edge.pfc_watchdog.poll_ms > 200
    with pytest.raises(
        IntentError, match=r"pfc_watchdog.poll_interval: \d+ ms is above the switch's PFC_WD\|"
    ):
        sonic.document(edge, _ports(base), base)
