"""Killing by PID and start time: real processes, signalled only while they are the ones recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from geryon.testbed import procs


def _start(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), start_new_session=True)


def test_start_time_is_field_22_and_none_when_gone() -> None:
    p = _start("sleep", "30")
    try:
        start = procs.start_time(p.pid)
        with open(f"/proc/{p.pid}/stat") as fh:
            assert start == int(fh.read().rsplit(")", 1)[1].split()[19])
        assert procs.alive(p.pid, start)
        assert not procs.alive(p.pid, start + 1)
    finally:
        p.kill()
        p.wait()
    assert procs.start_time(p.pid) is None


def test_zombie_counts_as_gone() -> None:
    p = _start("true")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and procs.start_time(p.pid) is not None:
        time.sleep(0.01)
    assert procs.start_time(p.pid) is None  # exited, not yet reaped
    p.wait()


def test_kill_ends_the_process_and_its_group() -> None:
    # sh forks two sleeps into its group; killing the recorded leader's group ends all three.
    p = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    time.sleep(0.2)
    members = [
        int(x)
        for x in subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True).stdout.split()
    ]
    assert len(members) == 3
    starts = {m: procs.start_time(m) for m in members}
    t = time.monotonic()
    assert procs.kill([(p.pid, procs.start_time(p.pid) or -1)]) == [p.pid]
    assert time.monotonic() - t < procs.GRACE_S  # sleep dies on SIGTERM: no wait for the grace period
    p.wait(timeout=5)
    time.sleep(0.1)
    assert not any(procs.alive(m, s or -1) for m, s in starts.items())


def test_a_reused_pid_is_not_signalled() -> None:
    p = _start("sleep", "30")
    try:
        start = procs.start_time(p.pid)
        assert start is not None
        # A record whose start time does not match (the recorded process is gone, the PID reused).
        assert procs.kill([(p.pid, start - 1)], grace=0.2) == []
        time.sleep(0.1)
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_sigterm_ignored_means_sigkill_after_the_grace() -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); "
        "time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert p.stdout is not None and p.stdout.readline() == b"ok\n"
    t = time.monotonic()
    procs.kill([(p.pid, procs.start_time(p.pid) or -1)], grace=0.3)
    assert p.wait(timeout=5) == -9
    assert 0.3 <= time.monotonic() - t < 3


def test_spawn_refuses_a_string_argv() -> None:
    with pytest.raises(ValueError, match="argv"):
        procs.spawn("any", "sleep 1")  # type: ignore[arg-type]


def test_pids_in_finds_processes_by_namespace_inode() -> None:
    me = procs.pids_in([f"/proc/{os.getppid()}/ns/net"])
    assert os.getpid() not in [pid for pid, _ in me]  # never this process itself
    assert os.getppid() in [pid for pid, _ in me] or os.getppid() == 1
    assert procs.pids_in(["/nonexistent"]) == []


def test_cpu_seconds_count_a_busy_childs_time_and_none_when_gone() -> None:
    busy = (
        "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
        "print('done', flush=True)\ninput()"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", busy], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        before = procs.cpu_snapshot({"idle-parent": os.getpid(), "child": p.pid})
        assert p.stdout is not None and p.stdout.readline().strip() == "done"
        spent = procs.cpu_per_round(before, {"child": p.pid, "idle-parent": os.getpid()}, rounds=3)
        assert spent["rounds"] == 3
        assert spent["seconds"]["child"] >= 0.25  # its 0.3 s busy loop, less what ran before `before`
        assert spent["per_round"]["child"] == pytest.approx(spent["seconds"]["child"] / 3, abs=1e-3)
    finally:
        p.kill()
        p.wait()
    assert procs.cpu_seconds(p.pid) is None
    assert procs.cpu_per_round({"child": 1.0}, {"child": p.pid}, 1) == {
        "rounds": 1,
        "seconds": {},
        "per_round": {},
    }
