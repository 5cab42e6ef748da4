"""The Linux software-switch renderer: driver-shaped trees, written to real kernel queues in namespaces
the tests create, read back by pyroute2 and by iproute2, and real marked traffic through them."""

from __future__ import annotations

import copy
import subprocess
import time
from typing import Any

import pytest
from agent.agent_netns import Flow, htb_classes, ns_exec, root_qdisc, tc_json, veth_ns
from obs_netns import veth_pair

from geryon.agent import linux_driver
from geryon.agent.config import parse_config
from geryon.agent.driver import DriverError
from geryon.fabric.intent import IntentError, default_intent, parse_intent
from geryon.fabric.render import linux
from geryon.fabric.render.linux import (
    ApplyError,
    apply_ports,
    fifo_tree,
    observe_ports,
    port_trees,
    tc_commands,
)

THREE = {
    "name": "three",
    "classes": [
        {"name": "urgent", "dscp": [46, 40], "priority": 5, "lossless": True, "scheduler": "strict"},
        {"name": "bulk", "dscp": 26, "priority": 3, "lossless": True, "weight": 70},
        {"name": "other", "dscp": [0, 10], "priority": 1, "weight": 30},
    ],
    "unmatched": "other",
    "ports": {"linux": "sw0,sw1"},
}


def test_constants_mirror_the_driver() -> None:
    assert linux.PARENT_MINOR == linux_driver.PARENT_MINOR
    assert linux.FIRST_MINOR == linux_driver.FIRST_MINOR
    assert linux.GUARANTEED_BITS == linux_driver.GUARANTEED_BYTES_S * 8
    assert linux.FILTER_PREF == linux_driver.FILTER_PREF
    assert linux.QUANTUM == linux_driver.DEFAULT_QUANTUM


def test_default_tree_is_the_agents_host_tree_plus_cnp() -> None:
    intent = default_intent()
    trees = port_trees(intent, ["p0", "p1"], rate_bits=200_000_000, buffer_bytes=300_000)
    assert list(trees) == ["p0", "p1"] and trees.burst_bytes == 64 * 1024
    agent = parse_config({"interfaces": ["p0"], "egress": {"rate": "200mbit", "buffer": 300_000}})
    want = linux_driver.desired_tree(agent)
    # The CNP DSCP rides in the most urgent class; otherwise the switch port is the host's tree.
    want["filters"] = sorted(
        [
            *want["filters"],
            {"protocol": "ip", "dscp": 48, "classid": "1:10"},
            {"protocol": "ipv6", "dscp": 48, "classid": "1:10"},
        ],
        key=linux_driver._filter_key,
    )
    assert trees["p0"] == want


def test_three_classes_strict_first_dwrr_share_one_prio() -> None:
    intent = parse_intent(THREE)
    tree = port_trees(intent, rate_bits=10**9)["sw0"]
    kids = {c["classid"]: c for c in tree["classes"] if "parent" in c}
    assert {k: c["prio"] for k, c in kids.items()} == {"1:10": 0, "1:11": 1, "1:12": 1}
    # DWRR weights 70/30 as HTB quanta: the lighter class 64 KiB per turn (the largest GSO packet), the
    # heavier 70/30 of that; the strict class keeps the driver's default (no key).
    assert {k: c.get("quantum") for k, c in kids.items()} == {"1:10": None, "1:11": 152917, "1:12": 65536}
    assert all(c["ceil_bits"] == 10**9 and c["rate_bits"] == 8000 for c in kids.values())
    assert tree["default"] == "1:12"
    by_dscp = {(f["protocol"], f["dscp"]): f["classid"] for f in tree["filters"]}
    assert by_dscp[("ip", 40)] == by_dscp[("ipv6", 46)] == by_dscp[("ip", 48)] == "1:10"
    assert by_dscp[("ip", 10)] == "1:12" and len(by_dscp) == 2 * 6


def test_dwrr_quanta_follow_the_weights() -> None:
    def quanta(*weights: int) -> dict[str, int]:
        classes = [{"name": "urgent", "dscp": 46, "priority": 5, "scheduler": "strict"}]
        classes += [
            {"name": f"c{i}", "dscp": 10 + i, "priority": i, "weight": w} for i, w in enumerate(weights)
        ]
        return linux.dwrr_quanta(parse_intent({"name": "q", "classes": classes}))

    assert quanta(100) == {} and quanta(50, 50) == {}  # equal shares: HTB's default quantum
    assert quanta(1, 99) == {"c0": 65536, "c1": 99 * 65536}
    assert quanta(50, 25, 25) == {"c0": 131072, "c1": 65536, "c2": 65536}


def test_bad_port_and_sizes_are_intent_errors() -> None:
    with pytest.raises(IntentError, match="ports: no linux ports"):
        port_trees(default_intent())
    with pytest.raises(IntentError, match="ports: 'a b' is not a port selection for linux"):
        port_trees(default_intent(), "a b")
    with pytest.raises(IntentError, match="buffer: 100 bytes is out of range"):
        port_trees(default_intent(), ["p0"], buffer_bytes=100)


def test_fifo_trees() -> None:
    assert fifo_tree(128_000) == {"kind": "bfifo", "handle": "1:", "limit": 128_000}
    shaped = fifo_tree(128_000, rate_bits=100_000_000)
    assert shaped["filters"] == [] and shaped["default"] == "1:10"
    assert [c["classid"] for c in shaped["classes"]] == ["1:1", "1:10"]


@pytest.fixture
def switch() -> Any:
    with veth_ns(3, prefix="gfl") as v:
        yield v


def test_apply_ports_writes_and_verifies_real_queues(switch: Any) -> None:
    intent = parse_intent(THREE)
    trees = port_trees(intent, list(switch.ifnames[:2]), rate_bits=100_000_000, buffer_bytes=200_000)
    apply_ports(trees, netns=switch.name)
    assert observe_ports(switch.ifnames[:2], switch.name) == dict(trees)
    assert observe_ports([switch.ifnames[2]], switch.name) == {switch.ifnames[2]: None}  # untouched
    # iproute2's view, independent of pyroute2
    root = root_qdisc(switch.name, "ga0")
    assert root is not None and root["kind"] == "htb" and root["options"]["default"] == "0x12"
    classes = htb_classes(switch.name, "ga0")
    assert {h: (c["prio"], c["ceil"]) for h, c in classes.items()} == {
        "1:10": (0, 1e8),
        "1:11": (1, 1e8),
        "1:12": (1, 1e8),
    }
    leaves = {
        q["parent"]: q["options"]["limit"] for q in tc_json(switch.name, "qdisc", "ga0") if not q.get("root")
    }
    assert leaves == {"1:10": 200_000, "1:11": 200_000, "1:12": 200_000}
    # Applying again is a no-op; switching to FIFO and back replaces the root each time.
    apply_ports(trees, netns=switch.name)
    fifo = {p: fifo_tree(100_000, rate_bits=100_000_000) for p in switch.ifnames[:2]}
    apply_ports(fifo, netns=switch.name)
    assert observe_ports(switch.ifnames[:2], switch.name) == fifo
    plain = {"ga0": fifo_tree(50_000)}
    apply_ports(plain, netns=switch.name)
    q = root_qdisc(switch.name, "ga0")
    assert q is not None and q["kind"] == "bfifo" and q["options"]["limit"] == 50_000
    apply_ports(trees, netns=switch.name)
    assert observe_ports(["ga0"], switch.name)["ga0"] == trees["ga0"]


def test_apply_ports_checks_every_port_before_writing(switch: Any) -> None:
    trees = port_trees(default_intent(), ["ga0", "nosuch0"])
    with pytest.raises(DriverError, match="no interface 'nosuch0'"):
        apply_ports(trees, netns=switch.name)
    assert observe_ports(["ga0"], switch.name) == {"ga0": None}  # nothing half-applied


def test_a_failed_write_puts_the_written_ports_back(switch: Any) -> None:
    ns_exec(switch.name, "tc", "qdisc", "add", "dev", "ga1", "root", "handle", "1:", "pfifo", "limit", "77")
    good = port_trees(default_intent(), ["ga0"])["ga0"]
    bad = {"kind": "tbf", "handle": "1:"}  # a root the driver cannot create
    with pytest.raises(DriverError, match="cannot re-create a root qdisc of kind 'tbf'"):
        apply_ports({"ga0": good, "ga1": bad}, netns=switch.name)
    assert observe_ports(["ga0", "ga1"], switch.name) == {
        "ga0": None,  # written, then put back
        "ga1": {"kind": "pfifo", "handle": "1:", "limit": 77},  # its root was removed, then re-created
    }


def test_apply_ports_raises_when_the_kernel_disagrees(switch: Any) -> None:
    tree = copy.deepcopy(port_trees(default_intent(), ["ga0"])["ga0"])
    tree["classes"][0]["rate_bits"] += 3  # the kernel keeps bytes/s: it cannot hold this
    with pytest.raises(ApplyError, match="switch ports ga0: the kernel reports queues other than"):
        apply_ports({"ga0": tree}, netns=switch.name)


def test_tc_commands_build_the_same_queues(switch: Any) -> None:
    trees = port_trees(parse_intent(THREE), ["ga1", "ga2"], rate_bits=50_000_000, buffer_bytes=100_000)
    script = tc_commands(trees)
    assert script.startswith("#!/bin/sh\n") and script.count("tc qdisc add dev ga1 root") == 1
    # Run it twice (the second run replaces the first) with iproute2, read back with the driver.
    for _ in range(2):
        subprocess.run(["ip", "netns", "exec", switch.name, "sh", "-c", script], check=True, timeout=30)
    assert observe_ports(["ga1", "ga2"], switch.name) == dict(trees)
    fifo = tc_commands({"ga1": fifo_tree(64_000)})
    subprocess.run(["ip", "netns", "exec", switch.name, "sh", "-c", fifo], check=True, timeout=30)
    assert observe_ports(["ga1"], switch.name) == {"ga1": fifo_tree(64_000)}


def test_marked_traffic_lands_in_its_class() -> None:
    """Four real TCP flows (DSCP 46, 26, the CNP DSCP 48 and 8, which no class names) across a veth whose
    egress carries the switch-port queues: each class's counters grow by what its DSCPs sent."""
    intent = parse_intent(THREE)
    with veth_pair("gft") as (a, b, ifname):
        apply_ports(port_trees(intent, [ifname], rate_bits=100_000_000), netns=a)
        before = htb_classes(a, ifname)
        sizes = {46: 300_000, 26: 600_000, 8: 150_000, 48: 100_000}  # 8: no class names it; 48: CNP
        flows = []
        try:
            for dscp, n in sizes.items():
                flows.append(Flow(nbytes=n, timeout=20).start(a, "10.77.0.1", b, "10.77.0.2", dscp))
            deadline = time.monotonic() + 20
            while any(f.received < f.nbytes for f in flows) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            for f in flows:
                f.stop()
        assert [f.received for f in flows] == list(sizes.values())
        after = htb_classes(a, ifname)
        grew = {h: after[h]["bytes"] - before[h]["bytes"] for h in after}
        # payload + headers; the other classes see at most a few control packets (SYN/FIN, ~1 KB)
        assert 400_000 <= grew["1:10"] < 400_000 * 1.2 + 5_000, grew  # urgent + CNP (never starved)
        assert 600_000 <= grew["1:11"] < 600_000 * 1.2 + 5_000, grew
        assert 150_000 <= grew["1:12"] < 150_000 * 1.2 + 5_000, grew
        ns_exec(a, "tc", "qdisc", "del", "dev", ifname, "root")


def test_golden() -> None:
    from fabric.golden_files import check_golden

    assert len(check_golden("linux")) >= 3


def test_strict_class_goes_first_and_dwrr_classes_share_by_weight() -> None:
    """The 3-class intent on a real 20 Mbit/s port: while two DWRR classes (bulk 70%, background 30%)
    keep the port busy, an urgent (strict) transfer gets nearly the whole link; then the DWRR classes
    share the link by their weights."""
    intent = parse_intent(THREE)
    rate = 20_000_000
    with veth_pair("gfs") as (a, b, ifname):
        apply_ports(port_trees(intent, [ifname], rate_bits=rate, buffer_bytes=256 * 1024), netns=a)
        flows = []
        try:
            bulk = Flow(nbytes=50 << 20, timeout=3).start(a, "10.77.0.1", b, "10.77.0.2", 26)
            background = Flow(nbytes=50 << 20, timeout=3).start(a, "10.77.0.1", b, "10.77.0.2", 10)
            flows += [bulk, background]
            time.sleep(0.5)  # both DWRR queues busy
            urgent_bytes = 1_000_000  # 0.4 s at line rate; 1.2 s if the link were shared three ways
            urgent = Flow(nbytes=urgent_bytes, timeout=3).start(a, "10.77.0.1", b, "10.77.0.2", 46)
            flows.append(urgent)
            urgent.wait()
            time.sleep(0.2)  # the queues settle back to two classes
            mid = (bulk.received, background.received)
            time.sleep(1.0)
            after = (bulk.received, background.received)
        finally:
            for f in flows:
                f.stop()
        assert urgent.seconds is not None, "the urgent transfer did not finish"
        assert urgent.seconds < 0.8, f"urgent took {urgent.seconds:.2f} s for 1 MB at 20 Mbit/s"
        # after urgent finished, both DWRR classes moved, and by their weights (70:30 = 2.33)
        moved = [now - before for before, now in zip(mid, after, strict=True)]
        assert all(m > rate / 8 * 1.0 / 6 for m in moved), moved
        assert 1.7 < moved[0] / moved[1] < 3.2, f"bulk:background {moved[0] / moved[1]:.2f}, weights 70:30"
