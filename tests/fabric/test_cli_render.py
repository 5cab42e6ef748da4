"""`geryon render-switch`: real subprocesses for the outputs and exit codes a user sees, in-process
runs for every bad-input case (exit 2, one line naming the field), and a real --apply into a network
namespace the test creates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent.agent_netns import veth_ns
from geryon_cli import geryon

from geryon.cli import main
from geryon.fabric.intent import default_intent, load_intent
from geryon.fabric.render import render, sonic
from geryon.fabric.render.linux import observe_ports, port_trees, tc_commands

ROOT = Path(__file__).resolve().parents[2]
ROCE = ROOT / "switch-configs" / "intents" / "roce-ecn.yaml"


def test_prints_each_os() -> None:
    r = geryon("render-switch", "--os", "sonic")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["intent"] == "geryon-2class" and sonic.check_document(doc) == []
    r = geryon("render-switch", "--os", "cumulus", "--intent", str(ROCE), "--ports", "swp1-2")
    assert r.returncode == 0 and "nv set interface swp1-swp2 qos pfc profile geryon" in r.stdout


def test_unknown_os_and_bad_intent_exit_2(tmp_path: Path) -> None:
    r = geryon("render-switch", "--os", "junos")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "geryon render-switch: error: --os: 'junos' is not a switch OS; allowed: sonic, cumulus, eos, linux"
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: b\nclasses:\n  - {name: a, dscp: 46, priority: 5}\n"
        "  - {name: c, dscp: 46, priority: 3, weight: 100}\n"
    )
    r = geryon("render-switch", "--os", "eos", "--intent", str(bad))
    assert r.returncode == 2 and r.stdout == ""
    assert (
        "classes[1].dscp: 46 already used by classes[0] (a)" in r.stderr and len(r.stderr.splitlines()) == 1
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["render-switch", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _intent_file(tmp_path: Path, text: str) -> str:
    p = tmp_path / "i.yaml"
    p.write_text(text)
    return str(p)


BAD: list[tuple[list[str], str]] = [
    (["--os", "sonic", "--apply"], "--apply: only with --os linux"),
    (["--os", "eos", "--netns", "x"], "--netns: only with --os linux"),
    (["--os", "linux", "--apply", "--check", "--ports", "a"], "--apply: not with --out or --check"),
    (
        ["--os", "sonic", "--ports", "Ethernet9-1"],
        "ports: 'Ethernet9-1': the range ends (1) before it starts (9)",
    ),
    (["--os", "cumulus", "--ports", "eth0"], "ports: 'eth0' is not a port selection for cumulus"),
    (["--os", "linux"], "ports: no linux ports; give ports.linux in the intent or --ports"),
    (["--os", "linux", "--ports", "a", "--rate", "10g"], "--rate: '10g' is not a rate"),
    (["--os", "linux", "--ports", "a", "--rate", "100MBps"], "looks like bytes per second"),
    (["--os", "linux", "--ports", "a", "--buffer", "lots"], "--buffer: expected a size like 64kb"),
    (["--os", "linux", "--ports", "a", "--burst", "10"], "--burst: 10 is out of range"),
    (["--os", "sonic", "--intent", "/nonexistent/i.yaml"], "/nonexistent/i.yaml: no such intent file"),
    (["--os", "eos", "--base", "x.json"], "--base: only with --os sonic"),
    (["--os", "sonic", "--base", "/nonexistent/db.json"], "--base: cannot read /nonexistent/db.json"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    ("intent", "os_name", "message"),
    [
        (
            "{name: a, classes: [{name: x, dscp: 1, priority: 0, lossless: true}], cnp: null,"
            " ports: {sonic: Ethernet0}}",
            "sonic",
            "classes[0].priority: 0 cannot be lossless on SONiC",
        ),
        (
            "{name: a, classes: [{name: x, dscp: 1, priority: 7}], cnp: null, ports: {eos: Ethernet1}}",
            "eos",
            "classes[0].priority: 7 is reserved for control traffic on EOS",
        ),
        (
            "{name: a, classes: [{name: x, dscp: 1, priority: 3, lossless: true}],"
            " pfc_watchdog: {action: alert}, ports: {cumulus: swp1}}",
            "cumulus",
            "pfc_watchdog.action: 'alert' has no Cumulus equivalent",
        ),
        (
            "{name: a, classes: [{name: x, dscp: 1, priority: 3, lossless: true, ecn: {mode: drop, min: 2000,"
            " max: 3000}}]}",
            "linux",
            "both lossless (lossless: true, PFC) and lossy (ecn.mode: drop",
        ),
        (
            "{name: a, strict_queues: [5, 4], classes: [{name: x, dscp: 1, priority: 5}]}",
            "sonic",
            "strict_queues[1]: queue 4 is no defined class",
        ),
    ],
)
def test_intents_an_os_cannot_express_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], intent: str, os_name: str, message: str
) -> None:
    rc, out, err = _run(capsys, "--os", os_name, "--intent", _intent_file(tmp_path, intent))
    assert rc == 2 and out == "" and message in err, err


def test_out_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "eos.cfg"
    rc, out, err = _run(capsys, "--os", "eos", "--intent", str(ROCE), "--out", str(target))
    assert rc == 0 and out == "" and f"to {target}" in err
    assert target.read_text() == render(load_intent(ROCE), "eos")
    assert [p.name for p in tmp_path.iterdir()] == ["eos.cfg"]  # no temp file left behind
    rc, out, _ = _run(capsys, "--os", "sonic", "--check")
    assert rc == 0 and out.startswith("ok: sonic config for intent 'geryon-2class': ")
    rc, _, err = _run(capsys, "--os", "eos", "--out", str(tmp_path / "missing" / "x.cfg"))
    assert rc == 2 and "--out: cannot write in" in err


def test_base_renders_against_the_switchs_config_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {
        "PORT": {"Ethernet0": {"lanes": "0", "speed": "100000"}},
        "BUFFER_PROFILE": {"egress_lossless_profile": {"pool": "egress_lossless_pool", "size": "0"}},
        "BUFFER_QUEUE": {"Ethernet0|3-4": {"profile": "egress_lossless_profile"}},
        "QUEUE": {"Ethernet0|3": {"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"}},
        "PFC_WD": {"GLOBAL": {"POLL_INTERVAL": "200"}},
    }
    path = tmp_path / "config_db.json"
    path.write_text(json.dumps(base))
    rc, out, err = _run(capsys, "--os", "sonic", "--ports", "Ethernet0", "--base", str(path))
    assert rc == 0, err
    doc = json.loads(out)
    paths = [op["path"] for op in doc["patch"]]
    assert "/BUFFER_QUEUE/Ethernet0|5" in paths  # no range of the switch holds queue 5: its own key
    assert "/PFC_WD/Ethernet0" in paths and "/PFC_WD" not in paths  # the switch has the table
    rc, out, err = _run(capsys, "--os", "sonic", "--ports", "Ethernet8", "--base", str(path))
    assert rc == 2 and out == "" and "ports: Ethernet8 not on the switch" in err
    path.write_text("[1, 2]")
    rc, out, err = _run(capsys, "--os", "sonic", "--base", str(path))
    assert rc == 2 and "--base: " in err and "is not a config_db" in err


def test_linux_print_matches_tc_commands(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--os", "linux", "--ports", "p0,p1", "--rate", "50mbit", "--buffer", "100kb")
    trees = port_trees(default_intent(), ["p0", "p1"], rate_bits=50_000_000, buffer_bytes=100_000)
    assert rc == 0 and out == tc_commands(trees)


@pytest.fixture
def switch() -> Any:
    with veth_ns(2, prefix="gfc") as v:
        yield v


def test_apply_writes_and_verifies_real_ports(switch: Any) -> None:
    args = [
        "render-switch",
        "--os",
        "linux",
        "--intent",
        str(ROCE),
        "--apply",
        "--netns",
        switch.name,
        "--ports",
        "ga0,ga1",
        "--rate",
        "40mbit",
        "--buffer",
        "128kib",
    ]
    r = geryon(*args)
    assert r.returncode == 0, r.stderr
    assert "applied intent 'roce-ecn' to 2 ports in" in r.stdout and "(verified)" in r.stdout
    want = port_trees(load_intent(ROCE), ["ga0", "ga1"], rate_bits=40_000_000, buffer_bytes=128 * 1024)
    assert observe_ports(["ga0", "ga1"], switch.name) == dict(want)
    r = geryon(*args)  # again: idempotent
    assert r.returncode == 0, r.stderr


def test_apply_to_a_missing_port_writes_nothing(switch: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "--os", "linux", "--apply", "--netns", switch.name, "--ports", "ga0,nosuch")
    assert rc == 2 and out == "" and "no interface 'nosuch'" in err
    assert observe_ports(["ga0"], switch.name) == {"ga0": None}
