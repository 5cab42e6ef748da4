"""Arista EOS renderer: golden files, a complete DSCP map, one scheduler block per queue as the intent
says, the profile on every selected port, and intents EOS cannot express refused."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from fabric.golden_files import INTENTS, check_golden

from geryon.fabric.intent import IntentError, default_intent, load_intent, parse_intent
from geryon.fabric.render import eos

ROOT = Path(__file__).resolve().parents[2]
ALL_INTENTS = sorted((ROOT / "switch-configs" / "intents").glob("*.yaml")) + sorted(INTENTS.glob("*.yaml"))


def test_golden() -> None:
    assert len(check_golden("eos")) >= 3


def _blocks(text: str) -> dict[str, list[str]]:
    """Top-level block header -> its indented lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.startswith(" ") and not line.startswith("!"):
            current = line
            out.setdefault(current, [])
        elif current is not None and line.strip() and not line.strip().startswith("!"):
            out[current].append(line.strip())
    return out


@pytest.mark.parametrize("path", ALL_INTENTS, ids=lambda p: p.stem)
def test_config(path: Path) -> None:
    intent = load_intent(path)
    if path.stem == "edge":  # CNP on priority 7 and watchdog action alert: EOS refuses both
        with pytest.raises(IntentError, match="reserved for control traffic on EOS"):
            eos.render(intent)
        return
    text = eos.render(intent)
    mapped: dict[int, int] = {}
    for m in re.finditer(r"^qos map dscp ([0-9 ]+) to traffic-class (\d)$", text, re.M):
        for d in m.group(1).split():
            assert int(d) not in mapped
            mapped[int(d)] = int(m.group(2))
    assert mapped == intent.dscp_to_priority()
    tc_queue = {
        int(a): int(b) for a, b in re.findall(r"^qos map traffic-class (\d) to tx-queue (\d)$", text, re.M)
    }
    assert tc_queue == intent.priority_to_queue()
    profile = text.split(f"qos profile {intent.map_name}\n", 1)[1].split("\n!\n", 1)[0]
    kw = "tx-queue" if intent.platform.eos_family == "jericho" else "uc-tx-queue"
    queues = dict(re.findall(rf"^   {kw} (\d)\n((?:      .*\n?)*)", profile, re.M))
    for c in intent.classes:
        body = queues[str(c.queue)]
        if c.scheduler == "strict":
            assert "priority strict" in body and "bandwidth" not in body
        else:
            assert "no priority" in body and f"bandwidth percent {c.weight}" in body
        assert ("random-detect" in body) == (c.ecn is not None)
    for p in intent.lossless_priorities:
        assert f"   priority-flow-control priority {p} no-drop" in profile
    blocks = _blocks(text)
    for port in intent.ports_for("eos"):
        assert blocks[f"interface {port}"] == [f"service-profile {intent.map_name}"]


def test_watchdog_seconds() -> None:
    text = eos.render(load_intent(INTENTS / "vendor.yaml"))
    assert "priority-flow-control pause watchdog default timeout 1.5" in text
    assert "priority-flow-control pause watchdog default recovery-time 10" in text
    assert "priority-flow-control pause watchdog default polling-interval 0.25" in text


def test_queue_keyword_follows_the_chip_family() -> None:
    base = default_intent()
    assert "\n   uc-tx-queue 5\n" in eos.render(base) and "\n   tx-queue 5\n" not in eos.render(base)
    jericho = replace(base, platform=replace(base.platform, eos_family="jericho"))
    assert "\n   tx-queue 5\n" in eos.render(jericho) and "uc-tx-queue" not in eos.render(jericho)


@pytest.mark.parametrize(
    ("detection", "restoration", "poll", "want"),
    [(200, 200, 200, "0.1"), (200, 400, 100, "0.1"), (400, 2000, 100, "0.1"), (100, 300, 100, "0.05")],
)
def test_watchdog_polls_at_most_half_the_smaller_time(
    detection: int, restoration: int, poll: int, want: str
) -> None:
    base = default_intent()
    wd = replace(base.pfc_watchdog, detection_ms=detection, restoration_ms=restoration, poll_ms=poll)
    text = eos.render(replace(base, pfc_watchdog=wd))
    assert f"priority-flow-control pause watchdog default polling-interval {want}\n" in text


def test_refusals() -> None:
    base = default_intent()
    seven = parse_intent(
        {"name": "s", "classes": [{"name": "a", "dscp": 1, "priority": 5, "queue": 7}], "cnp": None}
    )
    with pytest.raises(IntentError, match=r"classes\[0\]\.queue: 7 is reserved for control traffic on EOS"):
        eos.render(seven, "Ethernet1")
    with pytest.raises(IntentError, match=r"pfc_watchdog\.action: 'alert' is not rendered for EOS"):
        eos.render(replace(base, pfc_watchdog=replace(base.pfc_watchdog, action="alert")))
    with pytest.raises(IntentError, match="detection_time: 205 ms; EOS takes seconds with 2 decimals"):
        eos.render(replace(base, pfc_watchdog=replace(base.pfc_watchdog, detection_ms=205)))
    with pytest.raises(IntentError, match="'Et1' is not a port selection for eos"):
        eos.render(base, "Et1")
