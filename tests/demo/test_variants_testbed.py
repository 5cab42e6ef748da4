"""The demo's variant rotation on a real testbed: namespaces, switch queues and a TF cluster (issue 40)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geryon.demo import config, variants

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")


@needs_root
@pytest.mark.slow
def test_variants_alternate_in_one_cluster_each_at_its_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.demo import runner
    from geryon.progress import Progress
    from geryon.testbed import namespaces

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    cfg = config.validate(config.make_config({"steps": 2, "warmup": 1, "classes": 3}, quick=True))
    rotation = variants.parse(
        [
            {"name": "low", "thresholds": [0.2]},
            {"name": "two-cuts", "thresholds": [0.2, 0.6], "chunk_bytes": 16 << 10},
        ],
        cfg["classes"],
    )
    progress = Progress("test", enabled=False)
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
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
