"""bench/benchlib.py's child-process skeleton with real child processes (tiny scripts, no TF)."""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

SERVER = r"""
import json, os, time
spec = json.loads(os.environ["BENCH_SPEC"])
open(spec["pidfile"], "w").write(str(os.getpid()))
if spec.get("fail"):
    raise SystemExit(1)
print("READY", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def benchlib(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their sibling benchlib the same way
    return importlib.import_module("benchlib")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child the parent has reaped is gone; one it has not is a zombie, also not running
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_child_env_carries_the_spec_the_repo_and_extras(benchlib: ModuleType) -> None:
    env = benchlib.child_env({"job": "ps"}, GERYON_DATA_PORT_OFFSET="-7000")
    assert json.loads(env["BENCH_SPEC"]) == {"job": "ps"}
    assert env["PYTHONPATH"] == str(BENCH.parent)
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2" and env["GERYON_DATA_PORT_OFFSET"] == "-7000"
    assert env["PATH"] == os.environ["PATH"]


def test_servers_are_up_inside_the_block_and_killed_after(benchlib: ModuleType, tmp_path: Path) -> None:
    envs = [benchlib.child_env({"pidfile": str(tmp_path / f"{i}.pid")}) for i in range(2)]
    with benchlib.child_servers(SERVER, envs):
        pids = [int((tmp_path / f"{i}.pid").read_text()) for i in range(2)]
        assert all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)


def test_a_server_that_does_not_start_stops_the_others(benchlib: ModuleType, tmp_path: Path) -> None:
    envs = [
        benchlib.child_env({"pidfile": str(tmp_path / "up.pid")}),
        benchlib.child_env({"pidfile": str(tmp_path / "down.pid"), "fail": True}),
    ]
    with pytest.raises(RuntimeError, match="server 1 did not start"), benchlib.child_servers(SERVER, envs):
        pytest.fail("the block must not run")
    assert not _alive(int((tmp_path / "up.pid").read_text()))


def test_run_client_returns_the_result_line(benchlib: ModuleType) -> None:
    script = """
        import json, os
        spec = json.loads(os.environ["BENCH_SPEC"])
        print("noise")
        print("RESULT " + json.dumps({"twice": spec["n"] * 2}))
    """
    assert benchlib.run_client(script, benchlib.child_env({"n": 21})) == {"twice": 42}


def test_run_client_without_a_result_says_what_the_client_wrote(benchlib: ModuleType) -> None:
    with pytest.raises(RuntimeError, match=r"the client failed: .*boom"):
        benchlib.run_client("raise SystemExit('boom')", benchlib.child_env({}))


def test_a_server_that_dies_while_the_client_runs_stops_the_client(
    benchlib: ModuleType, tmp_path: Path
) -> None:
    # A TF client waits without end on a dead server; run_client notices the exit within a second.
    dying = SERVER.replace("while True:\n    time.sleep(1)", "time.sleep(3)\nraise SystemExit(3)")
    assert dying != SERVER
    envs = [benchlib.child_env({"pidfile": str(tmp_path / "s.pid")})]
    pidfile = tmp_path / "client.pid"
    client = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    start = time.monotonic()
    stopped = pytest.raises(RuntimeError, match=r"server 0 exited \(status 3\) while the client ran")
    with benchlib.child_servers(dying, envs) as servers, stopped:
        benchlib.run_client(client, benchlib.child_env({}), servers=servers)
    assert time.monotonic() - start < 20
    assert not _alive(int(pidfile.read_text()))


def test_a_client_past_its_timeout_is_stopped(benchlib: ModuleType, tmp_path: Path) -> None:
    pidfile = tmp_path / "client.pid"
    client = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(TimeoutError, match="the client ran past 5 s"):
        benchlib.run_client(client, benchlib.child_env({}), timeout=5)
    assert not _alive(int(pidfile.read_text()))


def test_a_table_without_rows_prints_its_header(
    benchlib: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # bench_e2e prints its paired table even when every paired mode failed.
    benchlib.print_table([], [("t", "time s", ".3f"), ("mode", "mode", "s")])
    header, rule = capsys.readouterr().out.splitlines()
    assert header.split() == ["time", "s", "mode"] and set(rule.replace(" ", "")) == {"-"}
