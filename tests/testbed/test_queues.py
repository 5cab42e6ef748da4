"""The testbed's queue configurations agree with the intent, the host agent and the fabric renderer."""

from __future__ import annotations

from geryon.agent.linux_driver import desired_tree
from geryon.fabric.intent import default_intent, parse_intent
from geryon.fabric.render.linux import fifo_tree, port_trees
from geryon.testbed.queues import host_classes, host_config, host_fifo_tree, switch_port, switch_trees
from geryon.testbed.spec import TestbedSpec

THREE = parse_intent(
    {
        "name": "three",
        "classes": [
            {"name": "urgent", "dscp": [46, 40], "priority": 5, "lossless": True, "scheduler": "strict"},
            {"name": "mid", "dscp": 34, "priority": 4, "scheduler": "strict"},
            {"name": "bulk", "dscp": [26, 0], "priority": 3, "lossless": True, "weight": 100},
        ],
        "unmatched": "bulk",
    }
)


def _dscp_classes(tree: dict) -> dict[int, str]:
    return {f["dscp"]: f["classid"] for f in tree["filters"] if f["protocol"] == "ip"}


def test_host_config_is_what_the_agent_would_apply() -> None:
    spec = TestbedSpec(rate_bits=50_000_000, buffer_bytes=128 * 1024)
    cfg = host_config(spec)
    assert cfg.interfaces == ("eth0",)
    assert (cfg.dcb, cfg.rdma) == ("off", "off")  # veth has neither; the plan must not even try
    assert dict(cfg.sysctls) == {"net.ipv4.tcp_reflect_tos": "1"}
    assert (cfg.egress.rate_bits, cfg.egress.buffer_bytes, cfg.egress.burst_bytes) == (
        50_000_000,
        128 * 1024,
        spec.burst,
    )
    # The default intent's classes are the agent's default classes.
    assert [(c.name, c.dscps, c.priority, c.lossless, c.tsa) for c in cfg.classes] == [
        ("urgent", (46,), 5, True, "strict"),
        ("bulk", (26,), 3, True, "ets"),
    ]
    assert cfg.cnp is not None and (cfg.cnp.dscp, cfg.cnp.priority) == (48, 6)


def test_host_and_switch_put_every_dscp_in_the_same_class_index() -> None:
    for intent in (default_intent(), THREE):
        spec = TestbedSpec(hosts=("a", "b"), intent=intent)
        host = desired_tree(host_config(spec))
        switch = switch_trees(spec, "priority")[switch_port("a")]
        want = {d: f"1:{0x10 + i:x}" for i, c in enumerate(intent.classes) for d in c.dscp}
        assert {d: c for d, c in _dscp_classes(host).items()} == want
        # The switch also steers the CNP DSCP into the most urgent class.
        assert {d: c for d, c in _dscp_classes(switch).items() if d != 48} == want
        assert host["default"] == switch["default"] == f"1:{0x10 + len(intent.classes) - 1:x}"
        assert [c.name for c in host_classes(intent)] == [c.name for c in intent.classes]


def test_switch_trees_are_the_fabric_renderers() -> None:
    spec = TestbedSpec(hosts=("ps0", "worker0"), rate_bits=30_000_000, buffer_bytes=64 * 1024)
    trees = switch_trees(spec, "priority")
    assert list(trees) == ["p-ps0", "p-worker0"]
    assert trees == port_trees(
        default_intent(), ["p-ps0", "p-worker0"], rate_bits=30_000_000, buffer_bytes=64 * 1024
    )
    assert trees.burst_bytes == spec.burst
    fifo = switch_trees(spec, "fifo")
    assert fifo == {p: fifo_tree(64 * 1024, rate_bits=30_000_000) for p in trees}
    assert fifo.burst_bytes == spec.burst
    leaves = [c for c in fifo["p-ps0"]["classes"] if c["leaf"]]
    assert len(leaves) == 1 and leaves[0]["ceil_bits"] == 30_000_000 and fifo["p-ps0"]["filters"] == []
    assert host_fifo_tree(spec) == fifo["p-ps0"]


def test_host_and_switch_share_out_two_dwrr_classes_alike() -> None:
    # Two weighted bulk queues (issue 39: bands' bulks shared by weight, not strictly): on the hosts
    # as on the switch, both classes at one HTB prio after the strict ones, quanta 3:1.
    intent = parse_intent(
        {
            "name": "weighted",
            "classes": [
                {"name": "c0", "dscp": 46, "priority": 5, "scheduler": "strict"},
                {"name": "c1", "dscp": 34, "priority": 4, "scheduler": "strict"},
                {"name": "c2", "dscp": 26, "priority": 3, "weight": 75},
                {"name": "c3", "dscp": 18, "priority": 2, "weight": 25},
            ],
            "unmatched": "c0",
        }
    )
    spec = TestbedSpec(hosts=("a", "b"), intent=intent)
    host = desired_tree(host_config(spec))
    switch = switch_trees(spec, "priority")[switch_port("a")]

    def sched(tree: dict) -> list[tuple[str, int, int | None]]:
        return [(c["classid"], c["prio"], c.get("quantum")) for c in tree["classes"] if "parent" in c]

    assert sched(host) == sched(switch)
    assert sched(host) == [
        ("1:10", 0, None),
        ("1:11", 1, None),
        ("1:12", 2, 3 * 64 * 1024),
        ("1:13", 2, 64 * 1024),
    ]
    assert host["default"] == switch["default"] == "1:10"
