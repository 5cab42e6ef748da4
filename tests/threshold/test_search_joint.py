"""The joint search over thresholds and hybrid's chunk size (issue 40 item 3), and ByteScheduler's setting."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from geryon.threshold.joint import CHUNK_CANDIDATES, Objective, drive, exhaustive, joint_grid
from geryon.threshold.profile import synthetic
from geryon.threshold.search import ALL_STRATEGIES, STRATEGIES, Trial, make_searcher
from geryon.threshold.search.bayes import random_design

CHUNKS = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]


def bowl2(ts: Any, chunk_bytes: int, center: float = 0.35, best_chunk: int = 256 << 10) -> float:
    """Smooth in threshold, U-shaped in log chunk size: the optimum is (center, best_chunk)."""
    return 1.0 + 2.0 * (ts[0] - center) ** 2 + 0.05 * math.log2(chunk_bytes / best_chunk) ** 2


def run(searcher: Any, f: Any = bowl2) -> int:
    return drive(searcher, f)


def test_trial_json_has_chunk_only_when_set() -> None:
    assert Trial((0.5,)).to_json() == {"thresholds": [0.5], "slice_bytes": None}
    assert Trial((0.5,), None, 4096).to_json() == {
        "thresholds": [0.5],
        "slice_bytes": None,
        "chunk_bytes": 4096,
    }


def test_bytescheduler_is_a_strategy_but_not_of_the_one_dimensional_defaults() -> None:
    assert "bytescheduler" in ALL_STRATEGIES
    assert STRATEGIES == ("sweep", "guided", "bayes")


@pytest.mark.parametrize("strategy", ["bayes", "bytescheduler"])
def test_bo_finds_the_optimum_of_a_two_dimensional_bowl_within_15_trials(strategy: str) -> None:
    searcher = make_searcher(strategy, budget=15, warmup=0, chunk_sizes=CHUNKS, grid=19)
    used = run(searcher)
    assert used <= 15
    assert searcher.best is not None and searcher.best_chunk_bytes is not None
    best = bowl2(searcher.best, searcher.best_chunk_bytes)
    optimum = min(bowl2((i / 20,), c) for i in range(1, 20) for c in CHUNKS)
    assert best <= optimum * 1.02


def test_sweep_joint_sweeps_thresholds_then_the_chunk_size() -> None:
    searcher = make_searcher("sweep", warmup=0, budget=15, chunk_sizes=CHUNKS, fit="min")
    seen: list[Trial] = []
    while not searcher.converged:
        trial = searcher.next_trial()
        seen.append(trial)
        searcher.report(
            trial.thresholds, bowl2(trial.thresholds, trial.chunk_bytes or 0), chunk_bytes=trial.chunk_bytes
        )
    assert len(seen) == 10
    assert {t.chunk_bytes for t in seen[:5]} == {256 << 10}  # the middle size while thresholds move
    assert {t.thresholds for t in seen[5:]} == {searcher.best}  # then the chunk at the chosen threshold
    assert searcher.best_chunk_bytes == 256 << 10


def test_guided_ranks_with_the_chunk_size() -> None:
    calls: list[int] = []

    def predictor(ts: Any, chunk_bytes: int) -> float:
        calls.append(chunk_bytes)
        return bowl2(ts, chunk_bytes)

    searcher = make_searcher("guided", predictor=predictor, chunk_sizes=CHUNKS, grid=9, warmup=0)
    run(searcher)
    assert set(calls) == set(CHUNKS)
    assert searcher.best_chunk_bytes == 256 << 10


def test_bytescheduler_is_deterministic_per_seed() -> None:
    def trials(seed: int) -> list[Trial]:
        s = make_searcher("bytescheduler", budget=15, warmup=0, chunk_sizes=CHUNKS, grid=19, seed=seed)
        out = []
        while not s.converged:
            t = s.next_trial()
            out.append(t)
            s.report(t.thresholds, bowl2(t.thresholds, t.chunk_bytes or 0), chunk_bytes=t.chunk_bytes)
        return out

    assert trials(3) == trials(3)
    assert trials(3) != trials(4)
    assert len(set(trials(3))) == 15  # runs to the budget, never the same point twice


def test_bytescheduler_defaults_follow_the_paper() -> None:
    s = make_searcher("bytescheduler", chunk_sizes=CHUNKS)
    o = s.options
    assert (o["init"], o["xi"], o["design"], o["until"], o["pick"], o["budget"]) == (
        10,
        0.1,
        "random",
        "budget",
        "measured",
        30,
    )
    assert random_design(10, 50, 0) == random_design(10, 50, 0)
    assert len(set(random_design(10, 50, 0))) == 10
    assert sorted(random_design(10, 4, 0)) == [0, 1, 2, 3]  # a grid smaller than the design: all of it


def test_joint_search_resumes_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "joint.jsonl"
    first = make_searcher("bayes", budget=12, warmup=0, chunk_sizes=CHUNKS, grid=19, log_path=log)
    for _ in range(5):
        t = first.next_trial()
        first.report(t.thresholds, bowl2(t.thresholds, t.chunk_bytes or 0), chunk_bytes=t.chunk_bytes)
    first.close()
    again = make_searcher("bayes", budget=12, warmup=0, chunk_sizes=CHUNKS, grid=19, log_path=log)
    assert again.next_trial() == first.next_trial()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chunk_sizes": []}, "chunk_sizes: give at least one"),
        (
            {"chunk_sizes": [4096, 1024]},
            r"chunk_sizes\[1\]: expected a chunk size in bytes, an integer in \[4096",
        ),
        ({"chunk_sizes": [4096, 4096]}, "chunk_sizes: sizes must be distinct"),
        ({"chunk_sizes": "256KiB"}, "chunk_sizes: expected a list"),
        ({"chunk_sizes": [True]}, r"chunk_sizes\[0\]: expected a chunk size"),
        ({"design": "sobol"}, "design: expected one of spread, random"),
        ({"until": "never"}, "until: expected one of converged, budget"),
        ({"pick": "best"}, "pick: expected one of mean, measured"),
        ({"seed": -1}, "seed: expected an integer >= 0"),
        ({"candidates": 0}, r"candidates: expected an integer in \[1, 100000\]"),
    ],
)
@pytest.mark.parametrize("strategy", ["bayes", "bytescheduler"])
def test_bad_joint_options_are_named(strategy: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_searcher(strategy, **kwargs)


def test_chunk_size_in_reports_must_match_the_search() -> None:
    plain = make_searcher("bayes")
    with pytest.raises(ValueError, match="chunk_bytes: this search does not search chunk sizes"):
        plain.report((0.5,), 1.0, chunk_bytes=4096)
    joint = make_searcher("sweep", chunk_sizes=CHUNKS)
    with pytest.raises(ValueError, match="chunk_bytes: this search is joint over chunk sizes"):
        joint.report((0.5,), 1.0)


def test_an_unknown_strategy_name_lists_bytescheduler() -> None:
    with pytest.raises(ValueError, match="strategy: expected one of sweep, guided, bayes, bytescheduler"):
        make_searcher("hyperband")


# --- the simulator objective -----------------------------------------------------------------------


class FakeResult:
    def __init__(self, s: float) -> None:
        self.iteration_s = s


def test_objective_simulates_hybrid_with_the_chunk_and_memoizes() -> None:
    calls: list[dict[str, Any]] = []

    def fake(profile: Any, **kw: Any) -> FakeResult:
        calls.append(kw)
        return FakeResult(kw["thresholds"][0] + kw["chunk_bytes"] * 1e-9)

    profile = synthetic([4096, 8192, 65536], [1e-3] * 3, [2e-3] * 3)
    f = Objective(profile, 4, 2, 1e9, {"slice_bytes": 1 << 20}, simulate=fake)
    assert f((0.5,), 4096) == pytest.approx(0.5 + 4096e-9)
    f((0.5,), 4096)
    assert len(calls) == 1 and f.evaluations == 1
    assert (
        calls[0]["mode"] == "hybrid"
        and calls[0]["chunk_bytes"] == 4096
        and calls[0]["slice_bytes"] == 1 << 20
    )


def test_joint_grid_is_cuts_times_chunks_and_the_sweep_takes_its_minimum() -> None:
    profile = synthetic([4096, 8192, 65536, 1 << 20], [1e-3] * 4, [2e-3] * 4)
    grid = joint_grid(profile, CHUNK_CANDIDATES, candidates=12)
    cuts = {t.thresholds for t in grid}
    assert len(cuts) == 3  # 4 distinct urgencies, 3 cuts
    assert len(grid) == 3 * len(CHUNK_CANDIDATES)
    best, value = exhaustive(lambda ts, c: bowl2(ts, c), grid)
    assert value == min(bowl2(t.thresholds, t.chunk_bytes or 0) for t in grid)
    assert best.chunk_bytes == 256 << 10
