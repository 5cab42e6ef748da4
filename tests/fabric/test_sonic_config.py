"""Parsing SONiC config_db files into the effective QoS per port."""

from __future__ import annotations

import json

import pytest
from fabric.sonic_fixture import SONIC_DEFAULT, geryon_config_db, sonic_default

from geryon.fabric.check import Scheduler
from geryon.fabric.sonic_config import SonicConfigError, load_sonic_config, parse_sonic_config


def test_sonic_default_template_effective_qos():
    sw = load_sonic_config(SONIC_DEFAULT)
    assert sw.source == f"sonic config_db {SONIC_DEFAULT}"
    assert sorted(sw.ports) == ["Ethernet0", "Ethernet12", "Ethernet4", "Ethernet8"]
    p = sw.ports["Ethernet4"]
    assert [p.tc_of(d) for d in (3, 4, 46, 48, 8, 26, 0, 63)] == [3, 4, 5, 6, 0, 1, 1, 1]
    assert p.queue_of(1) == 1 and p.pfc_enable == frozenset({3, 4})
    assert p.schedulers[3] == Scheduler("dwrr", 15) and p.schedulers[1] == Scheduler("dwrr", 14)
    assert 7 not in p.schedulers  # no QUEUE entry: no scheduler configured
    assert p.dscp_map == "DSCP_TO_TC_MAP|AZURE"
    assert len(sw.groups()) == 1  # one template on every port


def test_plain_names_ranges_and_port_lists():
    sw = parse_sonic_config(geryon_config_db(("Ethernet0", "Ethernet4")))
    p = sw.ports["Ethernet0"]
    assert p.schedulers == {5: Scheduler("strict"), 6: Scheduler("strict"), 3: Scheduler("dwrr", 100)}
    assert p.tc_of(26) == 3 and p.tc_of(46) == 5 and p.pfc_enable == frozenset({3, 5})


def test_global_dscp_map_and_sai_defaults():
    db = geryon_config_db(("Ethernet0",))
    db["PORT_QOS_MAP"] = {"global": {"dscp_to_tc_map": "GERYON"}, "Ethernet0": {}}
    db["PORT"] = {"Ethernet0": {}, "Ethernet4": {}}
    sw = parse_sonic_config(db)
    assert sw.ports["Ethernet0"].tc_of(46) == 5  # from the global map
    e4 = sw.ports["Ethernet4"]  # listed in PORT only: global map, no PFC, TC n -> queue n
    assert e4.tc_of(46) == 5 and e4.pfc_enable == frozenset() and e4.queue_of(6) == 6
    db["PORT_QOS_MAP"] = {"Ethernet0": {}}
    assert parse_sonic_config(db).ports["Ethernet0"].tc_of(46) is None  # no map at all: SAI default TC 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda db: db["PORT_QOS_MAP"]["Ethernet0"].update(dscp_to_tc_map="NOPE"),
            "PORT_QOS_MAP|Ethernet0.dscp_to_tc_map: 'NOPE' is not in DSCP_TO_TC_MAP (have: GERYON)",
        ),
        (
            lambda db: db["PORT_QOS_MAP"]["Ethernet0"].update(tc_to_queue_map="[DSCP_TO_TC_MAP|GERYON]"),
            "PORT_QOS_MAP|Ethernet0.tc_to_queue_map: '[DSCP_TO_TC_MAP|GERYON]' refers to DSCP_TO_TC_MAP",
        ),
        (
            lambda db: db["PORT_QOS_MAP"]["Ethernet0"].update(pfc_enable="3,9"),
            "PORT_QOS_MAP|Ethernet0.pfc_enable: 9 is outside 0-7",
        ),
        (
            lambda db: db["DSCP_TO_TC_MAP"]["GERYON"].update({"64": "1"}),
            "DSCP_TO_TC_MAP|GERYON key: 64 is outside 0-63",
        ),
        (
            lambda db: db["DSCP_TO_TC_MAP"]["GERYON"].update({"7": "x"}),
            "DSCP_TO_TC_MAP|GERYON.7: 'x' is not a number",
        ),
        (
            lambda db: db["SCHEDULER"]["GERYON_STRICT"].update(type="FAIR"),
            "SCHEDULER|GERYON_STRICT.type: 'FAIR'",
        ),
        (
            lambda db: db["QUEUE"].update({"Ethernet0|4-2": {"scheduler": "GERYON_STRICT"}}),
            "QUEUE|Ethernet0|4-2: range '4-2' runs backwards",
        ),
        (
            lambda db: db["QUEUE"].update({"3": {"scheduler": "GERYON_STRICT"}}),
            "QUEUE|3: expected a key PORTS|QUEUES",
        ),
        (lambda db: db.update(PORT_QOS_MAP={}), "PORT_QOS_MAP: no port has a QoS map"),
        (lambda db: db.update(SCHEDULER=[]), "SCHEDULER: expected an object keyed by name, got list"),
    ],
)
def test_bad_config_names_the_field(mutate, message):
    db = geryon_config_db(("Ethernet0",))
    mutate(db)
    with pytest.raises(SonicConfigError) as e:
        parse_sonic_config(db)
    assert message in str(e.value)


def test_bad_files(tmp_path):
    with pytest.raises(SonicConfigError, match="cannot read"):
        load_sonic_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'DSCP_TO_TC_MAP': 1\n}")
    with pytest.raises(SonicConfigError, match=r"bad.json: not JSON \(line 2"):
        load_sonic_config(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(SonicConfigError, match="expected a JSON object of tables, got list"):
        load_sonic_config(bad)
    assert sonic_default()["PORT_QOS_MAP"]  # the fixture itself is a valid config_db
