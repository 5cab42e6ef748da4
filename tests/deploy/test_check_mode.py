"""`ansible-playbook site.yml --check --diff` against an emulated testbed: the plan shows, nothing changes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from deploy.rollout import (
    INTENT,
    failures,
    fake_switches,
    playbook,
    results,
    switch_ports,
    write_inventory,
    write_switch_inventory,
)

from geryon.fabric.intent import parse_intent
from geryon.fabric.render.linux import observe_ports, port_trees

SWITCH_TASK = "switch_qos : Set the switch ports' queues from the intent (check mode shows the diff)"
HOST_TASK = "nic_qos : Plan and apply host QoS (check mode shows the plan as the diff)"


def host_root(netns: str, ifname: str) -> dict:
    out = subprocess.run(
        ["tc", "-n", netns, "-j", "qdisc", "show", "dev", ifname, "root"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)[0]


def kernel_state(tb) -> dict:
    ports = switch_ports(tb.switch_netns)
    return {
        "switch": observe_ports(ports, tb.switch_netns),
        "hosts": {n: host_root(h.netns, h.ifname) for n, h in tb.hosts.items()},
    }


def test_check_mode_shows_the_plan_and_changes_nothing(bare_testbed, tmp_path: Path):
    tb = bare_testbed
    inv = write_inventory(tmp_path, tb)
    # ps0 already has a config (as a previous run left it): nic_qos plans against it. worker0 has none:
    # in check mode geryon_agent only shows the file's diff, and nic_qos says there is nothing to plan yet.
    old = "interfaces: [eth0]\negress: {rate: 100mbit, burst: 64kib, buffer: 256kib}\n"
    (tmp_path / "ps0" / "agent.yaml").write_text(old)
    before = kernel_state(tb)

    doc = playbook(tmp_path, inv, "--check", "--diff")
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]

    ports = switch_ports(tb.switch_netns)
    trees = port_trees(parse_intent(INTENT), ports, 100_000_000, 256 * 1024)
    sw = results(doc, SWITCH_TASK)["sw"]
    assert sw["changed"] and sw["changed_ports"] == ports
    for d, port in zip(sw["diff"], ports, strict=True):
        assert d["before_header"] == f"{port}/qdisc (now)"
        assert json.loads(d["after"]) == trees[port]
        assert json.loads(d["before"]) == before["switch"][port]

    hosts = results(doc, HOST_TASK)
    assert hosts["ps0"]["changed"] and "eth0/qdisc" in hosts["ps0"]["changes"]
    (qdisc,) = [d for d in hosts["ps0"]["diff"] if d["before_header"].startswith("eth0/qdisc")]
    assert json.loads(qdisc["after"])["kind"] == "htb"
    assert hosts["worker0"].get("skipped") and "is not on the host yet" in hosts["worker0"]["msg"]

    cfg = results(doc, "geryon_agent : Write the agent config (validated by the agent's own loader)")
    assert cfg["ps0"]["changed"] and cfg["worker0"]["changed"]
    assert yaml.safe_load(cfg["worker0"]["diff"][0]["after"]) == {
        "interfaces": ["eth0"],
        "egress": {"rate": "100mbit", "burst": "64kib", "buffer": "256kib"},
    }
    verify = results(doc, "nic_qos : Verify host QoS (geryon agent verify)")
    assert all(r.get("skipped") for r in verify.values())

    # Nothing was written: kernel queues, config files.
    assert kernel_state(tb) == before
    assert (tmp_path / "ps0" / "agent.yaml").read_text() == old
    assert not (tmp_path / "worker0" / "agent.yaml").exists()


def test_check_mode_sonic_and_cumulus_show_the_switchs_own_diff_and_gate_on_check_fabric(tmp_path: Path):
    agent = tmp_path / "agent.yaml"
    agent.write_text("interfaces: [eth0]\n")
    inv = write_switch_inventory(tmp_path, agent)
    env = fake_switches(tmp_path)
    before = (tmp_path / "sonic-state" / "running.json").read_text()
    doc = playbook(tmp_path, inv, "--check", "--diff", env=env)
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]

    gate = results(doc, "switch_qos : Check host and switch consistency (geryon check-fabric)")["leaf-sonic"]
    assert gate["rc"] == 0 and gate["stdout"].startswith("consistent: ")
    # SONiC's own dry run of the patch rendered against its running config_db
    dry = results(doc, "switch_qos : Dry-run the patch on the switch (config apply-patch --dry-run)")
    after = json.loads(dry["leaf-sonic"]["stdout"])
    assert after["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3,5"
    assert after["QUEUE"]["Ethernet0|5"]["scheduler"] == "GERYON_urgent"
    assert results(doc, "switch_qos : Checkpoint the running config (config checkpoint)")["leaf-sonic"][
        "skipped"
    ]
    # NVUE's own diff of the staged script; the staged revision is dropped again
    nv_diff = results(doc, "switch_qos : What NVUE would change (nv config diff)")["leaf-cumulus"]
    assert nv_diff["changed"] and "set qos mapping geryon dscp 46 switch-priority 5" in nv_diff["stdout"]
    cumulus = results(doc, "switch_qos : Keep the rendered NVUE script on the switch")["leaf-cumulus"]
    assert cumulus["changed"] and "nv set qos traffic-pool default-lossless" in cumulus["diff"][0]["after"]

    # nothing changed on either switch
    assert (tmp_path / "sonic-state" / "running.json").read_text() == before
    nv = tmp_path / "nv-state"
    assert not (nv / "applied.txt").exists() and (nv / "pending.txt").read_text() == ""
    assert not (tmp_path / "sonic" / "geryon-qos.json").exists()
    assert not (tmp_path / "cumulus" / "etc-geryon").exists()

    # A host whose CNP differs from the intent: check-fabric stops the SONiC push and names it.
    agent.write_text("interfaces: [eth0]\ncnp: {dscp: 56, priority: 7}\n")
    doc = playbook(tmp_path, inv, "--check", "--diff", env=env)
    assert doc["rc"] != 0
    gate = results(doc, "switch_qos : Check host and switch consistency (geryon check-fabric)")["leaf-sonic"]
    assert gate["rc"] == 1 and gate["failed"]
    assert "cnp: host cnp: expected DSCP 48 priority 6 (intent), found DSCP 56 priority 7" in gate["stdout"]
    assert "leaf-sonic" not in results(
        doc, "switch_qos : Dry-run the patch on the switch (config apply-patch --dry-run)"
    )
