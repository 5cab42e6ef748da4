"""bench_search.py with the testbed's own noise (--noise-from) and several repeats per candidate
(--search-repeats), end to end in miniature: the real script, its table and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


def _demo_json(path: Path, steps: list[float]) -> Path:
    # The fields bench_search reads from geryon demo's out/demo/demo.json: runs[].step_times.
    runs = [{"mode": "endhost", "step_times": steps}, {"mode": "ps", "step_times": []}]
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_testbed_noise_and_repeats_grow_the_budget(run_bench: RunBench, tmp_path: Path) -> None:
    demo = _demo_json(tmp_path / "demo.json", [0.8, 0.82, 0.79, 1.3, 0.81, 0.8, 0.78, 0.83] * 3)
    out = tmp_path / "search.json"
    r = run_bench(
        "bench_search.py",
        "--profiles", "2", "--repeats", "2", "--grid", "19", "--configs", "sweep+urg",
        "--search-repeats", "1,3", "--noise-from", str(demo), "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "noise the testbed's (24 steps from 1 demo runs)" in r.stdout
    assert "sweep+urg r3" in r.stdout
    result = json.loads(out.read_text())
    assert result["settings"]["search_repeats"] == [1, 3]
    assert result["settings"]["empirical_steps"] == 24
    # 5 candidates x (1 warm-up + repeats measured): the budget grows with the repeats.
    assert {row["live"] for row in result["runs"]["sweep+urg"]} == {10}
    assert {row["live"] for row in result["runs"]["sweep+urg r3"]} == {20}


def test_bad_noise_file_and_repeats_are_refused_by_name(run_bench: RunBench, tmp_path: Path) -> None:
    few = _demo_json(tmp_path / "few.json", [0.8] * 6)
    r = run_bench("bench_search.py", "--noise-from", str(few))
    assert r.returncode == 2 and "--noise-from: 6 measured steps in all, need at least 20" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = run_bench("bench_search.py", "--noise-from", str(bad))
    assert r.returncode == 2 and f"--noise-from {bad}: not a demo.json with runs" in r.stderr
    r = run_bench("bench_search.py", "--search-repeats", "0,3")
    assert r.returncode == 2 and "--search-repeats '0,3': expected integers in 1..20" in r.stderr
