"""Host/intent/switch consistency (pure logic): every kind of mismatch, and none when all agree."""

from __future__ import annotations

from typing import Any

from fabric.sonic_fixture import geryon_config_db, sonic_default

from geryon.agent.config import parse_config
from geryon.fabric.check import check
from geryon.fabric.intent import default_intent, parse_intent
from geryon.fabric.sonic_config import parse_sonic_config


def host(**kw: Any):
    return parse_config({"interfaces": ["eth0"], **kw})


def lines(ms) -> list[str]:
    return [m.line() for m in ms]


HOST_CLASSES = [
    {"name": "urgent", "dscp": 46, "priority": 5, "lossless": True, "tsa": "strict"},
    {"name": "bulk", "dscp": 26, "priority": 3, "lossless": True, "tsa": "ets", "bandwidth": 50},
]


def host_classes(**bulk: Any) -> list[dict[str, Any]]:
    return [HOST_CLASSES[0], {**HOST_CLASSES[1], **bulk}]


def test_defaults_agree_with_and_without_a_matching_switch_config():
    assert check(host(), default_intent()) == []
    assert check(host(), default_intent(), parse_sonic_config(geryon_config_db())) == []


def test_sonic_default_template_names_dscp_26_on_lossy_queue_1():
    out = lines(check(host(), default_intent(), parse_sonic_config(sonic_default())))
    ports = "switch Ethernet0,Ethernet4,Ethernet8,Ethernet12"
    both = "(intent class 'bulk', host class 'bulk')"
    assert (
        f"priority: {ports} DSCP 26 {both}: expected TC 3, found TC 1 -> queue 1 (DSCP_TO_TC_MAP|AZURE)"
        in out
    )
    assert (
        f"lossless: {ports} DSCP 26 {both}: expected lossless (PFC), found TC 1 (queue 1) is lossy "
        "(pfc_enable: 3,4)"
    ) in out
    urgent = "(intent class 'urgent', host class 'urgent')"
    assert (
        f"scheduler: {ports} DSCP 46 {urgent}: expected queue 5 STRICT, found queue 5 DWRR weight 14" in out
    )
    assert f"lossless: {ports} DSCP 46 {urgent}: expected lossless (PFC), found TC 5 (queue 5) is lossy " in (
        "\n".join(out)
    )
    assert any(x.startswith(f"scheduler: {ports} DSCP 48 (intent CNP, host CNP)") for x in out)
    assert any(x.startswith(f"unmatched: {ports} DSCPs no intent class names") for x in out)
    # TC 1 (where DSCP 26 lands) and TC 5 share the lossy PG 0 in AZURE's tc_to_pg_map
    assert (
        f"pg: {ports} DSCP 26 {both}: expected TC 1 on its own lossless PG (tc_to_pg_map), "
        "found TC 1 -> PG 0, the lossy PG" in out
    )
    assert (
        f"pg: {ports} DSCP 46 {urgent}: expected TC 5 on its own lossless PG (tc_to_pg_map), "
        "found TC 5 -> PG 0, the lossy PG" in out
    )
    assert len(out) == 8, out


def test_a_lossless_class_needs_an_egress_lossless_buffer_and_its_own_pg():
    db = geryon_config_db()
    db["BUFFER_PROFILE"] = {
        "egress_lossless_profile": {"pool": "egress_lossless_pool", "size": "0"},
        "q_lossy_profile": {"pool": "egress_lossy_pool", "size": "0"},
    }
    # SONiC's default buffer template: queues 3-4 lossless, 5-7 lossy (the urgent queue 5 included)
    db["BUFFER_QUEUE"] = {
        f"{p}|{q}": {"profile": prof}
        for p in ("Ethernet0", "Ethernet4")
        for q, prof in (
            ("0-2", "q_lossy_profile"),
            ("3-4", "egress_lossless_profile"),
            ("5-7", "q_lossy_profile"),
        )
    }
    out = lines(check(host(), default_intent(), parse_sonic_config(db)))
    urgent = "(intent class 'urgent', host class 'urgent')"
    assert out == [
        f"buffer: switch Ethernet0,Ethernet4 DSCP 46 {urgent}: expected queue 5 with an egress lossless "
        "buffer profile (BUFFER_QUEUE), found queue 5 has a lossy or no egress buffer (lossless queues: 3,4)"
    ]
    db["BUFFER_QUEUE"]["Ethernet0|5-7"] = db["BUFFER_QUEUE"]["Ethernet4|5-7"] = {
        "profile": "egress_lossless_profile"
    }
    assert check(host(), default_intent(), parse_sonic_config(db)) == []
    # Mellanox's pfc_to_pg_map: AZURE binds 3 and 4 only
    db["PFC_PRIORITY_TO_PRIORITY_GROUP_MAP"] = {"AZURE": {"3": "3", "4": "4"}}
    for row in db["PORT_QOS_MAP"].values():
        row["pfc_to_pg_map"] = "AZURE"
    out = lines(check(host(), default_intent(), parse_sonic_config(db)))
    assert out == [
        f"pg: switch Ethernet0,Ethernet4 DSCP 46 {urgent}: expected PFC priority 5 in pfc_to_pg_map, found "
        "pfc_to_pg_map has no priority 5"
    ]
    # a port without tc_to_pg_map has SAI's default: every TC on PG 0
    for row in db["PORT_QOS_MAP"].values():
        del row["tc_to_pg_map"]
    assert (
        sum(
            x.startswith("pg: ") and "found TC 3 -> no PG" in x
            for x in lines(check(host(), default_intent(), parse_sonic_config(db)))
        )
        == 1
    )


def test_the_sonic_rendering_passes_its_own_check():
    from geryon.fabric.render import sonic

    doc = sonic.document(default_intent(), ["Ethernet0", "Ethernet4"])
    assert check(host(), default_intent(), parse_sonic_config(doc)) == []


def test_host_priority_differs_from_intent():
    out = lines(check(host(classes=host_classes(priority=4)), default_intent()))
    assert (
        "priority: host classes[1] 'bulk' DSCP 26: expected priority 3 (intent class 'bulk'), "
        "found priority 4 on the host" in out
    )
    # PFC is per priority: the host pauses 4, the switch 3.
    assert any(
        x.startswith("lossless: priority 3: ") and "host lossy (no PFC), intent lossless" in x for x in out
    )
    assert any(
        x.startswith("lossless: priority 4: ") and "host lossless (PFC on), intent lossy" in x for x in out
    )
    assert len(out) == 3


def test_host_lossy_where_intent_is_lossless():
    out = lines(check(host(classes=host_classes(lossless=False)), default_intent()))
    assert out == [
        "lossless: priority 3: expected lossless on host and switch alike (PFC on both, or on neither), "
        "found host lossy (no PFC), intent lossless"
    ]


def test_host_cnp_differs_or_is_unset():
    assert lines(check(host(cnp={"dscp": 56, "priority": 7}), default_intent())) == [
        "cnp: host cnp: expected DSCP 48 priority 6 (intent), found DSCP 56 priority 7"
    ]
    (m,) = check(host(cnp=None), default_intent())
    assert m.kind == "cnp" and "cnp: null" in m.found


def test_strict_host_class_on_a_dwrr_intent_queue():
    strict_bulk = {k: v for k, v in HOST_CLASSES[1].items() if k != "bandwidth"} | {"tsa": "strict"}
    h = host(classes=[HOST_CLASSES[0], strict_bulk], best_effort_bandwidth=100)
    out = lines(check(h, default_intent()))
    assert out == [
        "scheduler: host classes[1] 'bulk' DSCP 26: expected a strict switch queue "
        "(the host class is strict), found intent class 'bulk' queue 3 is DWRR"
    ]


def test_host_dscp_the_intent_does_not_name():
    out = check(host(classes=host_classes(extra_dscp=[10])), default_intent())
    (m,) = out
    assert (m.kind, m.where) == ("unmapped", "host classes[1] 'bulk' DSCP 10")
    assert "intent class 'bulk', priority 3, lossless" in m.found
    # On a switch whose map omits DSCP 10, it falls to the SAI default TC 0, which is lossy.
    db = geryon_config_db()
    del db["DSCP_TO_TC_MAP"]["GERYON"]["10"]
    out = lines(check(host(classes=host_classes(extra_dscp=[10])), default_intent(), parse_sonic_config(db)))
    assert (
        "unmapped: switch Ethernet0,Ethernet4 DSCP 10 (host class 'bulk'): expected TC 3, "
        "found DSCP 10 not in DSCP_TO_TC_MAP|GERYON: default TC 0 -> queue 0"
    ) in out
    assert (
        "lossless: switch Ethernet0,Ethernet4 DSCP 10 (host class 'bulk'): expected lossless (PFC), "
        "found TC 0 (queue 0) is lossy (pfc_enable: 3,5)"
    ) in out


def test_switch_queue_and_lossy_vice_versa():
    db = geryon_config_db()
    db["TC_TO_QUEUE_MAP"]["GERYON"]["3"] = "2"
    out = lines(check(host(), default_intent(), parse_sonic_config(db)))
    assert (
        "queue: switch Ethernet0,Ethernet4 DSCP 26 (intent class 'bulk'): expected TC 3 -> queue 3, "
        "found TC 3 -> queue 2" in out
    )
    # A lossy intent + host class whose TC has PFC on the switch.
    intent = parse_intent(
        {
            "name": "lossy-bulk",
            "classes": [
                {"name": "urgent", "dscp": [46], "priority": 5, "lossless": True},
                {"name": "bulk", "dscp": [26], "priority": 3, "weight": 100},
            ],
        }
    )
    out = lines(
        check(host(classes=host_classes(lossless=False)), intent, parse_sonic_config(geryon_config_db()))
    )
    assert out == [
        "lossless: switch Ethernet0,Ethernet4 DSCP 26 (intent class 'bulk', host class 'bulk'): "
        "expected lossy (no PFC), found TC 3 (queue 3) is lossless (pfc_enable: 3,5)"
    ]


def test_ports_with_different_qos_are_reported_apart():
    db = geryon_config_db(("Ethernet0", "Ethernet4", "Ethernet8"))
    db["PORT_QOS_MAP"]["Ethernet8"]["pfc_enable"] = "3"
    out = lines(check(host(), default_intent(), parse_sonic_config(db)))
    assert out == [
        "lossless: switch Ethernet8 DSCP 46 (intent class 'urgent', host class 'urgent'): expected lossless "
        "(PFC), found TC 5 (queue 5) is lossy (pfc_enable: 3)"
    ]
