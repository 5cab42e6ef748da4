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
    body = text.split("trap ", 1)[1].split("\n", 1)[1]  # after the version gate and the EXIT trap
    commands = [ln for ln in body.splitlines() if ln.strip() and not ln.startswith("#")]
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
    if lossless:  # the lossless pool comes before PFC (by default the whole buffer is lossy)
        pool = commands.index(f"nv set qos traffic-pool default-lossless switch-priority {lossless}")
        assert pool < commands.index(f"nv set qos pfc {profile} switch-priority {lossless}")
        assert "nv set qos traffic-pool default-lossless memory-percent 50" in commands


FAKE_NV = ROOT / "tests" / "deploy" / "fake_switch"


def _run_script(tmp_path: Path, text: str, version: str, fail: str = "") -> tuple[int, str, list[str]]:
    """The rendered script under a real /bin/sh, `nv` being the fake NVUE (tests/deploy/fake_switch)."""
    release = tmp_path / "os-release"
    release.write_text(f'NAME="Cumulus Linux"\nVERSION_ID={version}\n')
    script = tmp_path / "qos.sh"
    script.write_text(text)
    env = {
        "PATH": f"{FAKE_NV}:/usr/bin:/bin",
        "FAKE_NV_STATE": str(tmp_path / "nv"),
        "FAKE_NV_FAIL": fail,
        "GERYON_OS_RELEASE": str(release),
    }
    r = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
    log = tmp_path / "nv" / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    pending = tmp_path / "nv" / "pending.txt"
    staged = pending.read_text().splitlines() if pending.exists() else []
    return r.returncode, r.stderr, calls + [f"PENDING:{x}" for x in staged]


def test_version_gate_stages_nothing_on_an_older_release(tmp_path: Path) -> None:
    text = cumulus.render(default_intent(), "swp1-2")  # PFC watchdog: needs 5.6
    rc, err, calls = _run_script(tmp_path, text, '"5.5.1"')
    assert rc == 2 and calls == []
    assert "needs Cumulus Linux 5.6 or later (PFC watchdog); this switch runs 5.5; nothing staged" in err
    no_wd = replace(default_intent(), pfc_watchdog=replace(default_intent().pfc_watchdog, enabled=False))
    older = tmp_path / "older"
    older.mkdir()
    rc, err, calls = _run_script(older, cumulus.render(no_wd, "swp1"), "5.3.0")
    assert rc == 2 and "needs Cumulus Linux 5.4 or later (per-interface QoS profiles)" in err and calls == []


@pytest.mark.parametrize("version", ["5.6.0", '"5.10.2"', "6.0"])
def test_script_stages_everything_on_a_new_enough_release(tmp_path: Path, version: str) -> None:
    text = cumulus.render(default_intent(), "swp1-2")
    rc, err, calls = _run_script(tmp_path, text, version)
    assert rc == 0, err
    sets = [c for c in calls if c.startswith("set ")]
    assert len(sets) == text.count("\nnv set ") and not any(c.startswith("config") for c in calls)


def test_a_command_failing_part_way_leaves_nothing_staged(tmp_path: Path) -> None:
    text = cumulus.render(default_intent(), "swp1-2")
    rc, _, calls = _run_script(tmp_path, text, "5.6.0", fail="pfc-watchdog")
    assert rc != 0 and calls[-1] == "config detach"
    assert not [c for c in calls if c.startswith("PENDING:")]  # the pending revision is dropped


def test_nvue_version_below_what_the_intent_needs_is_refused() -> None:
    old = replace(default_intent(), platform=replace(default_intent().platform, nvue_version=(5, 4)))
    with pytest.raises(IntentError, match=r"platform\.nvue_version: 5\.4 is too old: the PFC watchdog needs"):
        cumulus.render(old, "swp1")
    no_wd = replace(old, pfc_watchdog=replace(old.pfc_watchdog, enabled=False))
    assert "exit 2" in cumulus.render(no_wd, "swp1")


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
