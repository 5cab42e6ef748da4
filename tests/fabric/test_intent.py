"""The QoS intent: defaults agree with the host agent, every bad input names its field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from geryon.agent.config import parse_config
from geryon.fabric.intent import (
    IntentError,
    compress_ports,
    default_intent,
    load_intent,
    parse_intent,
    parse_ports,
)

ROOT = Path(__file__).resolve().parents[2]
INTENTS = ROOT / "switch-configs" / "intents"

BASE: dict[str, Any] = {
    "name": "t",
    "classes": [
        {"name": "urgent", "dscp": [46], "priority": 5, "lossless": True, "scheduler": "strict"},
        {"name": "bulk", "dscp": 26, "priority": 3, "lossless": True, "scheduler": "dwrr", "weight": 100},
    ],
}


def with_(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def with_class(i: int, **changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d["classes"][i].update(changes)
    return d


def test_default_intent_agrees_with_the_host_agent() -> None:
    intent = default_intent()
    agent = parse_config({"interfaces": ["eth0"]})
    assert [c.name for c in intent.classes] == [c.name for c in agent.classes] == ["urgent", "bulk"]
    for ic, ac in zip(intent.classes, agent.classes, strict=True):
        assert ic.dscp == ac.dscps
        assert ic.priority == ac.priority == ic.queue
        assert ic.lossless == ac.lossless is True
        assert ic.scheduler == ("strict" if ac.tsa == "strict" else "dwrr")
    assert agent.cnp is not None and intent.cnp is not None
    assert (intent.cnp.dscp, intent.cnp.priority) == (agent.cnp.dscp, agent.cnp.priority) == (48, 6)
    assert intent.lossless_priorities == agent.lossless_priorities == (3, 5)
    assert intent.strict_queues() == (6, 5)
    assert intent.unmatched == "bulk"


def test_the_committed_default_intent_file_is_the_default() -> None:
    assert load_intent(INTENTS / "geryon-2class.yaml") == default_intent()


@pytest.mark.parametrize("path", sorted(INTENTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_committed_intent_is_valid(path: Path) -> None:
    intent = load_intent(path)
    assert intent.name == path.stem


def test_class_of_dscp_and_the_full_dscp_map() -> None:
    intent = default_intent()
    assert intent.class_of_dscp(46) is intent.classes[0]
    assert intent.class_of_dscp(26) is intent.classes[1]
    assert intent.class_of_dscp(48) is None  # CNP is no data class
    assert intent.class_of_dscp(0) is None
    dmap = intent.dscp_to_priority()
    assert len(dmap) == 64
    assert (dmap[46], dmap[26], dmap[48], dmap[0], dmap[63]) == (5, 3, 6, 3, 3)
    assert intent.priority_to_queue() == {3: 3, 5: 5, 6: 6}


def test_defaults_of_optional_fields() -> None:
    intent = parse_intent(
        {
            "name": "x",
            "classes": [
                {"name": "a", "dscp": 10, "priority": 4},
                {"name": "b", "dscp": 12, "priority": 2, "weight": 100},
            ],
        }
    )
    a, b = intent.classes
    assert (a.scheduler, a.weight, a.queue, a.lossless) == ("strict", None, 4, False)
    assert (b.scheduler, b.weight, b.queue) == ("dwrr", 100, 2)
    assert intent.cnp is not None and (intent.cnp.dscp, intent.cnp.priority, intent.cnp.queue) == (48, 6, 6)
    assert intent.pfc_watchdog.enabled is False  # nothing lossless to watch
    assert intent.map_name == "GERYON" and intent.unmatched == "b"
    # platform: SONiC's buffer model from the switch (else static), Trident EOS, Cumulus 5.6
    assert (intent.platform.sonic_buffer_model, intent.platform.eos_family) == (None, "trident")
    assert intent.platform.nvue_version == (5, 6)


def test_platform_fields() -> None:
    base = {"name": "x", "classes": [{"name": "a", "dscp": 10, "priority": 4}]}
    p = parse_intent(
        {**base, "platform": {"sonic_buffer_model": "dynamic", "eos_family": "jericho", "nvue_version": 5.4}}
    ).platform
    assert (p.sonic_buffer_model, p.eos_family, p.nvue_version) == ("dynamic", "jericho", (5, 4))
    assert parse_intent({**base, "platform": {"nvue_version": "5.10"}}).platform.nvue_version == (5, 10)


def test_strict_queues_form() -> None:
    d = with_(strict_queues=[6, 5])
    for c in d["classes"]:
        c.pop("scheduler")
    intent = parse_intent(d)
    assert [c.scheduler for c in intent.classes] == ["strict", "dwrr"]
    assert parse_intent(d) == parse_intent(BASE)


def test_durations_sizes_and_ecn() -> None:
    intent = parse_intent(
        with_class(1, ecn={"mode": "mark", "min": "150kb", "max": "1.5mb", "probability": 10})
        | {"pfc_watchdog": {"detection_time": "1.5s", "restoration_time": 3000, "action": "forward"}}
    )
    ecn = intent.classes[1].ecn
    assert ecn is not None and (ecn.min_bytes, ecn.max_bytes, ecn.probability) == (150_000, 1_500_000, 10)
    wd = intent.pfc_watchdog
    assert (wd.enabled, wd.detection_ms, wd.restoration_ms, wd.action) == (True, 1500, 3000, "forward")


BAD: list[tuple[str, dict[str, Any] | None, str]] = [
    ("empty", None, "empty intent"),
    ("unknown top key", with_(colour="red"), "'colour': unknown key; allowed: version, name"),
    ("unknown class key", with_class(0, drop=True), "classes[0].'drop': unknown key"),
    ("bad version", with_(version=2), "version: a number (2) is not supported"),
    ("no classes", {"name": "t"}, "classes: required"),
    ("zero classes", with_(classes=[]), "classes: 0 classes; allowed 1-8"),
    ("dscp range", with_class(1, dscp=64), "classes[1].dscp: 64 is out of range; allowed 0-63"),
    ("dscp bool", with_class(1, dscp=True), "classes[1].dscp: expected a list"),
    ("dscp dup", with_class(1, dscp=[46]), "classes[1].dscp: 46 already used by classes[0] (urgent)"),
    ("dscp dup in class", with_class(1, dscp=[26, 26]), "classes[1].dscp[1]: DSCP 26 is listed twice"),
    ("priority dup", with_class(1, priority=5), "classes[1].priority: 5 already used by classes[0] (urgent)"),
    ("priority range", with_class(0, priority=8), "classes[0].priority: 8 is out of range; allowed 0-7"),
    ("queue dup", with_class(1, queue=5), "classes[1].queue: 5 already used by classes[0] (urgent)"),
    ("name dup", with_class(1, name="urgent"), "classes[1].name: 'urgent' is already the name of classes[0]"),
    ("name bad", with_class(1, name="Bulk!"), "classes[1].name: a string ('Bulk!') is not a class name"),
    (
        "lossless and lossy",
        with_class(1, ecn={"mode": "drop", "min": "100kb", "max": "1mb"}),
        "classes[1]: both lossless (lossless: true, PFC) and lossy (ecn.mode: drop",
    ),
    (
        "ecn min > max",
        with_class(1, ecn={"min": "2mb", "max": "1mb"}),
        "classes[1].ecn.min: 2000000 bytes is above",
    ),
    (
        "ecn mode",
        with_class(1, ecn={"mode": "red", "min": 2000, "max": 3000}),
        "classes[1].ecn.mode: expected one of mark, drop",
    ),
    (
        "ecn prob",
        with_class(1, ecn={"min": 2000, "max": 3000, "probability": 101}),
        "classes[1].ecn.probability: 101",
    ),
    ("scheduler", with_class(1, scheduler="wrr"), "classes[1].scheduler: expected one of strict, dwrr"),
    ("dwrr needs weight", with_class(1, weight=None) | {}, "classes[1].weight: expected an integer 1-100"),
    ("strict has no weight", with_class(0, weight=10), "classes[0].weight: only for scheduler: dwrr"),
    ("weights sum", with_class(1, weight=60), "weight: the dwrr weights must sum to 100 percent, got 60"),
    (
        "strict after dwrr",
        with_(
            classes=[
                {"name": "a", "dscp": 1, "priority": 1, "scheduler": "dwrr", "weight": 100},
                {"name": "b", "dscp": 2, "priority": 2, "scheduler": "strict"},
            ]
        ),
        "classes[1].scheduler: strict after the dwrr classes[0] (a)",
    ),
    (
        "cnp prio",
        with_(cnp={"dscp": 48, "priority": 3}),
        "cnp.priority: 3 is the data priority of classes[1] (bulk)",
    ),
    ("cnp dscp", with_(cnp={"dscp": 26, "priority": 6}), "cnp.dscp: 26 already used by classes[1] (bulk)"),
    (
        "cnp queue",
        with_(cnp={"dscp": 48, "priority": 6, "queue": 5}),
        "cnp.queue: 5 already used by classes[0]",
    ),
    ("cnp missing", with_(cnp={"dscp": 48}), "cnp.priority: required"),
    (
        "too many lossless",
        with_(max_lossless=1),
        "classes: 2 lossless classes (urgent, bulk) but max_lossless is 1",
    ),
    (
        "unmatched",
        with_(unmatched="nope"),
        "unmatched: a string ('nope') is not a class; allowed: urgent, bulk",
    ),
    ("map AZURE", with_(map_name="AZURE"), "map_name: a string ('AZURE') is not allowed"),
    (
        "wd action",
        with_(pfc_watchdog={"action": "reboot"}),
        "pfc_watchdog.action: expected one of drop, forward, alert",
    ),
    (
        "wd detect",
        with_(pfc_watchdog={"detection_time": 50}),
        "pfc_watchdog.detection_time: 50 ms is out of range; allowed 100-5000",
    ),
    (
        "wd restore",
        with_(pfc_watchdog={"restoration_time": "61s"}),
        "pfc_watchdog.restoration_time: 61000 ms is out of range",
    ),
    (
        "wd duration",
        with_(pfc_watchdog={"poll_interval": "soon"}),
        "pfc_watchdog.poll_interval: 'soon' is not a duration",
    ),
    (
        "wd without lossless",
        with_class(0, lossless=False)
        | {"pfc_watchdog": {"enabled": True}, "classes": [{"name": "a", "dscp": 1, "priority": 1}]},
        "pfc_watchdog.enabled: true, but no class is lossless",
    ),
    (
        "cable",
        with_(buffer={"cable_length": "5 meters"}),
        "buffer.cable_length: a string ('5 meters') is not a cable length",
    ),
    (
        "headroom",
        with_(buffer={"lossless_headroom": "1kb"}),
        "buffer.'lossless_headroom': unknown key; allowed: cable_length",
    ),
    (
        "ports os",
        with_(ports={"junos": "xe-0/0/0"}),
        "ports.'junos': unknown key; allowed: sonic, cumulus, eos, linux",
    ),
    (
        "ports sonic",
        with_(ports={"sonic": "Ethernet0-124:"}),
        "ports.sonic: 'Ethernet0-124:' is not a port selection for sonic",
    ),
    (
        "ports cumulus",
        with_(ports={"cumulus": "swp1-"}),
        "ports.cumulus: 'swp1-' is not a port selection for cumulus",
    ),
    ("ports eos", with_(ports={"eos": "Et1/1-32"}), "ports.eos: 'Et1/1-32' is not a port selection for eos"),
    (
        "ports backwards",
        with_(ports={"sonic": "Ethernet8-0"}),
        "ports.sonic: 'Ethernet8-0': the range ends (0) before it starts (8)",
    ),
    (
        "ports twice",
        with_(ports={"cumulus": ["swp1-4", "swp3"]}),
        "ports.cumulus[1]: port swp3 is selected twice",
    ),
    (
        "platform key",
        with_(platform={"asic": "td3"}),
        "platform.'asic': unknown key; allowed: sonic_buffer_model",
    ),
    (
        "buffer model",
        with_(platform={"sonic_buffer_model": "traditional"}),
        "platform.sonic_buffer_model: expected one of static, dynamic, got a string ('traditional')",
    ),
    (
        "eos family",
        with_(platform={"eos_family": "arad"}),
        "platform.eos_family: expected one of trident, tomahawk, jericho",
    ),
    (
        "nvue old",
        with_(platform={"nvue_version": 4.4}),
        "platform.nvue_version: a number (4.4) is not a Cumulus",
    ),
    (
        "nvue text",
        with_(platform={"nvue_version": "5.6.1"}),
        "platform.nvue_version: a string ('5.6.1') is not a Cumulus",
    ),
    ("nvue bool", with_(platform={"nvue_version": True}), "platform.nvue_version: "),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in BAD], ids=[i for i, _, _ in BAD])
def test_bad_intents_name_the_field(data: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(IntentError) as e:
        parse_intent(data, where="x.yaml")
    text = str(e.value)
    assert text.startswith("x.yaml: "), text
    assert message in text, text
    assert isinstance(e.value, ValueError)


def test_load_intent_errors(tmp_path: Path) -> None:
    with pytest.raises(IntentError, match="no such intent file"):
        load_intent(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes: [\n")
    with pytest.raises(IntentError, match=r"bad.yaml: malformed YAML \(line"):
        load_intent(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_intent(good).classes[1].dscp == (26,)


def test_port_selections_expand() -> None:
    assert parse_ports("sonic", "Ethernet0-12:4,Ethernet100") == (
        "Ethernet0",
        "Ethernet4",
        "Ethernet8",
        "Ethernet12",
        "Ethernet100",
    )
    assert len(parse_ports("sonic", "Ethernet0-124:4")) == 32
    assert parse_ports("cumulus", "swp1-3, swp10s1") == ("swp1", "swp2", "swp3", "swp10s1")
    assert parse_ports("eos", "Ethernet1/1-3,Ethernet7") == (
        "Ethernet1/1",
        "Ethernet1/2",
        "Ethernet1/3",
        "Ethernet7",
    )
    assert parse_ports("linux", ["s-ps0", "s-wk0"]) == ("s-ps0", "s-wk0")
    with pytest.raises(IntentError, match="port selection for linux"):
        parse_ports("linux", "a/b")
    with pytest.raises(
        IntentError, match=r"os: 'ios' is not a switch OS; allowed: sonic, cumulus, eos, linux"
    ):
        parse_ports("ios", "x")
    with pytest.raises(IntentError, match="selects no port"):
        parse_ports("linux", [])


def test_compress_ports() -> None:
    assert compress_ports(["swp1", "swp2", "swp3", "swp7", "swp8"]) == ["swp1-3", "swp7-8"]
    assert compress_ports(["Ethernet1/1", "Ethernet1/2", "Ethernet2/1"]) == ["Ethernet1/1-2", "Ethernet2/1"]
    assert compress_ports(parse_ports("cumulus", "swp1-32")) == ["swp1-32"]
