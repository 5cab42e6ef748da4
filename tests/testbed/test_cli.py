"""`geryon testbed up|status|down` as a user runs them: real subprocesses, real namespaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from geryon_cli import geryon
from testbed.tbutil import leftovers, needs_root

from geryon.cli import main
from geryon.testbed import namespaces, status

REPO = Path(__file__).resolve().parents[2]


@needs_root
def test_up_status_down_with_json(run_id: str) -> None:
    r = geryon(
        "testbed",
        "up",
        "--hosts",
        "ps0,worker0",
        "--rate",
        "30mbit",
        "--buffer",
        "64kib",
        "--run-id",
        run_id,
        "--json",
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["id"] == run_id and info["rate_bits"] == 30_000_000 and info["buffer_bytes"] == 65536
    assert info["hosts"]["worker0"] == {
        "netns": f"gtb-{run_id}-worker0",
        "ifname": "eth0",
        "address": "10.77.0.2",
    }
    assert "geryon testbed: run" in r.stderr  # progress on stderr, JSON alone on stdout
    assert namespaces.exists(f"gtb-{run_id}-sw")  # as root the testbed outlives the command
    r = geryon("testbed", "status", "--json")
    rows = json.loads(r.stdout)
    assert [(x["id"], x["namespaces_alive"], x["mode"], x["switch"]) for x in rows] == [
        (run_id, 3, "root", "priority")
    ]
    assert "ps0,worker0" in geryon("testbed", "status").stdout
    r = geryon("testbed", "down", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"down": [run_id]}
    assert json.loads(geryon("testbed", "down", "--json").stdout) == {"down": []}
    assert json.loads(geryon("testbed", "status", "--json").stdout) == []
    assert leftovers(run_id) == []


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--rate", "fast"], "--rate"),
        (["--rate", "10"], "--rate"),
        (["--rate", "10MBps"], "--rate"),
        (["--buffer", "12 apples"], "--buffer"),
        (["--buffer", "2kib"], "--buffer"),
        (["--burst", "1"], "--burst"),
        (["--hosts", "a,a"], "--hosts"),
        (["--hosts", "a,Web"], "--hosts"),
        (["--hosts", ""], "--hosts"),
        (["--switch", "ets"], "--switch"),
        (["--run-id", "Run-1"], "--run-id"),
        (["--exec"], "--exec"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(
    args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["testbed", "up", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"geryon testbed: error: {flag}:"), err
    assert status() == []  # nothing half-built


def test_down_with_a_bad_run_id_exits_2() -> None:
    r = geryon("testbed", "down", "--run-id", "../etc")
    assert r.returncode == 2 and "--run-id:" in r.stderr


@needs_root
def test_up_exec_runs_the_command_then_takes_the_testbed_down(run_id: str) -> None:
    inner = textwrap.dedent(
        """
        import json, os, subprocess, sys
        from geryon.testbed import attach
        tb = attach()
        cat = ["ip", "netns", "exec", tb.netns("b"), "cat", "/proc/sys/net/ipv4/tcp_reflect_tos"]
        out = subprocess.run(cat, capture_output=True, text=True).stdout.strip()
        run = os.environ["GERYON_TESTBED_RUN"]
        print(json.dumps({"run": run, "hosts": sorted(tb.hosts), "reflect": out}))
        sys.exit(3)
        """
    )
    r = geryon("testbed", "up", "--hosts", "a,b", "--run-id", run_id, "--exec", sys.executable, "-c", inner)
    assert r.returncode == 3, r.stderr  # the command's exit status
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"run": run_id, "hosts": ["a", "b"], "reflect": "1"}
    assert f"run {run_id}: down" in r.stderr
    assert leftovers(run_id) == []


@needs_root
def test_sigterm_during_exec_still_takes_the_testbed_down(run_id: str) -> None:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "geryon",
            "testbed",
            "up",
            "--hosts",
            "a",
            "--run-id",
            run_id,
            "--exec",
            "sleep",
            "60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(r["ready"] for r in status()):
        time.sleep(0.05)
    assert [r["id"] for r in status()] == [run_id]
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert f"run {run_id}: down" in err
    assert leftovers(run_id) == []
