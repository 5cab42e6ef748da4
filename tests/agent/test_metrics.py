"""Metrics read at scrape time from real kernel state: HTB classes on a veth in namespaces the test creates,
real marked flows through them, ethtool statistics of the veth (which has no per-priority counters)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from live_agent import View
from obs_netns import Transfer, build_htb, connect, listen, veth_pair
from prometheus_client import CollectorRegistry

from geryon import __version__
from geryon.agent.config import parse_config
from geryon.agent.flows import Flow, FlowDiscovery
from geryon.agent.jobs import JobFlow, JobRegistry, PairReport, Task, make_job
from geryon.agent.metrics import AgentCollector, flow_series, pair_counts
from geryon.agent.observe import nic_counters

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


# --- pure parts ---


def _jf(job: str, role: str, peer: str, cls: str, sent: int) -> JobFlow:
    f = Flow("10.0.0.1", 1, "10.0.0.2", 2, 46, sent, sent, 7, 100, 1, inode=1)
    return JobFlow(job, f, Task(role, 0, "h", "10.0.0.1", 1), None, peer, cls)


def test_flow_series_sum_by_labels_and_fold_beyond_the_cap() -> None:
    flows = [
        _jf("j", "ps", "worker:0", "urgent", 100),
        _jf("j", "ps", "worker:0", "urgent", 50),
        _jf("j", "ps", "worker:1", "urgent", 10),
        _jf("j", "ps", "worker:2", "bulk", 5),
        _jf("j", "ps", "worker:3", "bulk", 1),
    ]
    series, folded = flow_series(flows, cap=10)
    assert folded == 0 and len(series) == 4
    top = series[("j", "ps:0", "ps", "worker:0", "urgent")]
    assert (top.connections, top.bytes_sent, top.bytes_received, top.retransmits) == (2, 150, 14, 2)

    series, folded = flow_series(flows, cap=2)
    assert set(series) == {("j", "ps:0", "ps", "worker:0", "urgent"), ("other",) * 5}
    assert folded == 3
    other = series[("other",) * 5]
    assert (other.connections, other.bytes_sent) == (3, 16)  # nothing is lost, only aggregated
    assert sum(s.bytes_sent for s in series.values()) == 166


def test_nic_counters_pick_mlx5_priority_and_pause_names() -> None:
    stats = [
        ("rx_packets", 10),
        ("rx_prio3_bytes", 1000),
        ("tx_prio5_packets", 7),
        ("rx_prio3_pause", 4),
        ("tx_prio3_pause_duration", 250),
        ("rx_prio3_pause_transition", 2),
        ("rx_prio8_bytes", 1),  # no such 802.1p priority
        ("np_cnp_sent", 9),
        ("peer_ifindex", 3),
    ]
    c = nic_counters("eth0", stats)
    assert c.prio == {
        ("rx", 3, "bytes"): 1000,
        ("tx", 5, "packets"): 7,
        ("rx", 3, "pause"): 4,
        ("tx", 3, "pause_duration"): 250,
        ("rx", 3, "pause_transition"): 2,
    }
    assert c.roce == {"np_cnp_sent": 9}
    assert nic_counters("veth0", [("peer_ifindex", 3), ("rx_queue_0_xdp_packets", 0)]).prio == {}


def test_pair_counts_by_state() -> None:
    ps, w = Task("ps", 0, "h", "1.1.1.1", 1), Task("worker", 0, "h", "1.1.1.2", 1)
    pairs = [
        PairReport("j", ps, w, 2, (26, 46)),
        PairReport("j", ps, w, 1, (46,), missing=("bulk",)),
        PairReport("j", ps, w, 2, (10, 46), missing=("bulk",), wrong=(10,)),
    ]
    assert pair_counts(pairs) == {("j", "ok"): 1, ("j", "missing_flow"): 2, ("j", "wrong_dscp"): 1}


# --- real kernel ---


@pytest.fixture
def host() -> Iterator[tuple[str, str, str]]:
    """Sender namespace with the Geryon egress layout on its veth (urgent DSCP 46, bulk DSCP 26)."""
    with veth_pair("gfm") as (a, b, ifname):
        build_htb(a, ifname, [46, 26])
        yield a, b, ifname


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(collector: AgentCollector) -> tuple[Samples, str]:
    """One scrape: every sample by (name, labels), and the exposition text."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    samples: Samples = {}
    text = []
    for family in registry.collect():
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
            text.append(f"{s.name}{{{','.join(f'{k}={v!r}' for k, v in sorted(s.labels.items()))}}}")
    return samples, "\n".join(text)


def value(samples: Samples, name: str, **labels: str) -> Any:
    return samples.get((name, frozenset(labels.items())))


@needs_root
def test_class_and_flow_series_follow_real_traffic(host: tuple[str, str, str]) -> None:
    a, b, ifname = host
    view = View([ifname, "gmissing0"])
    jobs = JobRegistry()
    ps = listen(b, "10.77.0.2")
    worker = listen(a, "10.77.0.1")
    dst = ps.getsockname()
    jobs.register(
        make_job(
            "jm", {"ps": [f"10.77.0.2:{dst[1]}"], "worker": [f"10.77.0.1:{worker.getsockname()[1]}"]},
            view.cfg.classes,
        )
    )  # fmt: skip
    transfer = Transfer(ps)
    discovery = FlowDiscovery(netns=a)
    collector = AgentCollector(view, jobs, discovery, netns=a)
    try:
        registry, _ = scrape(collector)
        before = {
            c: value(registry, "geryon_class_sent_bytes_total", interface=ifname, **{"class": c})
            for c in ("urgent", "bulk")
        }
        transfer.add_clients([connect(a, "10.77.0.1", dst, 46), connect(a, "10.77.0.1", dst, 26)])
        transfer.send(total=2 << 20, pause=0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            registry, text = scrape(collector)
            sent = {
                c: value(
                    registry,
                    "geryon_flow_sent_bytes_total",
                    geryon_job="jm",
                    task="worker:0",
                    role="worker",
                    peer="ps:0",
                    **{"class": c},
                )
                for c in ("urgent", "bulk")
            }
            after = {
                c: value(registry, "geryon_class_sent_bytes_total", interface=ifname, **{"class": c})
                for c in ("urgent", "bulk")
            }
            # The socket counts a byte when it hands it to IP; the class queue when it leaves the
            # shaped queue, later: wait for both (under load the bulk class lagged by ~90 KB).
            if all(v is not None and v >= 2 << 20 for v in sent.values()) and all(
                (after[c] or 0) - (before[c] or 0) >= 2 << 20 for c in after
            ):
                break
            time.sleep(0.1)
        # Each class queue carried its flow's 2 MiB (plus headers and ACK-free overhead).
        for c in ("urgent", "bulk"):
            assert after[c] - before[c] >= 2 << 20, (c, before, after)
            assert value(registry, "geryon_class_sent_packets_total", interface=ifname, **{"class": c}) > 0
            assert (
                value(registry, "geryon_class_dropped_packets_total", interface=ifname, **{"class": c}) == 0
            )
            assert value(registry, "geryon_class_backlog_bytes", interface=ifname, **{"class": c}) is not None
            labels = {"geryon_job": "jm", "task": "worker:0", "role": "worker", "peer": "ps:0", "class": c}
            assert value(registry, "geryon_flow_connections", **labels) == 1
            assert value(registry, "geryon_flow_rtt_seconds", **labels) > 0
        assert value(registry, "geryon_egress_queues_present", interface=ifname) == 1
        assert value(registry, "geryon_egress_queues_present", interface="gmissing0") == 0
        assert value(registry, "geryon_job_pairs", geryon_job="jm", state="ok") == 1
        assert value(registry, "geryon_flow_series_folded") == 0
        # veth has no per-priority counters: no NIC series, and no error either.
        assert (
            "geryon_nic_priority_bytes_total{" not in text
            and "geryon_nic_pfc_pause_frames_total{" not in text
        )
        for section in AgentCollector.SECTIONS:
            assert value(registry, "geryon_scrape_errors_total", section=section) == 0, section
        assert 0 < value(registry, "geryon_scrape_duration_seconds") < 10

        # The cap: with room for one series only, both classes fold into "other" and are counted.
        capped = AgentCollector(view, jobs, discovery, netns=a, max_flow_series=1)
        try:
            reg2, text2 = scrape(capped)
            assert (
                value(
                    reg2,
                    "geryon_flow_connections",
                    geryon_job="other",
                    task="other",
                    role="other",
                    peer="other",
                    **{"class": "other"},
                )
                == 2
            )
            assert value(reg2, "geryon_flow_series_folded") == 2
            assert "peer='ps:0'" not in text2 and "peer='other'" in text2
        finally:
            capped.close()
    finally:
        transfer.stop()
        worker.close()
        collector.close()
        discovery.close()


@needs_root
def test_jobs_config_and_a_failing_section(host: tuple[str, str, str]) -> None:
    a, _, ifname = host
    view = View([ifname])
    jobs = JobRegistry()
    jobs.register(make_job("jx", {"ps": ["10.0.0.1:1"], "worker": ["10.0.0.2:1"]}, view.cfg.classes))
    jobs.report("jx", 0.125, [0.4])
    changed_at = jobs.get("jx").threshold_changed_at
    jobs.register(make_job("jy", {"ps": ["10.0.0.1:2"], "worker": ["10.0.0.2:2"]}, view.cfg.classes))
    discovery = FlowDiscovery(netns=a)
    collector = AgentCollector(view, jobs, discovery, netns=a)
    try:
        registry, _ = scrape(collector)
        assert value(registry, "geryon_job_iteration_seconds", geryon_job="jx") == 0.125
        assert value(registry, "geryon_job_threshold", geryon_job="jx", boundary="0") == 0.4
        assert value(registry, "geryon_job_classes", geryon_job="jx") == 2
        assert value(registry, "geryon_job_reports_total", geryon_job="jx") == 1
        assert value(registry, "geryon_job_threshold_changes_total", geryon_job="jx") == 1
        assert (
            value(registry, "geryon_job_threshold_changed_timestamp_seconds", geryon_job="jx") == changed_at
        )
        assert value(registry, "geryon_config_in_sync") == 1
        assert value(registry, "geryon_config_last_apply_timestamp_seconds") == 1_700_000_000.0

        # A job that reported nothing yet: zero counters, and no change timestamp at all.
        assert value(registry, "geryon_job_reports_total", geryon_job="jy") == 0
        assert value(registry, "geryon_job_threshold_changes_total", geryon_job="jy") == 0
        assert value(registry, "geryon_job_threshold_changed_timestamp_seconds", geryon_job="jy") is None
        jobs.report("jx", 0.125, [0.4])  # the same thresholds again: an iteration, not a change
        jobs.report("jx", 0.120, [0.5])
        registry, _ = scrape(collector)
        assert value(registry, "geryon_job_reports_total", geryon_job="jx") == 3
        assert value(registry, "geryon_job_threshold_changes_total", geryon_job="jx") == 2
        assert (
            value(registry, "geryon_job_threshold_changed_timestamp_seconds", geryon_job="jx") >= changed_at
        )

        view.drifted = ["geth0/qdisc"]
        registry, _ = scrape(collector)
        assert value(registry, "geryon_config_in_sync") == 0
        assert value(registry, "geryon_config_drifted_targets") == 1

        view.fail = True
        registry, _ = scrape(collector)
        registry, _ = scrape(collector)
        assert value(registry, "geryon_scrape_errors_total", section="config") == 2
        assert value(registry, "geryon_config_in_sync") is None  # the broken section exports nothing
        assert (
            value(registry, "geryon_class_sent_bytes_total", interface=ifname, **{"class": "urgent"})
            is not None
        )
    finally:
        collector.close()
        discovery.close()


@needs_root
def test_ethtool_statistics_are_read_inside_the_namespace(host: tuple[str, str, str]) -> None:
    a, _, ifname = host
    with FlowDiscovery(netns=a) as discovery:
        collector = AgentCollector(View([ifname]), JobRegistry(), discovery, netns=a)
        try:
            # veth answers ETHTOOL_GSTATS (with peer_ifindex, per-queue XDP counters), just no priorities.
            names = [n for n, _ in collector.kernel.ethtool_stats(ifname)]
            assert "peer_ifindex" in names
            assert nic_counters(ifname, collector.kernel.ethtool_stats(ifname)).prio == {}
            assert collector.kernel.ethtool_stats("lo") == []  # no statistics at all
            assert collector.kernel.ethtool_stats("gnosuch0") == []  # not in this namespace
        finally:
            collector.close()


@needs_root
def test_concurrent_scrapes_each_get_a_whole_snapshot(host: tuple[str, str, str]) -> None:
    a, _, ifname = host
    view = View([ifname])
    jobs = JobRegistry()
    jobs.register(make_job("jc", {"ps": ["10.0.0.1:1"], "worker": ["10.0.0.2:1"]}, view.cfg.classes))
    with FlowDiscovery(netns=a) as discovery:
        collector = AgentCollector(view, jobs, discovery, netns=a)
        results: list[Samples] = []
        try:
            threads = [
                threading.Thread(target=lambda: results.append(scrape(collector)[0])) for _ in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
        finally:
            collector.close()
    assert len(results) == 6
    for samples in results:
        assert value(samples, "geryon_job_classes", geryon_job="jc") == 2
        assert (
            value(samples, "geryon_class_sent_bytes_total", interface=ifname, **{"class": "bulk"}) is not None
        )
        assert all(
            value(samples, "geryon_scrape_errors_total", section=s) == 0 for s in AgentCollector.SECTIONS
        )


def test_class_info_and_agent_info_come_from_the_config_without_queues() -> None:
    # No namespace, no HTB: the interface does not exist, yet every configured class has its info series.
    view = View(["gnosuch0"])
    view.cfg = parse_config(
        {
            "interfaces": ["gnosuch0"],
            "classes": [
                {"name": "urgent", "dscp": 46, "priority": 5, "lossless": True, "tsa": "strict"},
                {"name": "bulk", "dscp": 26, "priority": 3, "lossless": False, "bandwidth": 50},
            ],
        }
    )
    with FlowDiscovery() as discovery:
        collector = AgentCollector(view, JobRegistry(), discovery)
        try:
            samples, _ = scrape(collector)
        finally:
            collector.close()
    info = {labels: v for (name, labels), v in samples.items() if name == "geryon_class_info"}
    assert info == {
        frozenset({"class": "urgent", "dscp": "46", "priority": "5", "lossless": "true"}.items()): 1,
        frozenset({"class": "bulk", "dscp": "26", "priority": "3", "lossless": "false"}.items()): 1,
    }
    assert value(samples, "geryon_agent_info", version=__version__) == 1
    assert value(samples, "geryon_egress_queues_present", interface="gnosuch0") == 0
    assert not any(name == "geryon_class_sent_bytes_total" for name, _ in samples)


def test_cap_must_be_positive() -> None:
    with FlowDiscovery() as discovery, pytest.raises(ValueError, match="max_flow_series: 0"):
        AgentCollector(View(["eth0"]), JobRegistry(), discovery, max_flow_series=0)
