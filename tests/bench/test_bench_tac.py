"""bench_tac.py end to end on AlexNet (a chain: TAC and TIC agree; the bench's cells, forward passes
and oracle rates are what is checked)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


def test_cells_per_forward_pass_with_the_oracle_at_a_workers_share(
    run_bench: RunBench, tmp_path: Path
) -> None:
    out = tmp_path / "tac.json"
    flags = ("--models", "alexnet", "--workers", "2", "8", "--bandwidths", "1gbit", "--out", str(out))
    done = run_bench("bench_tac.py", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "forward dag: TAC slower than TIC in 0 of 4 cells" in done.stdout
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert sorted({(r["forward"], r["mode"], r["workers"]) for r in rows}) == sorted(
        (f, m, w) for f in ("dag", "chain") for m in ("end-host", "ideal") for w in (2, 8)
    )
    # 2 workers on 1 PS, 8 on 2: a worker's share of the PSes' links is a half and a quarter.
    assert {(r["workers"], r["oracle_bps"]) for r in rows} == {(2, 5e8), (8, 2.5e8)}
    assert all(r["ratio"] == 1.0 for r in rows)  # a chain leaves TAC nothing to move
    assert doc["summary"]["dag"] == {"cells": 4, "slower_cells": 0, "worst_ratio": 1.0}


def test_the_full_link_oracle_is_a_choice(run_bench: RunBench, tmp_path: Path) -> None:
    out = tmp_path / "tac.json"
    flags = ("--models", "alexnet", "--workers", "4", "--bandwidths", "1gbit", "--oracle", "link")
    done = run_bench("bench_tac.py", *flags, "--forward", "dag", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["oracle_bps"] for r in rows} == {1e9} and {r["forward"] for r in rows} == {"dag"}
