"""The demo's paired cluster at settings of its own on a real testbed (namespaces, switch queues, a TF
cluster; issue 40): a rotation of variants, and a search joint over the chunk size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from geryon.demo import config, variants

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")


@pytest.fixture
def run_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    """What a testbed run here needs: its state under tmp_path, a silent Progress, a log folder."""
    from geryon.progress import Progress

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    return Progress("test", enabled=False), log_dir


@needs_root
@pytest.mark.slow
def test_variants_alternate_in_one_cluster_each_at_its_own_settings(run_dirs: tuple[Any, Path]) -> None:
    from geryon.demo import runner
    from geryon.testbed import namespaces

    progress, log_dir = run_dirs
    cfg = config.validate(config.make_config({"steps": 2, "warmup": 1, "classes": 3}, quick=True))
    rotation = variants.parse(
        [
            {"name": "low", "thresholds": [0.2]},
            {"name": "two-cuts", "thresholds": [0.2, 0.6], "chunk_bytes": 16 << 10},
        ],
        cfg["classes"],
    )
    with runner.testbed(cfg, progress) as tb:
        run_id = tb.run_id
        records = runner.VariantRun(tb, cfg, rotation, 0, log_dir, progress).run_all()
    assert namespaces.listed(f"gtb-{run_id}-") == []
    by = {r["variant"]["name"]: r for r in records}
    assert set(by) == {"low", "two-cuts"}
    for v in rotation:
        rec = by[v.name]
        assert rec["error"] is None, rec["error"]
        assert rec["mode"] == "geryon" and rec["paired"]["rotation"] == ["low", "two-cuts"]
        assert len(rec["step_times"]) == 2 and all(t > 0 for t in rec["step_times"])
        # Every round of the variant (warm-up, settling, measured) ran at its own thresholds.
        assert {tuple(t) for t in rec["round_thresholds"]} == {v.thresholds}
        assert rec["thresholds"] == list(v.thresholds)
        assert rec["switch_counters"], "each variant's rounds counted apart"
    assert by["low"]["classes_used"] == 2 and by["two-cuts"]["classes_used"] == 3
    assert by["two-cuts"]["chunk_bytes"] == 16 << 10
    assert by["low"]["chunk_bytes"] == cfg["chunk_bytes"]  # back to the cluster's own between rounds


@needs_root
@pytest.mark.slow
def test_a_search_joint_over_chunk_sizes_sets_each_trials_chunk_and_keeps_the_best(
    run_dirs: tuple[Any, Path],
) -> None:
    # Issue 40 item 3 at run time: the geryon mode's search (bayes, joint over the chunk sizes) in the
    # paired cluster: each trial round runs at its own chunk size, and the measured rounds at the best.
    from geryon.demo import runner
    from geryon.threshold.joint import CHUNK_CANDIDATES

    progress, log_dir = run_dirs
    overrides = {"steps": 2, "warmup": 1, "search": "bayes", "search_chunk": True, "search_budget": 6}
    cfg = config.validate(config.make_config(overrides, quick=True))
    with runner.testbed(cfg, progress) as tb:
        paired = runner.PairedRun(tb, cfg, ["geryon", "endhost"], 0, [0.5], True, log_dir, progress)
        records = paired.run_all()
    by = {r["mode"]: r for r in records}
    geryon = by["geryon"]
    assert geryon["error"] is None, geryon["error"]
    search = geryon["search"]
    trials = search["trials"]
    assert trials and all(t["chunk_bytes"] in CHUNK_CANDIDATES for t in trials)
    assert len({t["chunk_bytes"] for t in trials}) >= 2, "the search tried more than one chunk size"
    assert search["best_chunk_bytes"] in {t["chunk_bytes"] for t in trials}
    # The measured rounds ran at the chosen chunk; the other mode at the cluster's own.
    assert geryon["chunk_bytes"] == search["best_chunk_bytes"]
    assert by["endhost"]["chunk_bytes"] == cfg["chunk_bytes"]
