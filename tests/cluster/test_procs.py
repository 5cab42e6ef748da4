"""geryon.cluster.procs: waiting for READY from real child processes, and stopping them by PID."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geryon.cluster import procs as procs_mod


def _task(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_wait_ready_passes_lines_before_ready_and_names_a_task_that_exited_or_is_late() -> None:
    """Real child processes: READY after other lines is ready; an exit before READY names the host,
    its exit code and the log's end; silence past the timeout names the host and the limit."""
    procs = {
        "ps0": _task("print('loading', flush=True); print('READY', flush=True); import time; time.sleep(30)"),
        "worker0": _task("print('no luck', flush=True); raise SystemExit(3)"),
        "worker1": _task("import time; time.sleep(30)"),
    }
    try:
        readers = {h: procs_mod.LineReader(p) for h, p in procs.items()}
        procs_mod.wait_ready({"ps0": readers["ps0"]}, procs, 30)
        with pytest.raises(RuntimeError, match=r"^job A: worker0 exited 3 at start: its log$"):
            name, tail = (lambda h: f"job A: {h}"), (lambda h: "its log")
            procs_mod.wait_ready({"worker0": readers["worker0"]}, procs, 30, name=name, tail=tail)
        with pytest.raises(RuntimeError, match=r"^worker1 did not start within 1 s$"):
            procs_mod.wait_ready({"worker1": readers["worker1"]}, procs, 1)
    finally:
        for proc in procs.values():
            procs_mod.stop(proc)
