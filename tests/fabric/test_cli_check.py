"""`geryon check-fabric` as a user runs it: exit codes, one line per mismatch, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fabric.sonic_fixture import SONIC_DEFAULT, geryon_config_db
from geryon_cli import geryon

INTENT = {
    "name": "geryon-2class",
    "classes": [
        {"name": "urgent", "dscp": [46], "priority": 5, "lossless": True, "scheduler": "strict"},
        {"name": "bulk", "dscp": [26], "priority": 3, "lossless": True, "scheduler": "dwrr", "weight": 100},
    ],
    "cnp": {"dscp": 48, "priority": 6},
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "intent.yaml").write_text(yaml.safe_dump(INTENT))
    (tmp_path / "agent.yaml").write_text("interfaces: [eth0]\n")
    (tmp_path / "geryon_db.json").write_text(json.dumps(geryon_config_db()))
    return {p.stem: str(p) for p in tmp_path.iterdir()}


def test_consistent_exit_0(files):
    r = geryon("check-fabric", "--intent", files["intent"], "--agent-config", files["agent"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("consistent: host config ")
    r = geryon(
        "check-fabric", "--intent", files["intent"], "--agent-config", files["agent"],
        "--switch-config", files["geryon_db"], "--os", "sonic",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(2 ports)" in r.stdout


def test_sonic_default_mismatches_exit_1(files):
    args = ["--intent", files["intent"], "--agent-config", files["agent"]]
    r = geryon("check-fabric", *args, "--switch-config", str(SONIC_DEFAULT), "--os", "sonic")
    assert r.returncode == 1, r.stderr
    head, *lines = r.stdout.splitlines()
    assert head.startswith("8 mismatch(es) between ")
    assert len(lines) == 8
    assert any(
        line.startswith("lossless: switch Ethernet0,Ethernet4,Ethernet8,Ethernet12 DSCP 26 ")
        and "found TC 1 (queue 1) is lossy (pfc_enable: 3,4)" in line
        for line in lines
    )
    r = geryon("check-fabric", *args, "--switch-config", str(SONIC_DEFAULT), "--os", "sonic", "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["consistent"] is False and len(out["mismatches"]) == 8
    assert {m["kind"] for m in out["mismatches"]} == {"priority", "lossless", "pg", "scheduler", "unmatched"}
    assert set(out["mismatches"][0]) == {"kind", "where", "expected", "found"}


def test_host_cnp_mismatch_without_switch_config(files, tmp_path):
    agent = tmp_path / "cnp.yaml"
    agent.write_text("interfaces: [eth0]\ncnp: {dscp: 56, priority: 7}\n")
    r = geryon("check-fabric", "--intent", files["intent"], "--agent-config", str(agent), "--json")
    assert r.returncode == 1
    (m,) = json.loads(r.stdout)["mismatches"]
    assert m == {
        "kind": "cnp",
        "where": "host cnp",
        "expected": "DSCP 48 priority 6 (intent)",
        "found": "DSCP 56 priority 7",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--os", "sonic"], "--os: only with --switch-config FILE"),
        (["--switch-config", "X"], "--switch-config needs --os (sonic)"),
        (["--switch-config", "X", "--os", "junos"], "--os: 'junos' is not supported; allowed: sonic"),
        (
            ["--switch-config", "/nonexistent.json", "--os", "sonic"],
            "--switch-config: /nonexistent.json: cannot read",
        ),
    ],
)
def test_bad_arguments_exit_2(files, extra, message):
    r = geryon("check-fabric", "--intent", files["intent"], "--agent-config", files["agent"], *extra)
    assert r.returncode == 2
    assert r.stderr.startswith(f"geryon check-fabric: error: {message}")
    assert r.stdout == ""


def test_bad_files_exit_2(files, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes: [\n")
    r = geryon("check-fabric", "--intent", str(bad), "--agent-config", files["agent"])
    assert r.returncode == 2 and "--intent: " in r.stderr and "malformed YAML" in r.stderr
    r = geryon("check-fabric", "--intent", files["intent"], "--agent-config", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "--agent-config: " in r.stderr and "no such config file" in r.stderr
    bad.write_text("interfaces: [eth0]\nclasses: [{name: x, dscp: 99, priority: 1}]\n")
    r = geryon("check-fabric", "--intent", files["intent"], "--agent-config", str(bad))
    assert r.returncode == 2 and "classes[0].dscp: 99 is out of range" in r.stderr
    r = geryon("check-fabric", "--agent-config", files["agent"])
    assert r.returncode == 2 and "--intent" in r.stderr  # argparse: required


def test_rendered_sonic_config_is_consistent_and_a_wrong_host_is_named(files, tmp_path):
    out = tmp_path / "sonic.json"
    r = geryon("render-switch", "--os", "sonic", "--intent", files["intent"], "--ports", "Ethernet0-28:4",
               "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    args = ["--intent", files["intent"], "--switch-config", str(out), "--os", "sonic"]
    r = geryon("check-fabric", "--agent-config", files["agent"], *args)
    assert r.returncode == 0, r.stdout
    assert "(8 ports)" in r.stdout
    # The host puts bulk on priority 4: the rendered switch config (TC 3) disagrees, and PFC with it.
    agent = tmp_path / "prio4.yaml"
    agent.write_text(
        "interfaces: [eth0]\nclasses:\n"
        "  - {name: urgent, dscp: 46, priority: 5, lossless: true, tsa: strict}\n"
        "  - {name: bulk, dscp: 26, priority: 4, lossless: true, tsa: ets, bandwidth: 50}\n"
    )
    r = geryon("check-fabric", "--agent-config", str(agent), *args)
    assert r.returncode == 1
    assert (
        "priority: switch Ethernet0,Ethernet4,Ethernet8 and 5 more ports DSCP 26 (host class 'bulk'): "
        "expected TC 4, found TC 3 -> queue 3 (DSCP_TO_TC_MAP|GERYON)"
    ) in r.stdout.splitlines()


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["geryon-2class", "geryon-3class", "roce-ecn"])
def test_committed_sonic_configs_agree_with_their_intent_and_the_example_agent(name):
    r = geryon(
        "check-fabric", "--intent", str(REPO / "switch-configs" / "intents" / f"{name}.yaml"),
        "--agent-config", str(REPO / "examples" / "agent.yaml"),
        "--switch-config", str(REPO / "switch-configs" / "rendered" / name / "sonic.json"), "--os", "sonic",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("consistent: ")
