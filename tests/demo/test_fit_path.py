"""The fit path (issue 36 item 4, geryon.demo.fit) on a real testbed: `geryon demo --quick --api fit`.

One paired cluster of the geryon mode alone trains tf_keras' own train function, steps_per_execution
3, for a few rounds. Checked: every round ran and its step time (round / 3) is positive, the result
says which path and how many steps a round holds, the loss is finite, and the urgent class carried
the conv parameters' pulls of every step. The demo's tasks keep no flow counters, so the switch's
class counters stand in for them: bytes the graph pass could not name take the least urgent class
(the default), so an urgent queue that carried every step's urgent pulls says they were named.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
]
REPO = Path(__file__).resolve().parents[2]
SPE = 3


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("demo-fit")
    env = dict(os.environ, GERYON_TESTBED_STATE=str(tmp / "state"))
    argv = ["demo", "--quick", "--api", "fit", "--steps-per-execution", str(SPE), "--modes", "geryon"]
    argv += ["--steps", "4", "--profile-source", "alone", "--json", "--out", str(tmp / "out")]
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "geryon", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    return {"rc": r.returncode, "stderr": r.stderr, "result": result, "seconds": time.monotonic() - started}


def class_of(urgency: float, thresholds: list[float]) -> int:
    return sum(1 for t in thresholds if t >= urgency)  # the tagger's rule: class 0 most urgent


def test_the_fit_path_trains_and_reports_per_step_times(fit_run: dict[str, Any]) -> None:
    assert fit_run["rc"] == 0, fit_run["stderr"][-3000:]
    result = fit_run["result"]
    assert (result["config"]["api"], result["config"]["steps_per_execution"]) == ("fit", SPE)
    (run,) = result["runs"]
    assert run["mode"] == "geryon" and run["error"] is None
    assert run["steps_per_round"] == SPE
    assert len(run["step_times"]) == result["config"]["steps"] and all(t > 0 for t in run["step_times"])
    assert all(math.isfinite(loss) for loss in run["losses"]), run["losses"]
    print(f"fit path demo: {fit_run['seconds']:.0f} s, steps {run['step_times']}")


def test_every_steps_urgent_pulls_rode_the_urgent_class(fit_run: dict[str, Any]) -> None:
    result = fit_run["result"]
    (run,) = result["runs"]
    counters = run["switch_counters"]
    to_workers = sum(counters[w]["0"]["bytes"] for w in ("worker0", "worker1"))
    # Each step of a round pulls every parameter once per worker, on the class of the round's
    # thresholds: at least those bytes crossed the urgent queue toward the workers.
    expected = sum(
        p["bytes"] * run["workers"] * SPE
        for thresholds in run["round_thresholds"]
        for p in result["params"]
        if class_of(p["urgency"], thresholds) == 0
    )
    assert expected > 0, run["round_thresholds"]
    assert to_workers >= expected, (to_workers, expected)
