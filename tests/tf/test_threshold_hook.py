"""ThresholdHook's side of a search joint over thresholds and the chunk size (issue 40 item 3): the
searcher is the real one (geryon.threshold.search); the strategy is the two setters the hook calls
(a GeryonStrategy needs a running cluster: tests/tf/test_threshold_change.py drives a real one)."""

from __future__ import annotations

import pytest

from geryon.tf.strategy import ThresholdHook
from geryon.threshold.search import make_searcher

CHUNKS = (16 << 10, 256 << 10, 4 << 20)


class _Strategy:
    """What ThresholdHook calls on a GeryonStrategy, each call kept."""

    def __init__(self) -> None:
        self.thresholds: tuple[float, ...] = (0.5,)
        self.calls: list[tuple[str, object]] = []

    def set_thresholds(self, thresholds: tuple[float, ...]) -> None:
        self.thresholds = tuple(thresholds)
        self.calls.append(("thresholds", self.thresholds))

    def set_chunk_bytes(self, chunk_bytes: int) -> dict[str, int]:
        self.calls.append(("chunk", chunk_bytes))
        return {"ps:0": chunk_bytes}


def _step_time(thresholds: tuple[float, ...], chunk: int) -> float:
    # A bowl with its floor at threshold 0.3 and the middle chunk size.
    return 1.0 + abs(thresholds[0] - 0.3) + (0.0 if chunk == 256 << 10 else 0.2)


@pytest.mark.parametrize("strategy", ["bayes", "bytescheduler"])
def test_a_joint_search_sets_each_trials_chunk_and_reports_it(strategy: str) -> None:
    searcher = make_searcher(strategy, 2, chunk_sizes=CHUNKS, budget=12, warmup=0, drift=None, seed=1)
    g = _Strategy()
    hook = ThresholdHook(searcher, g)
    assert hook.searches_chunk
    ran: list[tuple[tuple[float, ...], int | None]] = []
    for _ in range(40):
        if searcher.converged:
            break
        ts = hook.begin()
        assert hook.chunk_bytes in CHUNKS
        ran.append((ts, hook.chunk_bytes))
        assert hook.chunk_bytes is not None
        hook.end(iteration_time=_step_time(ts, hook.chunk_bytes))
    assert searcher.converged
    # The chunk size is set only when it changes, and every change reached the strategy.
    chunk_calls = [v for k, v in g.calls if k == "chunk"]
    changes = [c for i, (_, c) in enumerate(ran) if i == 0 or ran[i - 1][1] != c]
    assert chunk_calls == changes and len(set(chunk_calls)) >= 2
    # What the searcher learnt is what ran: its best is one of the measured settings.
    assert (searcher.best, searcher.best_chunk_bytes) in ran
    assert searcher.best_chunk_bytes == 256 << 10
    # Converged, the hook keeps the best setting in force.
    hook.begin()
    assert (g.thresholds, hook.chunk_bytes) == (searcher.best, searcher.best_chunk_bytes)


def test_a_threshold_only_search_never_touches_the_chunk() -> None:
    searcher = make_searcher("sweep", 2, budget=4, warmup=0)
    g = _Strategy()
    hook = ThresholdHook(searcher, g)
    assert not hook.searches_chunk
    for _ in range(6):
        hook.begin()
        hook.end(iteration_time=1.0)
    assert all(k == "thresholds" for k, _ in g.calls) and hook.chunk_bytes is None
