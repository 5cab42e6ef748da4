"""Cumulus NVUE renderer: golden files, every line a well-formed `nv set`, the DSCP map complete, the
script valid shell, and intents NVUE cannot express refused."""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fabric.golden_files import INTENTS, check_golden

from geryon.fabric.intent import IntentError, QosIntent, default_intent, load_intent, parse_ports
from geryon.fabric.render import cumulus

ROOT = Path(__file__).resolve().parents[2]
ALL_INTENTS = sorted((ROOT / "switch-configs" / "intents").glob("*.yaml")) + sorted(INTENTS.glob("*.yaml"))


def test_golden() -> None:
    assert len(check_golden("cumulus")) >= 3


def _ids(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def _renderable(path: Path) -> QosIntent | None:
    intent = load_intent(path)
    return None if intent.pfc_watchdog.enabled and intent.pfc_watchdog.action != "drop" else intent


@pytest.mark.parametrize("path", ALL_INTENTS, ids=lambda p: p.stem)
def test_commands(path: Path) -> None:
    intent = _renderable(path)
    if intent is None:
        with pytest.raises(IntentError, match=r"pfc_watchdog\.action"):
            cumulus.render(load_intent(path))
        return
    text = cumulus.render(intent)
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)  # parses as a shell script
    commands = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#") and ln != "set -e"]
    assert all(re.fullmatch(r"nv set [a-z0-9 ,_/-]+", c) for c in commands), commands
    profile = intent.map_name.lower()
    mapped: dict[int, int] = {}
    for c in commands:
        if m := re.fullmatch(rf"nv set qos mapping {profile} dscp (\S+) switch-priority (\d)", c):
            for d in _ids(m.group(1)):
                assert d not in mapped, f"DSCP {d} mapped twice"
                mapped[d] = int(m.group(2))
    assert mapped == intent.dscp_to_priority()
    weights = [int(m.group(1)) for c in commands if (m := re.search(r"bw-percent (\d+)$", c))]
    assert sum(weights) <= 100 and len(weights) == sum(c.scheduler == "dwrr" for c in intent.classes)
    for c in intent.classes:
        mode = f"nv set qos egress-scheduler {profile} traffic-class {c.queue} mode {c.scheduler}"
        assert mode in commands
    sel = cumulus.port_list(intent.ports_for("cumulus"))
    assert f"nv set interface {sel} qos mapping profile {profile}" in commands
    wd = intent.pfc_watchdog
    if wd.enabled:
        assert f"nv set qos pfc-watchdog robustness {math.ceil(wd.detection_ms / wd.poll_ms)}" in commands
        assert f"nv set interface {sel} qos pfc-watchdog state enable" in commands
    else:
        assert not any("pfc-watchdog" in c for c in commands)
    lossless = ",".join(str(p) for p in intent.lossless_priorities)
    assert (f"nv set qos pfc {profile} switch-priority {lossless}" in commands) == bool(lossless)


def test_port_lists() -> None:
    assert cumulus.port_list(parse_ports("cumulus", "swp1-4,swp6")) == "swp1-swp4,swp6"
    assert cumulus.port_list(parse_ports("cumulus", "swp1s0-3,swp9")) == "swp1s0-swp1s3,swp9"
    text = cumulus.render(default_intent(), "swp5,swp2-3")
    assert "nv set interface swp5,swp2-swp3 qos pfc profile geryon" in text


def test_refusals() -> None:
    vendor = load_intent(INTENTS / "vendor.yaml")
    forward = replace(vendor, pfc_watchdog=replace(vendor.pfc_watchdog, action="forward"))
    with pytest.raises(IntentError, match=r"pfc_watchdog\.action: 'forward' has no Cumulus equivalent"):
        cumulus.render(forward)
    with pytest.raises(IntentError, match="ports: no cumulus ports"):
        cumulus.render(replace(vendor, ports={}))
