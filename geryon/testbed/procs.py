"""Processes the testbed starts inside its hosts, and killing them again, by PID only.

A PID alone can be reused once its process is gone, so every record carries the process's start
time (field 22 of /proc/PID/stat, in clock ticks since boot): a PID is only signalled while its
start time still matches. Each child leads its own session (and process group), so whatever it
forks is signalled with it. A last sweep kills what is still inside the run's namespaces: only the
run's own descendants can be there (or someone who entered them on purpose, which `down` ends).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

GRACE_S = 2.0


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the third (the state) on; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it is gone or a zombie."""
    fields = _stat(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, every thread) the process has used so far; None when it is gone."""
    fields = _stat(pid)
    if fields is None or len(fields) < 13:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """cpu_seconds of each named process that is still there."""
    out = {}
    for name, pid in pids.items():
        seconds = cpu_seconds(pid)
        if seconds is not None:
            out[name] = seconds
    return out


def cpu_per_round(before: Mapping[str, float], pids: Mapping[str, int], rounds: int) -> dict[str, Any]:
    """What each process (named in `before`) used since `before`, in all and per round: on a shared
    machine, which process's CPU the step times share (the chief's polling, a worker's input pipeline)."""
    after = cpu_snapshot(pids)
    spent = {n: round(after[n] - before[n], 3) for n in before if n in after}
    return {
        "rounds": rounds,
        "seconds": spent,
        "per_round": {n: round(s / rounds, 4) for n, s in spent.items()} if rounds > 0 else {},
    }


def alive(pid: int, start: int) -> bool:
    return start_time(pid) == start


def ip_binary() -> str:
    """iproute2's `ip`, found on this process's PATH (or sbin), so a child env without sbin on its PATH
    (or without PATH at all) still starts."""
    found = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise FileNotFoundError("iproute2's `ip` is not installed (needed to run processes in a namespace)")
    return found


def spawn(
    netns: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    **popen_kw: Any,
) -> subprocess.Popen[Any]:
    """argv inside network namespace `netns`. `ip netns exec` execs argv in place (the PID is argv's
    own) and mounts that namespace's /sys, so the child sees its own interfaces there."""
    if isinstance(argv, str) or not argv:
        raise ValueError("argv: expected a non-empty list of strings (the program and its arguments)")
    return subprocess.Popen(
        [ip_binary(), "netns", "exec", netns, *argv],
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
        **popen_kw,
    )


def _signal(pid: int, start: int, sig: int) -> bool:
    """Signals the process group the recorded process leads (or the process alone if it left it)."""
    if not alive(pid, start):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        try:
            leader = os.getpgid(pid) == pid
        except ProcessLookupError:
            return False
        if leader:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    return False


def kill(records: Iterable[tuple[int, int]], grace: float = GRACE_S) -> list[int]:
    """SIGTERM to each (pid, start time) still alive, SIGKILL to what is left after `grace` s.
    Returns the PIDs that were signalled."""
    todo = [(p, s) for p, s in records if alive(p, s)]
    signalled = [p for p, s in todo if _signal(p, s, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while todo and time.monotonic() < deadline:
        todo = [(p, s) for p, s in todo if alive(p, s)]
        if todo:
            time.sleep(0.02)
    for p, s in todo:
        _signal(p, s, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while todo and time.monotonic() < deadline:
        todo = [(p, s) for p, s in todo if alive(p, s)]
        if todo:
            time.sleep(0.02)
    return signalled


def _ns_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_in(netns_paths: Iterable[str]) -> list[tuple[int, int]]:
    """(pid, start time) of every process (we may see) whose network namespace is one of these."""
    keys = {k for k in (_ns_key(p) for p in netns_paths) if k is not None}
    if not keys:
        return []
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        if _ns_key(f"/proc/{name}/ns/net") in keys:
            start = start_time(int(name))
            if start is not None:
                out.append((int(name), start))
    return out
