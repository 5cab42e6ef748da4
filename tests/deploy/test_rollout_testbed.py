"""The real rollout: site.yml puts the Linux software-switch profile on the testbed's switch ports and
the agent config on every host namespace; the kernel queues and `geryon agent verify` agree; a second
run changes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from deploy.rollout import GERYON, INTENT, failures, playbook, results, switch_ports, write_inventory

from geryon.fabric.intent import parse_intent
from geryon.fabric.render.linux import observe_ports, port_trees


def tc_classes(netns: str, ifname: str) -> list[str]:
    """HTB class ids as `tc` lists them (iproute2 6.1 prints classes as text even with -j)."""
    out = subprocess.run(
        ["tc", "-n", netns, "class", "show", "dev", ifname], capture_output=True, text=True, check=True
    ).stdout
    return sorted(line.split()[2] for line in out.splitlines() if line.startswith("class htb "))


def test_rollout_to_the_testbed_then_idempotent(bare_testbed, tmp_path: Path):
    tb = bare_testbed
    inv = write_inventory(tmp_path, tb)
    doc = playbook(tmp_path, inv, "--diff")
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]
    assert all(doc["stats"][h]["changed"] > 0 for h in ("sw", "ps0", "worker0")), doc["stats"]

    # The switch ports hold the intent's strict-priority trees (read back through the driver and tc).
    ports = switch_ports(tb.switch_netns)
    assert len(ports) == 2
    trees = port_trees(parse_intent(INTENT), ports, 100_000_000, 256 * 1024)
    assert observe_ports(ports, tb.switch_netns) == dict(trees)
    for port in ports:
        assert tc_classes(tb.switch_netns, port) == ["1:1", "1:10", "1:11"]

    # Every host: the agent's own verify (run by the role, and again here) and the kernel's HTB tree.
    verify = results(doc, "nic_qos : Verify host QoS (geryon agent verify)")
    for name, h in tb.hosts.items():
        assert verify[name]["rc"] == 0 and "in sync" in verify[name]["stdout"]
        r = subprocess.run(
            [GERYON, "agent", "verify", "--config", str(tmp_path / name / "agent.yaml"),
             "--journal", str(tmp_path / name / "journal.json"), "--netns", h.netns],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert tc_classes(h.netns, h.ifname) == ["1:1", "1:10", "1:11"]

    # Idempotent: the second run finds everything as configured.
    again = playbook(tmp_path, inv)
    assert again["rc"] == 0, failures(again)
    assert {h: s["changed"] for h, s in again["stats"].items()} == {"sw": 0, "ps0": 0, "worker0": 0}
