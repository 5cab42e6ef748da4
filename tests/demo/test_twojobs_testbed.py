"""Two jobs on a real testbed with their bands switched live (geryon.demo.twojobs, issue 39 item 5): etcd
in the chief's namespace over https, every task following its job's band, and the switch's per-class
counters showing each policy's classes: job-priority puts all of the more intense job in class 0 and
all of the other in class 1, combined puts the first's bulk in class 2, fifo everything in class 3."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")

WINDOW_S = 4.0
SETTLE_S = 1.0


def bytes_per_class(before: Any, after: Any, hosts: tuple[str, ...]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hosts:
        for cls, now in after[h].items():
            out[cls] = out.get(cls, 0) + now["bytes"] - before[h].get(cls, {"bytes": 0})["bytes"]
    return out


@needs_root
@pytest.mark.slow
def test_bands_written_to_the_store_move_both_jobs_classes_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.demo import runner, twojobs
    from geryon.demo.defaults import DEFAULTS, class_dscp, intent_for
    from geryon.progress import Progress

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    cfg = {**DEFAULTS, "workers": 1, "ps": 1, "classes": twojobs.QUEUES, "background_bits": 0}
    intent = intent_for(twojobs.QUEUES)
    marks = {"class_dscp": class_dscp(twojobs.QUEUES), "class_priority": [c.priority for c in intent.classes]}
    specs = {
        "a": twojobs.JobSpec("a", "vggmini", 16, 2222, ("ps0",), ("worker0",)),
        "b": twojobs.JobSpec("b", "vggmini", 4, 2322, ("ps0",), ("worker0",)),
    }
    hosts = {n: s.hosts for n, s in specs.items()}
    shares: dict[str, dict[int, float]] = {}
    steps: dict[str, dict[str, list[float]]] = {}
    with (
        runner.testbed(cfg, Progress("test", enabled=False)) as tb,
        twojobs.cluster_store(tb, "chief", log_dir) as store,
    ):
        jobs = {}
        try:
            for name in ("a", "b"):
                jobs[name] = twojobs.Job(tb, specs[name], cfg, store, log_dir, marks).start(300)
            for policy in ("job-priority", "combined", "fifo"):
                t0 = store.write_bands(twojobs.policy_bands(policy, ["a", "b"]), hosts)
                time.sleep(SETTLE_S)
                before = tb.class_counters()
                time.sleep(WINDOW_S - SETTLE_S)
                after = tb.class_counters()
                moved = bytes_per_class(before, after, ("ps0", "worker0"))
                total = sum(moved.values())
                assert total > 1_000_000, (policy, moved)  # both jobs train: megabytes a second
                shares[policy] = {c: b / total for c, b in moved.items()}
                steps[policy] = {n: j.steps_between(t0, time.monotonic(), SETTLE_S) for n, j in jobs.items()}
                for name, job in jobs.items():
                    assert job.alive(), (name, job.error)
        finally:
            for job in jobs.values():
                job.stop()
    # job-priority: a in class 0, b in class 1; nothing of theirs in 2 or 3 (class 3 also takes the
    # unmarked chief and etcd traffic, a few kB).
    assert shares["job-priority"][0] > 0.05 and shares["job-priority"][1] > 0.05, shares
    assert shares["job-priority"][2] < 0.01 and shares["job-priority"][3] < 0.02, shares
    # combined: a's bulk (most of its bytes: vggmini's FC kernels) in class 2, b's in 3.
    assert shares["combined"][2] > 0.2 and shares["combined"][3] > 0.05, shares
    # fifo: everything in class 3.
    assert shares["fifo"][3] > 0.97, shares
    # No failed step: both jobs kept training through every change (alive above, and stepping; a window
    # may hold no whole step of the job that combined starves, so count over the three).
    assert all(sum(len(steps[p][n]) for p in steps) >= 2 for n in ("a", "b")), steps
