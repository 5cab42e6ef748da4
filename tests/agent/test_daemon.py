"""`geryon agent run` as a real subprocess in a namespace the test made: apply on start, drift repair
from netlink events within 5 s, SIGHUP reload (a bad config keeps the old one), SIGTERM, and restore
of the pre-Geryon state from the journal after the daemon is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent.agent_netns import VethNs, htb_classes, ns_exec, read_sysctl, root_qdisc, veth_ns
from geryon_cli import geryon
from jobs.etcd_server import start_cluster

from geryon.jobs import etcd, keys


class Daemon:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "geryon", "agent", "run", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_log(self, *words: str, after: int = 0, timeout: float = 20) -> int:
        """Index of the first log line from `after` on that has all `words`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                if all(w in self.lines[i] for w in words):
                    return i
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no log line with {words} in {timeout} s; log:\n" + "\n".join(self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by PID, only the process this test started
            self.proc.wait(10)


def wait_until(check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


@pytest.fixture
def ns() -> Iterator[VethNs]:
    with veth_ns(2, prefix="gdm") as v:
        yield v


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def daemon_args(ns: VethNs, config: Path, journal: Path, interval: str = "60") -> list[str]:
    return [
        "--config", str(config), "--netns", ns.name, "--journal", str(journal), "--interval", interval,
        "--debounce", "0.1", "--api-socket", "", "--metrics", "",
    ]  # fmt: skip


def test_daemon_applies_repairs_reloads_and_exits_cleanly(ns: VethNs, tmp_path: Path) -> None:
    # A pre-existing root qdisc on ga0: restore must bring it back after the daemon is gone.
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "3:", "pfifo", "limit", "55")
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0, ga1]\negress: {rate: 1gbit}\n")
    journal = tmp_path / "journal.json"
    d = Daemon(*daemon_args(ns, config, journal))
    try:
        d.wait_log("event=applied", "reason=start", "changes=3")
        assert root_qdisc(ns.name, "ga0")["kind"] == "htb" and root_qdisc(ns.name, "ga1")["kind"] == "htb"
        assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "1"

        # Drift: someone deletes the qdisc by hand. The netlink event (the periodic verify is 60 s
        # away) makes the daemon re-apply.
        mark = len(d.lines)
        ns_exec(ns.name, "tc", "qdisc", "del", "dev", "ga1", "root")
        took = wait_until(lambda: (root_qdisc(ns.name, "ga1") or {}).get("kind") == "htb", timeout=5)
        assert took < 5
        d.wait_log("event=drift", "target=ga1/qdisc", after=mark)
        d.wait_log("event=applied", "reason=netlink", "targets=ga1/qdisc", after=mark)
        assert set(htb_classes(ns.name, "ga1")) == {"1:10", "1:11"}

        # SIGHUP with a broken config: logged, the old config stays in force.
        mark = len(d.lines)
        config.write_text("interfaces: [ga0, ga1]\nclasses: [{name: u, dscp: 99, priority: 5}]\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("event=reload_rejected", "classes[0].dscp: 99 is out of range", after=mark)
        assert d.proc.poll() is None
        assert htb_classes(ns.name, "ga0")["1:10"]["ceil"] == 1e9

        # SIGHUP with a good config: applied.
        mark = len(d.lines)
        config.write_text("interfaces: [ga0, ga1]\negress: {rate: 300mbit}\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("event=reloaded", after=mark)
        d.wait_log("event=applied", "reason=reload", after=mark)
        assert htb_classes(ns.name, "ga0")["1:10"]["ceil"] == 300e6

        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(10) == 0
        d.wait_log("event=stop")
        # Every log line is key=value, starting with a timestamp.
        assert all(line.startswith("ts=") and " event=" in line for line in d.lines), d.lines
    finally:
        d.stop()

    # The agent is gone (as after a restart); the journal on disk still knows the original state.
    assert journal.exists()
    r = geryon("agent", "restore", "--netns", ns.name, "--journal", str(journal))
    assert r.returncode == 0, r.stderr
    root = root_qdisc(ns.name, "ga0")
    assert (root["kind"], root["handle"], root["options"]["limit"]) == ("pfifo", "3:", 55)
    assert root_qdisc(ns.name, "ga1")["kind"] == "noqueue"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"


def test_daemon_registers_its_host_in_the_cluster_view(ns: VethNs, tmp_path: Path) -> None:
    """With --etcd the daemon puts agents/<host> under its lease beside applying the host config, and
    SIGTERM revokes it (the host leaves the view at once, not after the ttl)."""
    cluster = start_cluster(1)
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0, ga1]\n")
    args = daemon_args(ns, config, tmp_path / "journal.json")
    d = Daemon(*args, "--etcd", cluster.endpoints[0], "--cluster-host", "gdm-host", "--cluster-ttl", "3")
    try:
        client = etcd.Client(cluster.endpoints)
        d.wait_log("event=applied", "reason=start")
        d.wait_log("event=cluster_registered", "host=gdm-host")
        kv = client.get(keys.agent(keys.DEFAULT_PREFIX, "gdm-host"))
        assert kv is not None and kv.lease != 0
        d.wait_log("event=cluster_view", "live")
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(10) == 0
        assert client.get(keys.agent(keys.DEFAULT_PREFIX, "gdm-host")) is None
    finally:
        d.stop()
        cluster.stop()


def test_periodic_verify_repairs_drift_that_sends_no_netlink_event(ns: VethNs, tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0]\n")
    d = Daemon(*daemon_args(ns, config, tmp_path / "journal.json", interval="0.5"))
    try:
        d.wait_log("event=applied", "reason=start")
        mark = len(d.lines)
        ns_exec(ns.name, "sysctl", "-qw", "net.ipv4.tcp_reflect_tos=0")
        wait_until(lambda: read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "1", timeout=5)
        # No netlink event announces a sysctl write; the periodic verify (or a wake-up that happens to
        # follow) repairs it.
        d.wait_log("event=applied", "targets=sysctl/net.ipv4.tcp_reflect_tos", after=mark)
        os.kill(d.proc.pid, signal.SIGTERM)
        assert d.proc.wait(10) == 0
    finally:
        d.stop()


def test_daemon_refuses_a_bad_config_at_start(ns: VethNs, tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0]\ntrust: vlan\n")
    d = Daemon(*daemon_args(ns, config, tmp_path / "journal.json"))
    try:
        assert d.proc.wait(30) == 2
        d.wait_log("geryon agent: error: ", "trust: expected one of dscp, pcp")
        assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    finally:
        d.stop()


def test_api_and_metrics_report_the_daemons_sync_state(ns: VethNs, tmp_path: Path) -> None:
    """The daemon's AgentView through its services: `geryon agent status` over the unix socket and a
    metrics scrape both see in-sync, then drift while the daemon cannot repair it."""
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0]\n")
    sock = tmp_path / "agent.sock"
    args = daemon_args(ns, config, tmp_path / "journal.json")
    args[args.index("--api-socket") + 1] = str(sock)
    args[args.index("--metrics") + 1] = "127.0.0.1:0"
    d = Daemon(*args)
    try:
        line = d.lines[d.wait_log("event=services")]
        port = int(line.rsplit("metrics=127.0.0.1:", 1)[1].split()[0])
        d.wait_log("event=applied", "reason=start")
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        r = geryon("agent", "status", "--api-socket", str(sock))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "config: in sync" in r.stdout and "interfaces ga0" in r.stdout
        assert "geryon_config_in_sync 1.0" in scrape(port)

        # The interface goes away: the daemon cannot repair that, and says so everywhere.
        mark = len(d.lines)
        ns_exec(ns.name, "ip", "link", "del", "ga0")
        d.wait_log("event=verify_failed", "no interface 'ga0'", after=mark)
        r = geryon("agent", "status", "--api-socket", str(sock))
        assert r.returncode == 1 and "config: DRIFT in 1 target(s)" in r.stdout
        assert "interfaces[0]: no interface 'ga0'" in r.stdout
        assert "geryon_config_in_sync 0.0" in scrape(port)

        # The link comes back (a driver reload, a hot-plugged NIC): its netlink event gets it configured.
        mark = len(d.lines)
        ns_exec(ns.name, "ip", "link", "add", "ga0", "type", "veth", "peer", "name", "ga0p")
        d.wait_log("event=applied", "reason=netlink", "targets=ga0/qdisc", after=mark)
        assert root_qdisc(ns.name, "ga0")["kind"] == "htb"
        assert "geryon_config_in_sync 1.0" in scrape(port)
    finally:
        d.stop()


# --- DCB changes by other tools wake the loop (dcbnl notifications, RTNLGRP_DCB) --------------------


def test_a_dcb_change_by_another_tool_wakes_the_loop_at_once() -> None:
    import io

    from agent.dcb_fake import FakeDcbKernel, FakeNic

    from geryon.agent.daemon import Log, watch_dcb
    from geryon.agent.dcbnl import DcbnlClient, Pfc

    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    sock = kernel.event_socket()
    wake, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=watch_dcb, args=(None, wake, Log(io.StringIO()), ready, lambda: sock))
    t.start()
    try:
        assert ready.wait(5) and not wake.is_set()
        start = time.monotonic()
        with DcbnlClient(sock_factory=kernel.socket) as other_tool:  # e.g. mlnx_qos turning PFC on
            other_tool.set_pfc("eth0", Pfc(pfc_en=0b1000))
        assert wake.wait(5), "no wake-up for a DCB change"
        assert time.monotonic() - start < 1.0  # not the 30 s periodic verify
    finally:
        sock.close()
        t.join(5)
    assert not t.is_alive()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_the_real_kernel_accepts_the_dcb_group_subscription(ns: VethNs) -> None:
    from geryon.agent.dcbnl import RTMGRP_DCB, dcb_event_socket

    sock = dcb_event_socket(ns.name)
    try:
        _pid, groups = sock.getsockname()
        assert groups & RTMGRP_DCB
    finally:
        sock.close()
