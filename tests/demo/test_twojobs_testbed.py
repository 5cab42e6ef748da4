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


def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """(log dir, the testbed's cfg, the tasks' marks) for two jobs on the 4-class intent."""
    from geryon.demo import twojobs
    from geryon.demo.defaults import DEFAULTS, class_dscp, intent_for

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    cfg = {**DEFAULTS, "workers": 1, "ps": 1, "classes": twojobs.QUEUES, "background_bits": 0}
    intent = intent_for(twojobs.QUEUES)
    marks = {"class_dscp": class_dscp(twojobs.QUEUES), "class_priority": [c.priority for c in intent.classes]}
    return log_dir, cfg, marks


@needs_root
@pytest.mark.slow
def test_bands_written_to_the_store_move_both_jobs_classes_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.demo import runner, twojobs
    from geryon.progress import Progress

    log_dir, cfg, marks = setup(tmp_path, monkeypatch)
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


def wait_for_band(path: Path, job: str, band: list[int], timeout: float, after: int = 0) -> float:
    """Seconds until a task's log says it applied `band` for `job` (geryon.tf.band_follow's line, which
    lists every class the data plane has: the job's two come first), in what it logged past offset
    `after`."""
    line = f"job {job!r} generation"
    want = f"classes -> fabric [{', '.join(str(q) for q in band)}"
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        text = path.read_text()[after:] if path.exists() else ""
        if any(line in ln and (want + "," in ln or want + "]" in ln) for ln in text.splitlines()):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"{path.name}: no {want} for job {job} in {timeout:.0f} s: {text[-1500:]}")


@needs_root
@pytest.mark.slow
def test_a_controller_bands_two_demo_jobs_by_the_intensity_their_chiefs_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole loop of issue 39 on the testbed: each demo chief registers its job and meters its GPU
    intensity (geryon.demo.jobmeter), a real `geryon controller` ranks and bands them, every task
    follows. Job "a" is the lighter one (batch 4 against 16, a quarter of the compute) and starts
    first: a chief registers only once it has measured a window, so "b" ranks first only by what its
    chief measured. The compute per step is given (the test checks the loop; the bench measures C)."""
    from geryon.demo import runner, twojobs
    from geryon.progress import Progress

    log_dir, cfg, marks = setup(tmp_path, monkeypatch)
    specs = {
        "a": twojobs.JobSpec("a", "vggmini", 4, 2222, ("ps0",), ("worker0",)),
        "b": twojobs.JobSpec("b", "vggmini", 16, 2322, ("ps0",), ("worker0",)),
    }
    compute = {"a": 0.02, "b": 0.08}
    with (
        runner.testbed(cfg, Progress("test", enabled=False)) as tb,
        twojobs.cluster_store(tb, "chief", log_dir) as store,
    ):
        store.start_controller(("ps0", "worker0", "chief"))
        jobs = {}
        try:
            for name in ("a", "b"):
                jobs[name] = twojobs.Job(
                    tb, specs[name], cfg, store, log_dir, marks, register_compute_s=compute[name]
                ).start(300)
            # Measured: b (4x the compute in a step of about the same length) ranks first.
            wait_for_band(log_dir / "b-worker0.log", "b", [0, 2], timeout=120)
            wait_for_band(log_dir / "a-worker0.log", "a", [1, 3], timeout=30)
            time.sleep(SETTLE_S)
            before = tb.class_counters()
            time.sleep(WINDOW_S)
            after = tb.class_counters()
            moved = bytes_per_class(before, after, ("ps0", "worker0"))
            total = sum(moved.values())
            assert total > 1_000_000, moved
            shares = {c: v / total for c, v in moved.items()}
            for name, job in jobs.items():
                assert job.alive(), (name, job.error)
            # b's chief and tasks gone: its lease (3 s) runs out and a gets the first band.
            logged = len((log_dir / "a-worker0.log").read_text())
            jobs.pop("b").stop()
            freed = wait_for_band(log_dir / "a-worker0.log", "a", [0, 1], timeout=15, after=logged)
            assert jobs["a"].alive(), jobs["a"].error
        finally:
            for job in jobs.values():
                job.stop()
    # b's bulk (most of its bytes) in class 2, a's in class 3.
    assert shares[2] > 0.2 and shares[3] > 0.02, shares
    print(f"band freed {freed:.1f} s after job b stopped; shares {shares}")
    assert freed < 10, freed
