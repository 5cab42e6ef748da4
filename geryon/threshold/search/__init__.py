"""The adaptive threshold search: an online searcher a training loop drives iteration by iteration.

    searcher = make_searcher("sweep", num_classes=2, log_path="search.jsonl")
    while training:
        ts = searcher.next_threshold()        # apply these thresholds (map_table.with_thresholds)
        seconds = run_one_iteration()
        searcher.report(ts, seconds)
    searcher.best, searcher.converged

Strategies: "sweep" (the paper's: try, fit, take the minimum), "guided" (rank with a predictor such
as the simulator, measure the best few live), "bayes" (Gaussian process + expected improvement),
"bytescheduler" (the same with ByteScheduler's tuner settings, paper 004 Sec. 4.3). With
`chunk_sizes`, a search is joint over thresholds and hybrid's chunk size: drive it with
`next_trial()` and `report(trial.thresholds, seconds, chunk_bytes=trial.chunk_bytes)`.
"""

from __future__ import annotations

import os
from typing import Any

from geryon.threshold.search.base import COMMON_OPTIONS, Predictor, Searcher, Trial
from geryon.threshold.search.bayes import BayesSearcher, ByteSchedulerSearcher
from geryon.threshold.search.guided import GuidedSearcher
from geryon.threshold.search.log import SearchLog
from geryon.threshold.search.sweep import SweepSearcher

SEARCHERS: dict[str, type[Searcher]] = {
    s.strategy: s for s in (SweepSearcher, GuidedSearcher, BayesSearcher, ByteSchedulerSearcher)
}
# The online strategies with their own defaults; "bytescheduler" is a setting of "bayes" (another
# budget and stopping rule), made by make_searcher like the others.
STRATEGIES = ("sweep", "guided", "bayes")
ALL_STRATEGIES = tuple(SEARCHERS)

__all__ = [
    "ALL_STRATEGIES",
    "COMMON_OPTIONS",
    "SEARCHERS",
    "STRATEGIES",
    "BayesSearcher",
    "ByteSchedulerSearcher",
    "GuidedSearcher",
    "Searcher",
    "SweepSearcher",
    "Trial",
    "make_searcher",
    "resume_searcher",
]


def make_searcher(
    strategy: str,
    num_classes: int = 2,
    *,
    predictor: Predictor | None = None,
    log_path: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Searcher:
    """A searcher of `strategy` for `num_classes` classes (k-1 thresholds).

    With `log_path`, every report is appended there as a JSON line; if the file already holds a log,
    the searcher resumes from it (the options must match the log's). Bad options raise ValueError
    naming the option and what is allowed.
    """
    if strategy not in SEARCHERS:
        raise ValueError(f"strategy: expected one of {', '.join(ALL_STRATEGIES)}, got {strategy!r}")
    return SEARCHERS[strategy](num_classes, predictor=predictor, log_path=log_path, **options)


def resume_searcher(log_path: str | os.PathLike[str], *, predictor: Predictor | None = None) -> Searcher:
    """Continues the search a log records, with the strategy and options its header names."""
    events = SearchLog(log_path).read()
    if not events:
        raise ValueError(f"log_path: {str(log_path)!r} holds no search log to resume")
    header = events[0]
    strategy = header.get("strategy")
    if header.get("event") != "start" or strategy not in SEARCHERS:
        raise ValueError(f"log_path: {str(log_path)!r} does not start with a search header")
    options = dict(header.get("options", {}))  # the option checks turn JSON lists back into tuples
    return make_searcher(
        strategy, header.get("num_classes", 2), predictor=predictor, log_path=log_path, **options
    )
