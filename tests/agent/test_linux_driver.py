"""The Linux driver against real kernel queues and sysctls in namespaces the tests create."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from agent.agent_netns import Flow, VethNs, htb_classes, ns_exec, read_sysctl, root_qdisc, tc_json, veth_ns
from obs_netns import veth_pair

from geryon.agent.config import ConfigError, parse_config
from geryon.agent.driver import Driver, DriverError
from geryon.agent.engine import Slot, apply_plan, make_plan
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
    classes = htb_classes(ns.name, "ga0", inner=True)
    assert {h: c["parent"] for h, c in classes.items()} == {"1:1": None, "1:10": "1:1", "1:11": "1:1"}
    assert classes["1:1"]["ceil"] == 1e9  # the link: rate = ceil = egress.rate
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


def send_marked(ns: str, counts: tuple[tuple[int, int], ...], want: dict[str, int]) -> dict[str, int]:
    """Sends `counts` ((DSCP, packets), ...) of UDP out of ga0 and returns each class's packets, once
    `want` ({classid: at least}) is reached or 5 s have passed."""
    ns_exec(ns, "ip", "neigh", "replace", "10.77.0.2", "lladdr", "02:00:00:00:00:02", "dev", "ga0")
    send = (
        "import socket\n"
        f"for tos, n in {tuple((d << 2, n) for d, n in counts)!r}:\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)\n"
        "    for _ in range(n):\n"
        "        s.sendto(b'x' * 100, ('10.77.0.2', 9))\n"
    )
    ns_exec(ns, "python3", "-c", send)
    packets: dict[str, int] = {}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        packets = {h: c["packets"] for h, c in htb_classes(ns, "ga0").items()}
        if all(packets.get(h, 0) >= n for h, n in want.items()):
            break
        time.sleep(0.05)
    return packets


def test_marked_packets_land_in_their_class(ns: VethNs) -> None:
    cfg = parse_config({"interfaces": ["ga0"]})
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", d.desired(cfg)["ga0/qdisc"])
    packets = send_marked(ns.name, ((46, 7), (26, 3), (0, 5)), {"1:10": 7, "1:11": 8})
    # DSCP 46 -> urgent; DSCP 26 and unmarked -> bulk (the HTB default), where the kernel's own
    # IPv6 neighbour discovery on the fresh link also goes.
    assert packets["1:10"] == 7
    assert packets["1:11"] >= 8


def test_unmarked_packets_go_to_the_unmatched_class(ns: VethNs) -> None:
    # TF's own gRPC carries no DSCP: `unmatched: urgent` keeps it above the bulk (and above other
    # jobs' bulk on a shared fabric), as the switch's rendering of the same intent does.
    cfg = parse_config({"interfaces": ["ga0"], "unmatched": "urgent"})
    tree = desired_tree(cfg)
    assert tree["default"] == "1:10"
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", tree)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": tree}
    assert root_qdisc(ns.name, "ga0")["options"]["default"] == "0x10"
    packets = send_marked(ns.name, ((26, 3), (0, 5)), {"1:10": 5, "1:11": 3})
    assert packets["1:11"] == 3  # DSCP 26 only
    assert packets["1:10"] >= 5  # the unmarked ones (and the link's own neighbour discovery)


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


def test_an_earlier_geryon_tree_is_written_back_exactly(ns: VethNs) -> None:
    # What a rollback or a restore does after a config change: the nested tree comes back as it was.
    first = desired_tree(parse_config(CFG))
    urgent, bulk = CFG["classes"]
    second_cfg = {
        **CFG,
        "egress": {"rate": "300mbit", "buffer": "1mib"},
        "classes": [urgent, {**bulk, "rate": "200mbit"}],
    }
    second = desired_tree(parse_config(second_cfg))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", first)
        d.write("ga0/qdisc", second)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": second}
        d.write("ga0/qdisc", first)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": first}


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
        # a name from a tampered journal never becomes a path outside /proc/sys/net
        for bad in ("sysctl/x./../../etc/passwd", "sysctl/kernel.core_pattern", "sysctl/net..x"):
            with pytest.raises(DriverError, match="not a network sysctl name"):
                d.write(bad, "1")
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


def _foreign_nested_htb(ns: str) -> None:
    tc = ("tc",)
    ns_exec(ns, *tc, "qdisc", "add", "dev", "ga0", "root", "handle", "1:", "htb", "default", "20")
    ns_exec(ns, *tc, "class", "add", "dev", "ga0", "parent", "1:", "classid", "1:1", "htb", "rate", "1gbit")
    ns_exec(ns, *tc, "class", "add", "dev", "ga0", "parent", "1:1", "classid", "1:20", "htb", "rate", "1mbit",
            "ceil", "1gbit", "prio", "3")  # fmt: skip


def test_a_foreign_htb_tree_is_restored_exactly(ns: VethNs) -> None:
    _foreign_nested_htb(ns.name)
    ns_exec(
        ns.name, "tc", "qdisc", "add", "dev", "ga0", "parent", "1:20", "handle", "20:", "pfifo", "limit", "77"
    )
    with LinuxDriver(ns.name) as d:
        before = d.observe(["ga0/qdisc"])["ga0/qdisc"]
        assert [(c["classid"], c.get("parent")) for c in before["classes"]] == [
            ("1:1", None),
            ("1:20", "1:1"),
        ]
        d.write("ga0/qdisc", desired_tree(parse_config(CFG)))
        assert set(htb_classes(ns.name, "ga0")) == {"1:10", "1:11"}
        d.write("ga0/qdisc", before)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": before}
    classes = htb_classes(ns.name, "ga0", inner=True)
    assert {h: (c["parent"], c["prio"], c["ceil"]) for h, c in classes.items()} == {
        "1:1": (None, None, 1e9),
        "1:20": ("1:1", 3, 1e9),
    }


@pytest.mark.parametrize(
    "extra",
    [
        # a leaf the driver cannot re-create
        ("qdisc", "add", "dev", "ga0", "parent", "1:20", "handle", "20:", "tbf", "rate", "1mbit", "burst",
         "32kb", "latency", "50ms"),
        # a filter that is not a DSCP match
        ("filter", "add", "dev", "ga0", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
         "dst", "10.1.2.3/32", "flowid", "1:20"),
        # a DSCP filter on an inner class, which observe reports and write could not re-create
        ("filter", "add", "dev", "ga0", "parent", "1:1", "protocol", "ip", "prio", "1", "u32", "match", "ip",
         "dsfield", "0xb8", "0xfc", "flowid", "1:20"),
    ],
)  # fmt: skip
def test_a_foreign_htb_it_cannot_recreate_is_left_alone(ns: VethNs, extra: tuple[str, ...]) -> None:
    _foreign_nested_htb(ns.name)
    ns_exec(ns.name, "tc", *extra)
    with (
        LinuxDriver(ns.name) as d,
        pytest.raises(DriverError, match=r"'htb' \(as it is now\) was not set by Geryon"),
    ):
        d.write("ga0/qdisc", desired_tree(parse_config(CFG)))
    assert set(htb_classes(ns.name, "ga0", inner=True)) == {"1:1", "1:20"}


def test_a_hand_edited_geryon_tree_is_repaired(ns: VethNs) -> None:
    tree = desired_tree(parse_config(CFG))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", tree)
        tbf = ("tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms")
        ns_exec(ns.name, "tc", "qdisc", "replace", "dev", "ga0", "parent", "1:10", "handle", "30:", *tbf)
        assert d.observe(["ga0/qdisc"])["ga0/qdisc"]["classes"][1]["leaf"] == {"kind": "tbf"}
        d.write("ga0/qdisc", tree)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": tree}


# -- real traffic through the applied tree ---------------------------------------------------------

RATE = 100 * 10**6  # the configured egress rate of the traffic tests, bits/s
SRC, DST = "10.77.0.1", "10.77.0.2"


@pytest.fixture
def pair() -> tuple[str, str, str]:
    """(sender ns, receiver ns, sender's ifname) with the agent's config applied on the sender at
    egress rate 100 Mbit/s, through the engine as `geryon agent apply` does it."""
    with veth_pair(prefix="glt") as (a, b, ifname):
        cfg = parse_config({"interfaces": [ifname], "egress": {"rate": "100mbit"}})
        with LinuxDriver(a) as d:
            slots = [Slot(d)]
            apply_plan(make_plan(slots, cfg), slots, None)
        yield a, b, ifname


@pytest.mark.parametrize(("dscp", "minor"), [(26, "1:11"), (46, "1:10")])
def test_a_geryon_class_borrows_up_to_the_egress_rate(
    pair: tuple[str, str, str], dscp: int, minor: str
) -> None:
    a, b, ifname = pair
    nbytes = 4 << 20
    before = htb_classes(a, ifname)[minor]
    flow = Flow(nbytes, timeout=30).start(a, SRC, b, DST, dscp)
    try:
        flow.wait()
    finally:
        flow.stop()
    after = htb_classes(a, ifname)[minor]
    assert flow.seconds is not None, f"only {flow.received} of {nbytes} bytes arrived in 30 s"
    rate = 8 * nbytes / flow.seconds
    print(f"DSCP {dscp}: {nbytes} bytes in {flow.seconds:.3f} s = {rate / 1e6:.1f} Mbit/s")
    # The flow went through its Geryon class, which got far beyond its 8 kbit guarantee by borrowing
    # from the parent 1:1; the parent caps it at the egress rate (only a faster run could break that).
    assert after["bytes"] - before["bytes"] >= nbytes
    assert after["borrowed"] > before["borrowed"]
    assert rate >= 0.2 * RATE, f"{rate / 1e6:.1f} Mbit/s"
    assert rate <= 1.3 * RATE, f"{rate / 1e6:.1f} Mbit/s"


def test_the_urgent_class_goes_first_when_both_saturate_the_link(pair: tuple[str, str, str]) -> None:
    a, b, ifname = pair
    # More than either flow can send in the time allowed: both stay backlogged until stop().
    flows = [Flow(1 << 30, timeout=20).start(a, SRC, b, DST, dscp) for dscp in (46, 26)]
    try:
        time.sleep(1.0)  # both flows past slow start
        t0, first = time.monotonic(), htb_classes(a, ifname)
        time.sleep(2.0)
        t1, second = time.monotonic(), htb_classes(a, ifname)
    finally:
        for f in flows:
            f.stop()
    urgent, bulk = (second[m]["bytes"] - first[m]["bytes"] for m in ("1:10", "1:11"))
    total = 8 * (urgent + bulk) / (t1 - t0)
    print(f"both saturating: urgent {urgent} bytes, bulk {bulk} bytes, {total / 1e6:.1f} Mbit/s in all")
    assert urgent > 3 * bulk, (urgent, bulk)
    assert total >= 0.2 * RATE, f"{total / 1e6:.1f} Mbit/s"


def test_the_flat_tree_of_an_early_agent_is_repaired(ns: VethNs) -> None:
    # Classes directly under the root cannot borrow: an early agent's tree, repaired, not refused.
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "1:", "htb", "default", "11")
    for minor, prio in (("10", "0"), ("11", "1")):
        ns_exec(ns.name, "tc", "class", "add", "dev", "ga0", "parent", "1:", "classid", f"1:{minor}", "htb",
                "rate", "8kbit", "ceil", "1gbit", "prio", prio)  # fmt: skip
        ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "parent", f"1:{minor}", "handle", f"{minor}:",
                "tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms")  # fmt: skip
    tree = desired_tree(parse_config(CFG))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", tree)
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": tree}
    assert htb_classes(ns.name, "ga0")["1:10"]["parent"] == "1:1"


def _broken(tree: dict) -> dict:
    """The tree with its last class hung under a class that is not in the tree: the driver finds out
    only after the root and the classes before it exist in the kernel."""
    classes = [dict(c) for c in tree["classes"]]
    classes[-1]["parent"] = "1:99"
    return {**tree, "classes": classes}


def test_a_failed_write_puts_the_previous_geryon_tree_back(ns: VethNs) -> None:
    first = desired_tree(parse_config(CFG))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", first)
        with pytest.raises(DriverError, match=r"malformed queue description.*the previous root is back"):
            d.write("ga0/qdisc", _broken(desired_tree(parse_config({**CFG, "egress": {"rate": "2gbit"}}))))
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": first}
    # iproute2's view agrees: the old tree, whole, with its rate.
    assert htb_classes(ns.name, "ga0", inner=True)["1:1"]["ceil"] == 1e9


def test_a_failed_write_puts_a_foreign_fifo_back(ns: VethNs) -> None:
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "5:", "bfifo", "limit", "30000")
    with LinuxDriver(ns.name) as d, pytest.raises(DriverError, match=r"the previous root is back"):
        d.write("ga0/qdisc", _broken(desired_tree(parse_config(CFG))))
    root = root_qdisc(ns.name, "ga0")
    assert (root["kind"], root["handle"], root["options"]["limit"]) == ("bfifo", "5:", 30000)


def test_a_failed_write_on_a_bare_interface_leaves_the_kernel_default(ns: VethNs) -> None:
    with LinuxDriver(ns.name) as d:
        with pytest.raises(DriverError, match=r"back to the kernel's default root"):
            d.write("ga0/qdisc", _broken(desired_tree(parse_config(CFG))))
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": None}
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert htb_classes(ns.name, "ga0", inner=True) == {}


def test_an_unknown_root_kind_is_refused_before_anything_changes(ns: VethNs) -> None:
    first = desired_tree(parse_config(CFG))
    with LinuxDriver(ns.name) as d:
        d.write("ga0/qdisc", first)
        with pytest.raises(DriverError, match=r"cannot re-create a root qdisc of kind 'cake'"):
            d.write("ga0/qdisc", {"kind": "cake", "handle": "1:"})
        assert d.observe(["ga0/qdisc"]) == {"ga0/qdisc": first}


def test_two_ets_classes_share_the_link_by_their_bandwidth() -> None:
    # Jobs sharing a fabric (docs/jobs.md): their bulk classes share by weight on the hosts as on the
    # switch, not strictly; both backlogged, 3:1 of what they get.
    with veth_pair(prefix="gle") as (a, b, ifname):
        cfg = parse_config(
            {
                "interfaces": [ifname],
                "egress": {"rate": "100mbit"},
                "best_effort_bandwidth": 20,  # the NIC's ETS shares sum to 100
                "classes": [
                    {"name": "urgent", "dscp": 46, "priority": 5},
                    {"name": "bulk-a", "dscp": 26, "priority": 3, "tsa": "ets", "bandwidth": 60},
                    {"name": "bulk-b", "dscp": 18, "priority": 2, "tsa": "ets", "bandwidth": 20},
                ],
            }
        )
        with LinuxDriver(a) as d:
            slots = [Slot(d)]
            apply_plan(make_plan(slots, cfg), slots, None)
        classes = htb_classes(a, ifname, inner=True)
        assert (classes["1:11"]["prio"], classes["1:12"]["prio"]) == (1, 1)
        flows = [Flow(1 << 30, timeout=20).start(a, SRC, b, DST, dscp) for dscp in (26, 18)]
        try:
            time.sleep(1.0)  # both flows past slow start
            first = htb_classes(a, ifname)
            time.sleep(2.0)
            second = htb_classes(a, ifname)
        finally:
            for f in flows:
                f.stop()
    heavy, light = (second[m]["bytes"] - first[m]["bytes"] for m in ("1:11", "1:12"))
    print(f"both saturating: bulk-a {heavy} bytes, bulk-b {light} bytes, ratio {heavy / max(light, 1):.2f}")
    assert light > 0, "the lighter class was starved: the classes are strict, not shared"
    assert 2.0 < heavy / light < 4.5, f"bulk-a:bulk-b {heavy / light:.2f}, weights 60:20"
