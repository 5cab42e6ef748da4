"""`geryon agent plan|apply|verify|restore` as a user runs them, on veths in a namespace the test made."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent.agent_netns import VethNs, ns_exec, read_sysctl, root_qdisc, veth_ns
from geryon_cli import geryon


@pytest.fixture
def ns() -> Iterator[VethNs]:
    with veth_ns(2, prefix="gcl") as v:
        yield v


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return str(path)


def test_plan_apply_verify_drift_restore(ns: VethNs, tmp_path: Path) -> None:
    config = write_config(tmp_path, "interfaces: [ga0, ga1]\negress: {rate: 1gbit}\n")
    journal = str(tmp_path / "journal.json")
    where = ["--config", config, "--netns", ns.name, "--journal", journal]

    r = geryon("agent", "plan", *where)
    assert r.returncode == 0, r.stderr
    assert "+ ga0/qdisc  (linux: create)" in r.stdout and "+ ga1/qdisc" in r.stdout
    assert "~ sysctl/net.ipv4.tcp_reflect_tos" in r.stdout and "3 changes, 0 in sync" in r.stdout
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"  # plan changes nothing

    r = geryon("agent", "plan", *where, "--json")
    plan = json.loads(r.stdout)
    assert [c["target"] for c in plan["changes"]] == [
        "ga0/qdisc",
        "ga1/qdisc",
        "sysctl/net.ipv4.tcp_reflect_tos",
    ]

    r = geryon("agent", "apply", *where)
    assert r.returncode == 0, r.stderr
    assert "write ga0/qdisc" in r.stderr  # progress on stderr
    assert root_qdisc(ns.name, "ga0")["kind"] == "htb" and root_qdisc(ns.name, "ga1")["kind"] == "htb"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "1"

    r = geryon("agent", "verify", *where)
    assert (r.returncode, r.stdout.strip()) == (0, "in sync: 3 target(s) as configured")

    ns_exec(ns.name, "tc", "qdisc", "del", "dev", "ga1", "root")
    r = geryon("agent", "verify", *where)
    assert r.returncode == 1
    assert "ga1/qdisc: absent (kernel default) (want htb with 2 classes, 4 filters)" in r.stdout
    assert "ga0/qdisc" not in r.stdout

    r = geryon("agent", "restore", "--netns", ns.name, "--journal", journal)
    assert r.returncode == 0, r.stderr
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert not Path(journal).exists()
    r = geryon("agent", "restore", "--netns", ns.name, "--journal", journal)
    assert r.returncode == 0 and "nothing to restore" in r.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interfaces: [ga0, eth9]\n", "interfaces[1]: no interface 'eth9' in network namespace"),
        (
            "interfaces: [ga0]\nclasses: [{name: u, dscp: 70, priority: 5}]\n",
            "classes[0].dscp: 70 is out of range",
        ),
        ("interfaces: [ga0\n", "malformed YAML"),
        ("interfaces: [ga0]\ncnp: {dscp: 48, priority: 5}\n", "cnp.priority: 5 is the data priority"),
        ("interfaces: [ga0]\nfoo: 1\n", "'foo': unknown key"),
        (
            "interfaces: [ga0]\nsysctls: {net.ipv4.tcp_reflect_toss: 1}\n",
            "sysctls.net.ipv4.tcp_reflect_toss: no such",
        ),
        ("interfaces: [ga0]\nsysctls: {kernel.core_pattern: x}\n", "only network sysctls"),
        ("interfaces: [ga0]\ntrust: pcp\ntrust: dscp\n", "line 3, column 1: duplicate key 'trust'"),
        ("interfaces: [ga0]\ncnp: {dscp: 046, priority: 6}\n", "'046' is read by YAML 1.1"),
        ("interfaces: [ga0]\nroce_tos: [{device: '..', tos: 8}]\n", "roce_tos[0].device"),
        # the NIC knobs: each bad value exits 2 naming the field, before anything is written
        (
            "interfaces: [ga0]\nclasses: [{name: u, dscp: 46, priority: 5, tsa: strict, maxrate: 150mbit}]\n"
            "best_effort_bandwidth: 100\n",
            "classes[0].maxrate: 150 Mbit/s is not a NIC TC rate",
        ),
        ("interfaces: [ga0]\ncable_length: 1000\n", "cable_length: 1000 is out of range"),
        ("interfaces: [ga0]\ndcbx: cee\n", "dcbx: expected one of host, lld_managed"),
        (
            "interfaces: [ga0]\ndcbx: lld_managed\ncable_length: 7\n",
            "dcbx: lld_managed leaves the NIC's DCB to the LLDP agent",
        ),
        ("interfaces: [ga0]\nvlan_egress_qos: {ga0.7: {3: 8}}\n", "vlan_egress_qos[ga0.7][3]: 8 is out"),
        ("interfaces: [ga0]\nbuffer_sizes: [0, 12]\n", "buffer_sizes[1]: 12 is out of range"),
        ("interfaces: [ga0]\npfc_storm_timeout: 50\n", "pfc_storm_timeout: 50 ms"),
        ("interfaces: [ga0]\ndcqcn: {roce_rp: {rpg_speed: 1}}\n", "dcqcn.roce_rp.'rpg_speed': unknown key"),
        (
            "interfaces: [ga0]\n"
            "classes: [{name: u, dscp: 46, priority: 5}, {name: b, dscp: 46, priority: 3}]\n",
            "DSCP 46 is already used",
        ),
    ],
)
def test_bad_config_exits_2_and_applies_nothing(ns: VethNs, tmp_path: Path, text: str, message: str) -> None:
    config = write_config(tmp_path, text)
    journal = tmp_path / "journal.json"
    r = geryon("agent", "apply", "--config", config, "--netns", ns.name, "--journal", str(journal))
    assert r.returncode == 2
    assert r.stderr.startswith("geryon agent: error: ") and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert not journal.exists()


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, "interfaces: [lo]\n")
    r = geryon(
        "agent", "verify", "--config", config, "--netns", "gery-no-such-ns", "--journal", str(tmp_path / "j")
    )
    assert r.returncode == 2 and "--netns: no network namespace 'gery-no-such-ns'" in r.stderr
    bad = tmp_path / "journal.json"
    bad.write_text("[]")
    r = geryon("agent", "restore", "--journal", str(bad))
    assert r.returncode == 2 and "--journal:" in r.stderr and "not a Geryon agent journal" in r.stderr


def sysfs_tree(root: Path, ifname: str) -> Path:
    """A tree laid out like an mlx5 NIC's DCQCN sysfs files (no such NIC here), all off."""
    ecn = root / "sys/class/net" / ifname / "ecn"
    for kind in ("roce_rp", "roce_np"):
        (ecn / kind / "enable").mkdir(parents=True)
        for prio in range(8):
            (ecn / kind / "enable" / str(prio)).write_text("0\n")
    (ecn / "roce_np/cnp_dscp").write_text("0\n")
    (ecn / "roce_np/cnp_802p_prio").write_text("0\n")
    return ecn


def test_all_drivers_in_one_transaction_dcb_skipped_on_veth(ns: VethNs, tmp_path: Path) -> None:
    ecn = sysfs_tree(tmp_path / "root", "ga0")
    config = write_config(tmp_path, "interfaces: [ga0]\n")
    where = ["--config", config, "--netns", ns.name, "--journal", str(tmp_path / "j.json")]
    where += ["--root", str(tmp_path / "root")]
    r = geryon("agent", "plan", *where)
    assert "! skipped (dcb): ga0/dcb/ets, ga0/dcb/pfc" in r.stdout and "no DCB operations" in r.stdout
    assert "~ ga0/ecn/roce_np/5  (sysfs)" in r.stdout and "~ ga0/ecn/cnp_dscp  (sysfs)" in r.stdout

    r = geryon("agent", "apply", *where)
    assert r.returncode == 0, r.stderr
    assert [(ecn / k / "enable" / p).read_text().strip() for k in ("roce_rp", "roce_np") for p in "0356"] == [
        "0", "1", "1", "0", "0", "1", "1", "0",
    ]  # fmt: skip
    assert (ecn / "roce_np/cnp_dscp").read_text().strip() == "48"
    assert root_qdisc(ns.name, "ga0")["kind"] == "htb"
    assert geryon("agent", "verify", *where).returncode == 0

    r = geryon("agent", "restore", "--netns", ns.name, "--journal", str(tmp_path / "j.json"), "--root",
               str(tmp_path / "root"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (ecn / "roce_np/cnp_dscp").read_text().strip() == "0"
    assert (ecn / "roce_rp/enable/5").read_text().strip() == "0"
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"


def test_dcb_required_on_a_nic_without_dcb_fails_before_any_write(ns: VethNs, tmp_path: Path) -> None:
    config = write_config(tmp_path, "interfaces: [ga0]\ndcb: required\n")
    r = geryon(
        "agent", "apply", "--config", config, "--netns", ns.name, "--journal", str(tmp_path / "j.json")
    )
    assert r.returncode == 1
    assert "ga0/dcb/" in r.stderr and "(the config requires it)" in r.stderr
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"


def test_without_the_agent_extra_it_says_what_to_install() -> None:
    # As on a host where pyroute2 (the `agent` extra) is not installed.
    code = (
        "import sys; sys.modules['pyroute2'] = None; from geryon.cli import main; "
        "raise SystemExit(main(['agent', 'plan', '--config', 'examples/agent.yaml', '--journal', '/no/j']))"
    )
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root)
    assert r.returncode == 2
    assert "pip install 'geryon[agent]'" in r.stderr and "Traceback" not in r.stderr
