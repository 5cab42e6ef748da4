"""Without root: `geryon testbed up --exec` re-executes itself in an unprivileged user namespace.

The test drops root for real: `unshare -U --map-user=65534` runs the command as an unprivileged user
(nobody, in a user namespace of its own: no capability anywhere that matters), which must then build
the whole testbed, with traffic through its switch, from a nested `unshare -Urnm`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testbed.tbutil import leftovers

from geryon.testbed import userns

REPO = Path(__file__).resolve().parents[2]
AS_NOBODY = ["unshare", "-U", "--map-user=65534", "--map-group=65534"]


def _unprivileged_userns_allowed() -> str | None:
    try:
        r = subprocess.run(
            [*AS_NOBODY, "unshare", "-Urnm", "true"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if r.returncode == 0 else r.stderr.strip() or "unshare failed"


_WHY = _unprivileged_userns_allowed()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no unprivileged user namespaces here: {_WHY}")

_INNER = """
import json
from geryon.testbed import attach, status
from geryon.testbed.traffic import result, start_send, start_sink
tb = attach()
start_sink(tb, "a")
r = result(start_send(tb, "b", "a", 500_000, 46))
row = status()[0]
print(json.dumps({"mode": row["mode"], "alive": row["namespaces_alive"], "bytes": r["bytes"],
                  "class0": tb.class_counters()["a"][0]["bytes"]}))
"""


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GERYON_TESTBED_STATE"}  # the default /run path
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "geryon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def test_privilege_mode_here_is_root() -> None:
    assert userns.privilege_mode() == ("root" if os.geteuid() == 0 else "userns")


def test_without_root_the_testbed_runs_in_a_user_namespace(run_id: str) -> None:
    r = _as_nobody(
        "testbed",
        "up",
        "--hosts",
        "a,b",
        "--rate",
        "30mbit",
        "--run-id",
        run_id,
        "--exec",
        sys.executable,
        "-c",
        _INNER,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["mode"] == "userns" and got["alive"] == 3 and got["bytes"] == 500_000
    assert got["class0"] >= 500_000  # the DSCP-46 transfer went through the urgent queue
    assert f"run {run_id}: down" in r.stderr
    # It lived in a private /run: nothing of it ever reached this host's namespaces or state dir.
    assert leftovers(run_id) == [] and not any(
        n.startswith(f"gtb-{run_id}-") for n in os.listdir("/run/netns")
    )


def test_without_root_and_without_exec_exit_2_says_how() -> None:
    r = _as_nobody("testbed", "up", "--hosts", "a")
    assert r.returncode == 2 and "--exec" in r.stderr, r.stderr
