"""The Linux driver against real kernel queues and sysctls in namespaces the tests create."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from agent.agent_netns import VethNs, htb_classes, ns_exec, read_sysctl, root_qdisc, tc_json, veth_ns

from geryon.agent.config import ConfigError, parse_config
from geryon.agent.driver import Driver, DriverError
from geryon.agent.linux_driver import LinuxDriver, _decode_u32_sel, _dscp_from_bytes, desired_tree

CFG = {
    "interfaces": ["ga0", "ga1"],
    "egress": {"rate": "1gbit", "buffer": "2mib"},
    "classes": [
        {"name": "urgent", "dscp": 46, "priority": 5, "extra_dscp": [40]},
        {"name": "bulk", "dscp": 26, "priority": 3, "bandwidth": 50, "rate": "500mbit"},
    ],
}


@pytest.fixture
def ns() -> VethNs:
    with veth_ns(2, prefix="gld") as v:
        yield v


def test_is_a_driver() -> None:
    assert isinstance(LinuxDriver, type)
    with LinuxDriver() as d:
        assert isinstance(d, Driver)


def test_apply_builds_the_shared_layout_in_the_kernel(ns: VethNs) -> None:
    cfg = parse_config(CFG)
    with LinuxDriver(ns.name) as d:
        want = d.desired(cfg)
        for target, value in want.items():
            d.write(target, value)
        assert d.observe(want) == want

    # What iproute2 reads back from the kernel, independently of pyroute2.
    root = root_qdisc(ns.name, "ga0")
    assert root is not None and root["kind"] == "htb" and root["handle"] == "1:"
    assert root["options"]["default"] == "0x11"
    classes = htb_classes(ns.name, "ga0")
    assert set(classes) == {"1:10", "1:11"}
    assert classes["1:10"]["prio"] == 0 and classes["1:11"]["prio"] == 1
    assert classes["1:10"]["ceil"] == 1e9
    assert classes["1:11"]["ceil"] == 500e6  # the bulk class's own rate
    leaves = {q["parent"]: q for q in tc_json(ns.name, "qdisc", "ga0") if not q.get("root")}
    assert {p: (q["kind"], q["options"]["limit"]) for p, q in leaves.items()} == {
        "1:10": ("bfifo", 2 * 1024 * 1024),
        "1:11": ("bfifo", 2 * 1024 * 1024),
    }
    text = ns_exec(ns.name, "tc", "filter", "show", "dev", "ga0").stdout
    assert text.count("flowid 1:10") == 4 and text.count("flowid 1:11") == 2  # 46, 40 and 26; v4 + v6
    assert "match b8000000/fc000000 at 1" in text  # DSCP 46 in the IPv4 TOS byte
    assert "match 0b800000/0fc00000 at 0" in text  # DSCP 46 in the IPv6 traffic class
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "1"


def test_marked_packets_land_in_their_class(ns: VethNs) -> None:
    cfg = parse_config({"interfaces": ["ga0"]})
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", d.desired(cfg)["ga0/qdisc"])
    ns_exec(ns.name, "ip", "neigh", "replace", "10.77.0.2", "lladdr", "02:00:00:00:00:02", "dev", "ga0")
    send = (
        "import socket\n"
        "for tos, n in ((46 << 2, 7), (26 << 2, 3), (0, 5)):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)\n"
        "    for _ in range(n):\n"
        "        s.sendto(b'x' * 100, ('10.77.0.2', 9))\n"
    )
    ns_exec(ns.name, "python3", "-c", send)
    packets = {}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        packets = {h: c["packets"] for h, c in htb_classes(ns.name, "ga0").items()}
        if packets.get("1:10", 0) >= 7 and packets.get("1:11", 0) >= 8:
            break
        time.sleep(0.05)
    # DSCP 46 -> urgent; DSCP 26 and unmarked -> bulk (the HTB default), where the kernel's own
    # IPv6 neighbour discovery on the fresh link also goes.
    assert packets["1:10"] == 7
    assert packets["1:11"] >= 8


def test_observe_reports_the_kernel_default_as_none_and_deletion_as_drift(ns: VethNs) -> None:
    cfg = parse_config(CFG)
    with LinuxDriver(ns.name) as d:
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": None}
        tree = d.desired(cfg)["ga0/qdisc"]
        d.write("ga0/qdisc", tree)
        ns_exec(ns.name, "tc", "filter", "del", "dev", "ga0", "parent", "1:", "protocol", "ipv6", "pref", "2")
        seen = d.observe(["ga0/qdisc"])["ga0/qdisc"]
        assert seen != tree
        assert all(f["protocol"] == "ip" for f in seen["filters"])
        ns_exec(ns.name, "tc", "qdisc", "del", "dev", "ga0", "root")
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": None}
        d.write("ga0/qdisc", tree)
        d.write("ga0/qdisc", None)
        assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"


def test_a_foreign_fifo_root_is_restored_exactly(ns: VethNs) -> None:
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "5:", "bfifo", "limit", "30000")
    with LinuxDriver(ns.name) as d:
        before = d.observe(["ga0/qdisc"])["ga0/qdisc"]
        assert before == {"kind": "bfifo", "handle": "5:", "limit": 30000}
        d.write("ga0/qdisc", desired_tree(parse_config(CFG)))
        assert root_qdisc(ns.name, "ga0")["kind"] == "htb"
        d.write("ga0/qdisc", before)
    root = root_qdisc(ns.name, "ga0")
    assert (root["kind"], root["handle"], root["options"]["limit"]) == ("bfifo", "5:", 30000)


def test_a_foreign_root_it_cannot_recreate_is_left_alone(ns: VethNs) -> None:
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "7:", "tbf", "rate", "1mbit",
            "burst", "32kb", "latency", "50ms")  # fmt: skip
    with LinuxDriver(ns.name) as d, pytest.raises(DriverError, match=r"tbf.*not set by Geryon"):
        d.write("ga0/qdisc", desired_tree(parse_config(CFG)))
    assert root_qdisc(ns.name, "ga0")["kind"] == "tbf"


def test_unknown_interface_is_a_config_error_naming_the_field(ns: VethNs) -> None:
    cfg = parse_config({"interfaces": ["ga0", "nosuch0"]})
    with (
        LinuxDriver(ns.name) as d,
        pytest.raises(ConfigError, match=r"interfaces\[1\]: no interface 'nosuch0'"),
    ):
        d.check(cfg)


def test_sysctls_are_per_namespace(ns: VethNs) -> None:
    host = Path("/proc/sys/net/ipv4/tcp_reflect_tos").read_text().strip()
    with LinuxDriver(ns.name) as d:
        d.write("sysctl/net.ipv4.tcp_reflect_tos", "1" if host == "0" else "0")
        assert d.observe(["sysctl/net.ipv4.tcp_reflect_tos"]) != {"sysctl/net.ipv4.tcp_reflect_tos": host}
        with pytest.raises(DriverError, match="no such sysctl"):
            d.observe(["sysctl/net.ipv4.no_such_knob"])
    assert Path("/proc/sys/net/ipv4/tcp_reflect_tos").read_text().strip() == host


def test_u32_selector_decoding() -> None:
    def sel(*keys: tuple[int, int, int]) -> bytes:
        head = struct.pack("=BBBxHHhhI", 1, 0, len(keys), 0, 0, 0, 0, 0)
        return head + b"".join(struct.pack(">II", m, v) + struct.pack("=ii", off, 0) for m, v, off in keys)

    # tc's own encoding (word at offset 0) and pyroute2's (byte-shifted to offset 1) mean the same.
    for raw in (sel((0x00FC0000, 46 << 18, 0)), sel((0xFC000000, 46 << 26, 1))):
        assert _dscp_from_bytes("ip", _decode_u32_sel(raw)) == 46
    assert _dscp_from_bytes("ipv6", _decode_u32_sel(sel((0x0FC00000, 26 << 22, 0)))) == 26
    assert (
        _dscp_from_bytes("ip", _decode_u32_sel(sel((0xFFFFFFFF, 0x0A000001, 12)))) is None
    )  # a src IP match


def test_a_foreign_htb_it_cannot_recreate_is_left_alone(ns: VethNs) -> None:
    tc = ("tc",)
    ns_exec(ns.name, *tc, "qdisc", "add", "dev", "ga0", "root", "handle", "1:", "htb", "default", "20")
    ns_exec(
        ns.name, *tc, "class", "add", "dev", "ga0", "parent", "1:", "classid", "1:1", "htb", "rate", "1gbit"
    )
    ns_exec(
        ns.name, *tc, "class", "add", "dev", "ga0", "parent", "1:1", "classid", "1:20", "htb", "rate", "1mbit"
    )
    with LinuxDriver(ns.name) as d:
        seen = d.observe(["ga0/qdisc"])["ga0/qdisc"]
        assert [c.get("parent") for c in seen["classes"]] == [None, "1:1"]  # nested: not the shared layout
        with pytest.raises(DriverError, match=r"'htb' \(as it is now\) was not set by Geryon"):
            d.write("ga0/qdisc", desired_tree(parse_config(CFG)))
    assert set(htb_classes(ns.name, "ga0")) == {"1:1", "1:20"}


def test_a_hand_edited_geryon_tree_is_repaired(ns: VethNs) -> None:
    tree = desired_tree(parse_config(CFG))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", tree)
        tbf = ("tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms")
        ns_exec(ns.name, "tc", "qdisc", "replace", "dev", "ga0", "parent", "1:10", "handle", "30:", *tbf)
        assert d.observe(["ga0/qdisc"])["ga0/qdisc"]["classes"][0]["leaf"] == {"kind": "tbf"}
        d.write("ga0/qdisc", tree)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": tree}
