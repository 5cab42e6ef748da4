"""The testbed in the real kernel: namespaces, links, queues, processes, and cleanup after a crash.

Every test builds its own run (unique id, private state dir) and the `run_id` fixture takes it down
in teardown; each test also checks that `down` itself left nothing behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from testbed.tbutil import leftovers, needs_root

from geryon.fabric.render.linux import observe_ports
from geryon.testbed import TestbedError, TestbedSpec, down, namespaces, procs, state, status, up
from geryon.testbed import build as tb_build
from geryon.testbed.queues import switch_trees

pytestmark = needs_root
REPO = Path(__file__).resolve().parents[2]


def _sysctl(ns: str, key: str) -> str:
    with namespaces.inside(ns), open("/proc/sys/" + key.replace(".", "/")) as fh:
        return fh.read().strip()


def _exchange(tb, src: str, dst: str) -> bytes:
    """One TCP round trip from src to dst through the switch, by sockets opened in their namespaces."""
    with namespaces.inside(tb.netns(dst)):
        srv = socket.create_server((tb.address(dst), 0))
    with srv:
        srv.settimeout(5)
        with namespaces.inside(tb.netns(src)):
            cli = socket.create_connection(srv.getsockname(), timeout=5)
        with cli:
            conn, peer = srv.accept()
            with conn:
                assert peer[0] == tb.address(src)
                cli.sendall(src.encode())
                return conn.recv(100)


def test_up_builds_the_cluster(run_id: str) -> None:
    spec = TestbedSpec(hosts=("ps0", "worker0", "chief"), rate_bits=30_000_000, run_id=run_id)
    with up(spec) as tb:
        assert tb.run_id == run_id and tb.switch_netns == f"gtb-{run_id}-sw"
        assert {h: (x.netns, x.ifname, x.address) for h, x in tb.hosts.items()} == {
            "ps0": (f"gtb-{run_id}-ps0", "eth0", "10.77.0.1"),
            "worker0": (f"gtb-{run_id}-worker0", "eth0", "10.77.0.2"),
            "chief": (f"gtb-{run_id}-chief", "eth0", "10.77.0.3"),
        }
        assert sorted(namespaces.listed(f"gtb-{run_id}-")) == sorted(
            [tb.switch_netns, *(h.netns for h in tb.hosts.values())]
        )
        # Every host reaches every other through the bridge.
        for src in tb.hosts:
            for dst in tb.hosts:
                if src != dst:
                    assert _exchange(tb, src, dst) == src.encode()
        # Switch ports carry the rendered priority queues; hosts reflect the TOS.
        assert observe_ports(list(switch_trees(spec, "priority")), netns=tb.switch_netns) == dict(
            switch_trees(spec, "priority")
        )
        for h in tb.hosts.values():
            assert _sysctl(h.netns, "net.ipv4.tcp_reflect_tos") == "1"
        # Offloads off and RPS on both ends of a link (ip netns exec mounts that namespace's /sys).
        out = subprocess.run(
            ["ip", "netns", "exec", tb.netns("ps0"), "cat", "/sys/class/net/eth0/queues/rx-0/rps_cpus"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert int(out.replace(",", ""), 16) == (1 << (os.cpu_count() or 1)) - 1
        from pyroute2.ethtool.ioctl import IoctlEthtool

        for ns, ifname in ((tb.netns("ps0"), "eth0"), (tb.switch_netns, "p-ps0")):
            with namespaces.inside(ns):
                eth = IoctlEthtool(ifname)
            try:
                feats = eth.get_features()
                assert not feats.is_active("tx-tcp-segmentation") and not feats.is_active(
                    "tx-generic-segmentation"
                )
            finally:
                eth.close()
        data = state.load(run_id)
        assert data is not None and data["ready"] and data["mode"] == "root" and data["switch"] == "priority"
    assert leftovers(run_id) == []


def test_up_twice_is_idempotent_and_down_twice_is_harmless(run_id: str) -> None:
    spec = TestbedSpec(hosts=("a", "b"), rate_bits=20_000_000, run_id=run_id)
    tb1 = up(spec)
    p = tb1.popen("a", ["sleep", "60"])
    before = observe_ports(["p-a", "p-b"], netns=tb1.switch_netns)
    tb2 = up(spec)
    assert tb2.hosts == tb1.hosts
    assert observe_ports(["p-a", "p-b"], netns=tb2.switch_netns) == before
    assert p.poll() is None  # the second up kept the run (and what runs in it)
    # A namespace lost in between is rebuilt with its link by the next up.
    namespaces.remove(f"gtb-{run_id}-b")
    tb3 = up(spec)
    assert _exchange(tb3, "a", "b") == b"a"
    with pytest.raises(TestbedError, match="exists with hosts a,b"):
        up(TestbedSpec(hosts=("a", "c"), run_id=run_id))
    assert down(run_id) == [run_id]
    assert p.wait(timeout=5) == -signal.SIGTERM
    assert down(run_id) == []
    tb1.down()  # the object's own down after the run is gone: still fine
    assert leftovers(run_id) == []


def test_popen_records_the_process_and_down_kills_its_group(run_id: str) -> None:
    with up(TestbedSpec(hosts=("a", "b"), run_id=run_id)) as tb:
        p = tb.popen(
            "b", ["sh", "-c", "sleep 300 & sleep 300 & echo $$; wait"], stdout=subprocess.PIPE, text=True
        )
        assert p.stdout is not None and int(p.stdout.readline()) == p.pid  # `ip netns exec` exec'd in place
        data = state.load(run_id)
        assert data is not None
        rec = data["procs"][0]
        assert (rec["pid"], rec["start"], rec["host"]) == (p.pid, procs.start_time(p.pid), "b")
        with open(f"/proc/{p.pid}/ns/net", "rb"):
            assert (
                os.stat(f"/proc/{p.pid}/ns/net").st_ino == os.stat(namespaces.ns_path(tb.netns("b"))).st_ino
            )
        group = [
            int(x)
            for x in subprocess.run(
                ["pgrep", "-g", str(p.pid)], capture_output=True, text=True
            ).stdout.split()
        ]
        assert len(group) == 3
        starts = [(g, procs.start_time(g) or -1) for g in group]
        rows = status()
        assert (
            rows[0]["id"] == run_id and rows[0]["processes_alive"] == 1 and rows[0]["namespaces_alive"] == 3
        )
        with pytest.raises(TestbedError, match="not in testbed"):
            tb.popen("zz", ["true"])
    assert not any(procs.alive(g, s) for g, s in starts)
    assert leftovers(run_id) == [] and status() == []
    with pytest.raises(TestbedError, match="is down"):
        tb.popen("a", ["true"])


_CRASHER = textwrap.dedent(
    """
    import sys, time
    from geryon.testbed import TestbedSpec, up
    tb = up(TestbedSpec(hosts=("a", "b"), rate_bits=20_000_000, run_id=sys.argv[1]))
    child = tb.popen("a", ["sleep", "300"])
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def test_a_crashed_run_is_cleaned_by_the_next_down(run_id: str, private_state: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _CRASHER, run_id],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, state.ENV: str(private_state)},
        cwd=REPO,
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    assert line.strip().isdigit(), f"the crasher did not start: exit {owner.wait()}"
    child = int(line)
    child_start = procs.start_time(child)
    os.kill(owner.pid, signal.SIGKILL)  # the process that called up() dies without any cleanup
    owner.wait()
    # What the crash left: namespaces, the state file and the sleeping child in host a.
    assert child_start is not None and procs.alive(child, child_start)
    assert len(namespaces.listed(f"gtb-{run_id}-")) == 3 and state.path(run_id).exists()
    row = status()[0]
    assert row["id"] == run_id and not row["owner_alive"] and row["processes_alive"] == 1
    # A stray process inside the run's namespace that no one recorded goes too.
    stray = subprocess.Popen(
        ["ip", "netns", "exec", f"gtb-{run_id}-b", "sleep", "300"], start_new_session=True
    )
    time.sleep(0.2)
    assert down() == [run_id]  # no id: every run of this state dir, the stale one included
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and procs.alive(child, child_start):
        time.sleep(0.02)
    assert not procs.alive(child, child_start)
    assert stray.wait(timeout=5) in (-signal.SIGTERM, -signal.SIGKILL)
    assert leftovers(run_id) == [] and status() == []
    assert list(private_state.iterdir()) == []


def test_down_by_id_removes_namespaces_without_a_state_file(run_id: str) -> None:
    up(TestbedSpec(hosts=("a",), run_id=run_id))
    state.path(run_id).unlink()
    assert down() == []  # a private state dir: unrecorded namespaces are not this dir's to remove
    assert len(namespaces.listed(f"gtb-{run_id}-")) == 2
    assert down(run_id) == [run_id]  # an explicit id: its gtb-<id>-* namespaces go
    assert leftovers(run_id) == []


def test_down_all_touches_only_runs_of_its_state_dir(run_id: str, tmp_path: Path, monkeypatch) -> None:
    other = run_id[:-1] + ("0" if run_id[-1] != "0" else "1")
    try:
        monkeypatch.setenv(state.ENV, str(tmp_path / "other"))
        up(TestbedSpec(hosts=("a",), run_id=other))
        monkeypatch.setenv(state.ENV, str(tmp_path / "mine"))
        up(TestbedSpec(hosts=("a",), run_id=run_id))
        assert down() == [run_id]
        assert len(namespaces.listed(f"gtb-{other}-")) == 2
    finally:
        monkeypatch.setenv(state.ENV, str(tmp_path / "other"))
        assert down(other) == [other]
    assert leftovers(other) == []


def test_a_failed_up_leaves_nothing(run_id: str, monkeypatch) -> None:
    def broken(*_a, **_k) -> None:
        raise TestbedError("switch queues: refused (injected)")

    monkeypatch.setattr(tb_build, "apply_switch", broken)
    with pytest.raises(TestbedError, match="injected"):
        up(TestbedSpec(hosts=("a", "b"), run_id=run_id))
    assert leftovers(run_id) == []


def _agent_yaml(path: Path, rate: str, burst: int, buffer: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "interfaces": ["eth0"],
                "egress": {"rate": rate, "burst": burst, "buffer": buffer},
                "dcb": "off",
                "rdma": "off",
            }
        )
    )
    return path


def _verify(ns: str, cfg: Path, journal: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "geryon",
            "agent",
            "verify",
            "--netns",
            ns,
            "--config",
            str(cfg),
            "--journal",
            str(journal),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_host_queues_are_what_the_agent_verifies(run_id: str, tmp_path: Path) -> None:
    spec = TestbedSpec(hosts=("a", "b"), rate_bits=40_000_000, buffer_bytes=100_000, run_id=run_id)
    journal = tmp_path / "journal.json"
    good = _agent_yaml(tmp_path / "agent.yaml", "40mbit", spec.burst, 100_000)
    other = _agent_yaml(tmp_path / "other.yaml", "50mbit", spec.burst, 100_000)
    with up(spec) as tb:
        for h in tb.hosts.values():
            r = _verify(h.netns, good, journal)
            assert r.returncode == 0, r.stdout + r.stderr
            assert "in sync" in r.stdout
        r = _verify(tb.netns("a"), other, journal)  # the check can fail: another rate is drift
        assert r.returncode == 1 and "eth0/qdisc" in r.stdout
    # Without host queues: one FIFO at the link rate (drift for the agent), TOS reflection still on.
    spec2 = TestbedSpec(
        hosts=("a", "b"), rate_bits=40_000_000, buffer_bytes=100_000, run_id=run_id, host_queues=False
    )
    with up(spec2) as tb:
        r = _verify(tb.netns("a"), good, journal)
        assert r.returncode == 1 and "eth0/qdisc" in r.stdout and "tcp_reflect_tos" not in r.stdout
        assert _sysctl(tb.netns("a"), "net.ipv4.tcp_reflect_tos") == "1"
        tree = observe_ports(["eth0"], netns=tb.netns("a"))["eth0"]
        assert [c["ceil_bits"] for c in tree["classes"]] == [40_000_000, 40_000_000] and tree["filters"] == []
    assert leftovers(run_id) == []


def test_without_root_up_says_how(monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="--exec"):
        up(TestbedSpec(hosts=("a",)))


def test_popen_passes_env_cwd_and_output(run_id: str, tmp_path: Path) -> None:
    with up(TestbedSpec(hosts=("a",), run_id=run_id)) as tb:
        # An env without PATH still starts (the namespace is entered by ip's absolute path).
        p = tb.popen(
            "a", ["/bin/sh", "-c", "echo $X; pwd"], env={"X": "42"}, cwd=str(tmp_path), stdout=subprocess.PIPE
        )
        out, _ = p.communicate(timeout=10)
        assert out.decode().split() == ["42", str(tmp_path)]


def test_offloads_on_keeps_tso_and_leaves_rps_alone(run_id: str) -> None:
    from pyroute2.ethtool.ioctl import IoctlEthtool

    with up(TestbedSpec(hosts=("a", "b"), rate_bits=500_000_000, offloads=True, run_id=run_id)) as tb:
        with namespaces.inside(tb.netns("a")):
            eth = IoctlEthtool("eth0")
        try:
            assert eth.get_features().is_active("tx-tcp-segmentation")
        finally:
            eth.close()
        assert _exchange(tb, "a", "b") == b"a"
        assert tb.spec.burst == 64 * 1024


def test_orphans_under_the_default_dir_spare_runs_recorded_elsewhere(
    run_id: str, tmp_path: Path, monkeypatch
) -> None:
    from geryon.testbed import testbed as tb_mod

    kept = run_id[:-1] + ("0" if run_id[-1] != "0" else "1")
    try:
        monkeypatch.setenv(state.ENV, str(tmp_path / "elsewhere"))
        up(TestbedSpec(hosts=("a",), run_id=kept))
        assert tb_build.recorded_in(kept) == str(tmp_path / "elsewhere")
        monkeypatch.setenv(state.ENV, str(tmp_path / "main"))
        up(TestbedSpec(hosts=("a",), run_id=run_id))
        state.path(run_id).unlink()  # its record is lost: an orphan
        # Pretend this private dir is the default one; only inspect (a real down() there could reach
        # runs of others on this machine).
        monkeypatch.setattr(state, "is_default_dir", lambda: True)
        orphans = tb_mod._orphan_runs()
        assert run_id in orphans and kept not in orphans
        assert [r["id"] for r in status() if r["id"] in (run_id, kept)] == [run_id]
    finally:
        monkeypatch.setenv(state.ENV, str(tmp_path / "elsewhere"))
        down(kept)
        monkeypatch.setenv(state.ENV, str(tmp_path / "main"))
        down(run_id)
    assert leftovers(kept) == [] and leftovers(run_id) == []
