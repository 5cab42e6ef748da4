"""`geryon demo` (the README's main job) end to end, on the fastest built-in model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_demo_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    args = ["demo", "--model", "alexnet", "--num-ps", "2", "--out", str(tmp_path)]
    r = subprocess.run(
        [sys.executable, "-m", "geryon", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "dense/FC layers: 93.99% of bytes" in r.stdout
    assert "partition plan: 2 PS, slices <= 1.0 MiB" in r.stdout
    data = json.loads((tmp_path / "tag-alexnet.json").read_text())
    assert set(data) == {"layer", "tic"}
    assert data["layer"]["rows"][0]["name"] == "alexnet/conv1/kernel"
    assert data["tic"]["urgency_function"] == "tic"
    assert "geryon demo: tagging with the 'tic' urgency: done" in r.stderr


def test_cli_without_a_command_is_a_usage_error() -> None:
    r = subprocess.run([sys.executable, "-m", "geryon"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "COMMAND" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "geryon", "demo", "--num-ps", "0"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "--num-ps 0: expected an integer >= 1" in r.stderr
