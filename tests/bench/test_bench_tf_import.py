"""bench_tf_import.py end to end, on a module that imports in milliseconds (the measuring, the A B
alternation and the JSON do not depend on what is imported)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

RunBench = Callable[..., CompletedProcess[str]]  # the run_bench fixture (conftest.py)


def test_two_variants_alternate_and_their_paired_ratio_is_written(
    run_bench: RunBench, tmp_path: Path
) -> None:
    alt = tmp_path / "alt"
    (alt / "geryon_probe").mkdir(parents=True)
    (alt / "geryon_probe" / "__init__.py").write_text("import time\nx = sum(range(200000))\n")
    out = tmp_path / "import.json"
    flags = ("--runs", "2", "--module", "json", "--alt", str(alt), "--out", str(out))
    done = run_bench("bench_tf_import.py", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPU alt / installed" in done.stdout and "largest own import times (alt" in done.stdout
    doc = json.loads(out.read_text())
    assert [len(doc["runs"][v]) for v in ("installed", "alt")] == [2, 2]
    assert all(r["cpu_s"] > 0 and r["wall_s"] > 0 for v in doc["runs"].values() for r in v)
    assert doc["variants"]["alt"] == str(alt.resolve())
    assert doc["paired_cpu_alt_over_installed"]["pairs"] == 2
    assert doc["top_modules"]["installed"][0]["module"]


def test_bad_flags_exit_2_naming_the_flag(run_bench: RunBench, tmp_path: Path) -> None:
    runs = run_bench("bench_tf_import.py", "--runs", "0")
    assert runs.returncode == 2 and "--runs" in runs.stderr
    alt = run_bench("bench_tf_import.py", "--alt", str(tmp_path / "none"))
    assert alt.returncode == 2 and "--alt" in alt.stderr


def test_a_module_that_fails_to_import_is_a_clear_error(run_bench: RunBench) -> None:
    done = run_bench("bench_tf_import.py", "--runs", "1", "--module", "no_such_module_here")
    assert done.returncode != 0 and "import no_such_module_here failed" in done.stderr
