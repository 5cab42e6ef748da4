"""geryon.demo.local: single-worker training without a PS or the network, the scaling baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from geryon.cluster.procs import REPO_ROOT, base_env
from geryon.cluster.protocol import MARKER
from geryon.demo.local import spec_for


def _run(spec_path: Path, *extra: str) -> tuple[int, list[dict], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "geryon.demo.local", str(spec_path), *extra],
        capture_output=True,
        text=True,
        env=base_env(),
        cwd=str(REPO_ROOT),
        timeout=240,
    )
    events = [json.loads(line[len(MARKER) :]) for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    return proc.returncode, events, proc.stderr


def test_trains_the_demo_model_alone_and_times_each_step(tmp_path: Path) -> None:
    cfg = {"model": "tiny", "input_shape": [32, 32, 3], "batch_size": 16, "warmup": 1, "steps": 3}
    cfg["threads"] = 1
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_for(cfg)))
    code, events, err = _run(spec)
    assert code == 0, err[-2000:]
    (done,) = events
    assert done["event"] == "done"
    assert len(done["step_times"]) == 3 and all(t > 0 for t in done["step_times"])


def test_a_bad_spec_is_an_error_event_and_exit_1(tmp_path: Path) -> None:
    cfg = {"model": "no-such-model", "input_shape": [32, 32, 3], "batch_size": 16, "warmup": 1, "steps": 1}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_for({**cfg, "threads": 1})))
    code, events, _ = _run(spec)
    assert code == 1
    assert events[-1]["event"] == "error" and "no-such-model" in events[-1]["error"]


def test_usage_is_exit_2(tmp_path: Path) -> None:
    code, events, err = _run(tmp_path / "a.json", "extra")
    assert code == 2 and not events and "usage: python -m geryon.demo.local SPEC_FILE" in err
