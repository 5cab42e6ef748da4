"""What every search strategy shares: measuring candidates live, the budget, warm-up, drift, the log.

A strategy is a *planner* that proposes candidates and is told each candidate's measured time (the
median of its repeats). The searcher around it turns the training loop's per-iteration reports into
those measurements: it discards warm-up iterations after a threshold change, takes medians, stops
at the budget, logs every report, and after convergence watches for drift: the median of the first
`drift_window` measured iterations at the best setting is the reference; when the median of the
last `drift_window` moves more than `drift` (a fraction, either way) from it, a new search starts,
and `best` keeps the old answer until that search decides.

A report whose thresholds are not the candidate being measured (the loop ran something else) costs
budget but is not attributed to any candidate.

Every decision is a pure function of the options and the sequence of reports, so resuming is a
replay of the log: a new searcher given the same log reaches the same state, and each replayed line
is checked against what the log says the old searcher decided.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from geryon.tagger.map_table import MAX_CLASSES, validate_thresholds
from geryon.threshold.search.log import FORMAT, VERSION, SearchLog
from geryon.threshold.search.options import Option, integer, number, optional, resolve

Predictor = Callable[..., float]


@dataclass(frozen=True)
class Trial:
    """One setting to run an iteration with: k-1 thresholds and, in a joint search, a slice size and/or
    a chunk size (hybrid's preemption unit inside a class, set at run time)."""

    thresholds: tuple[float, ...]
    slice_bytes: int | None = None
    chunk_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"thresholds": list(self.thresholds), "slice_bytes": self.slice_bytes}
        if self.chunk_bytes is not None:  # absent otherwise: logs of searches without it read as before
            out["chunk_bytes"] = self.chunk_bytes
        return out


class Planner(Protocol):
    def propose(self) -> Trial | None:
        """The next candidate to measure, or None when the strategy has decided."""

    def observe(self, trial: Trial, value: float) -> None:
        """The measured iteration time of `trial` (median of its repeats)."""

    def recommend(self) -> tuple[Trial, float | None] | None:
        """The best setting so far and its estimated iteration time (None: nothing measured)."""

    def state(self) -> dict[str, Any]:
        """A small JSON summary for the log."""


COMMON_OPTIONS: dict[str, Option] = {
    "budget": Option(10, integer(1), "live iterations one search may use, warm-up included"),
    "warmup": Option(1, integer(0), "iterations discarded after every change of thresholds"),
    "repeats": Option(1, integer(1), "measured iterations per candidate (their median counts)"),
    "drift": Option(
        0.10,
        optional(number(0.0, 10.0, open_low=True)),
        "re-tune when the median iteration time over a window moves by more than this fraction (None: never)",
    ),
    "drift_window": Option(10, integer(2), "iterations per drift window"),
}

# Fields of a report line a replay must reproduce exactly; anything else may differ harmlessly.
_CHECKED = ("epoch", "used", "converged", "next", "best")


class Searcher:
    """An online threshold searcher: `next_threshold()`, then `report(thresholds, iteration_time)`."""

    strategy: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Option]] = {}
    needs_predictor: ClassVar[bool] = False

    def __init__(
        self,
        num_classes: int = 2,
        *,
        predictor: Predictor | None = None,
        log_path: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        if (
            isinstance(num_classes, bool)
            or not isinstance(num_classes, int)
            or not 2 <= num_classes <= MAX_CLASSES
        ):
            raise ValueError(f"num_classes: expected an integer in [2, {MAX_CLASSES}], got {num_classes!r}")
        self.num_classes = num_classes
        self.options = resolve(self.strategy, {**COMMON_OPTIONS, **self.OPTIONS}, options)
        if self.needs_predictor and predictor is None:
            raise ValueError(
                f"predictor: the {self.strategy!r} strategy needs a predictor(thresholds) -> seconds "
                "(e.g. the simulator)"
            )
        if predictor is not None and not callable(predictor):
            raise ValueError(f"predictor: expected a callable, got {predictor!r}")
        if predictor is not None and not self.needs_predictor:
            raise ValueError(f"predictor: the {self.strategy!r} strategy does not use one; leave it out")
        self._predictor = predictor
        self._joint = self.options.get("slice_sizes") is not None
        self._chunked = self.options.get("chunk_sizes") is not None

        self._epoch = 0
        self._total = 0  # reports ever
        self._live = 0  # reports in the current search
        self._last: Trial | None = None  # the setting of the previous report
        self._since_change = 0
        self._uncharged = 0  # warm-up iterations after a resume that the budget does not pay for
        self._pending: Trial | None = None  # the candidate being measured
        self._samples: list[float] = []
        self._first: Trial | None = None
        self._converged = False
        self._best: Trial | None = None
        self._best_time: float | None = None
        self._window: deque[float] = deque(maxlen=self.options["drift_window"])
        self._reference: float | None = None
        self._replaying = False
        self._ranks: dict[int, dict[str, Any]] = {}

        self._log = SearchLog(log_path) if log_path is not None else None
        self._unwritten: list[dict[str, Any]] = []  # events made before the log is open
        events = self._log.read() if self._log is not None else []
        if events:
            self._check_header(events[0])
            self._ranks = {int(e.get("epoch", -1)): e for e in events if e["event"] == "rank"}
            self._replaying = True
        # Everything that can refuse the options runs before the log is touched: a refused searcher
        # leaves no half-written log behind.
        self._start_search()
        if events:
            self._replay(events[1:])
            self._replaying = False
        if self._log is not None:
            self._log.open()
            if not events:
                self._log.write(self._header())
            for event in self._unwritten:
                self._log.write(event)
            self._unwritten = []
            if events:
                self._mark_resume()

    # --- the training loop's side -------------------------------------------------------------
    def next_trial(self) -> Trial:
        """The setting for the next iteration: a candidate while searching, the best once converged."""
        trial = self._best if self._converged else self._pending
        assert trial is not None
        return trial

    def next_threshold(self) -> tuple[float, ...]:
        return self.next_trial().thresholds

    def report(
        self,
        thresholds: Sequence[float],
        iteration_time: float,
        slice_bytes: int | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        """Feeds back one iteration: the thresholds it ran with and its measured time in seconds."""
        values = validate_thresholds(thresholds, field="thresholds")
        if len(values) != self.num_classes - 1:
            raise ValueError(
                f"thresholds: expected {self.num_classes - 1} threshold(s) for {self.num_classes} classes, "
                f"got {len(values)}"
            )
        t = iteration_time
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"iteration_time: expected seconds > 0, got {iteration_time!r}")
        if self._joint:
            if isinstance(slice_bytes, bool) or not isinstance(slice_bytes, int) or slice_bytes < 1:
                raise ValueError(
                    f"slice_bytes: this search is joint over slice sizes; report the slice size the "
                    f"iteration used (bytes >= 1), got {slice_bytes!r}"
                )
        elif slice_bytes is not None:
            raise ValueError("slice_bytes: this search does not search slice sizes; leave it out")
        if self._chunked:
            if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
                raise ValueError(
                    f"chunk_bytes: this search is joint over chunk sizes; report the chunk size the "
                    f"iteration used (bytes >= 1), got {chunk_bytes!r}"
                )
        elif chunk_bytes is not None:
            raise ValueError("chunk_bytes: this search does not search chunk sizes; leave it out")
        self._emit(self._report(Trial(values, slice_bytes, chunk_bytes), float(t)))

    @property
    def best(self) -> tuple[float, ...] | None:
        """The chosen thresholds once a search has converged (kept while a re-tune runs), else None."""
        return None if self._best is None else self._best.thresholds

    @property
    def best_slice_bytes(self) -> int | None:
        return None if self._best is None else self._best.slice_bytes

    @property
    def best_chunk_bytes(self) -> int | None:
        """The chosen chunk size of a search joint over chunk sizes, else None."""
        return None if self._best is None else self._best.chunk_bytes

    @property
    def best_time(self) -> float | None:
        """The strategy's estimate of the best setting's iteration time (fitted or measured)."""
        return self._best_time

    @property
    def converged(self) -> bool:
        return self._converged

    @property
    def epoch(self) -> int:
        """How many times drift made the searcher re-tune."""
        return self._epoch

    @property
    def live_iterations(self) -> int:
        """Reports the current (or last) search used, warm-up included; at most `budget`."""
        return self._live

    @property
    def iterations(self) -> int:
        return self._total

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- strategies implement ------------------------------------------------------------------
    def _make_planner(self) -> Planner:
        raise NotImplementedError

    def _predictions(self, trials: Sequence[Trial]) -> list[float]:
        """The predictor's time for each trial; on resume, the ones the log recorded for this search."""
        logged = self._ranks.get(self._epoch)
        wanted = [t.to_json() for t in trials]
        if logged is not None:
            if _normalized(logged.get("trials")) != _normalized(wanted):
                raise ValueError(
                    f"log_path: the logged candidates of search {self._epoch} differ from this searcher's; "
                    "was the log written with other options?"
                )
            return [float(v) for v in logged["predicted"]]
        assert self._predictor is not None
        out = []
        for trial in trials:
            extra = {"chunk_bytes": trial.chunk_bytes} if self._chunked else {}
            if self._joint:
                value = self._predictor(trial.thresholds, trial.slice_bytes, **extra)
            else:
                value = self._predictor(trial.thresholds, **extra)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(
                    f"predictor: returned {value!r} for thresholds {list(trial.thresholds)}; "
                    "expected an iteration time in seconds"
                )
            out.append(float(value))
        event = {"event": "rank", "epoch": self._epoch, "trials": wanted, "predicted": out}
        self._ranks[self._epoch] = event
        self._emit(event)
        return out

    # --- the machinery ---------------------------------------------------------------------------
    def _start_search(self) -> None:
        self._planner = self._make_planner()
        self._live = 0
        self._samples = []
        self._converged = False
        self._pending = self._first = self._planner.propose()
        if self._pending is None:
            self._finish()

    def _report(self, trial: Trial, time: float) -> dict[str, Any]:
        self._total += 1
        if trial != self._last:
            self._last = trial
            self._since_change = 0
        self._since_change += 1
        warm = self._since_change <= self.options["warmup"]
        free = warm and self._uncharged > 0
        self._uncharged = self._uncharged - 1 if free else 0
        retuned = False
        if not self._converged:
            if not free:
                self._live += 1
            used = not warm and trial == self._pending
            if used:
                self._samples.append(time)
                if len(self._samples) >= self.options["repeats"]:
                    self._planner.observe(trial, statistics.median(self._samples))
                    self._samples = []
                    self._pending = self._planner.propose()
                    if self._pending is None:
                        self._finish()
            if not self._converged and self._live >= self.options["budget"]:
                self._finish()
        else:
            used = not warm and trial == self._best
            if used:
                retuned = self._watch(time)
        return {
            "event": "report",
            "n": self._total,
            "epoch": self._epoch,
            **trial.to_json(),
            "time": time,
            "warmup": warm,
            "used": used,
            "live": self._live,
            "converged": self._converged,
            "retune": retuned,
            "next": self.next_trial().to_json(),
            "best": None if self._best is None else self._best.to_json(),
            "best_time": self._best_time,
            "planner": self._planner.state(),
        }

    def _finish(self) -> None:
        """Ends the search: folds in a half-measured candidate, takes the strategy's recommendation."""
        if self._samples and self._pending is not None:
            self._planner.observe(self._pending, statistics.median(self._samples))
        self._samples = []
        self._pending = None
        recommended = self._planner.recommend()
        if recommended is not None:
            self._best, self._best_time = recommended
        elif self._best is None:  # nothing measured at all (a tiny budget): keep the first candidate
            self._best, self._best_time = self._first, None
        self._converged = True
        self._window.clear()
        self._reference = None

    def _watch(self, time: float) -> bool:
        """Drift check on the best setting; True when it started a re-tune."""
        if self.options["drift"] is None:
            return False
        self._window.append(time)
        if len(self._window) < self._window.maxlen:  # type: ignore[operator]
            return False
        level = statistics.median(self._window)
        if self._reference is None:
            self._reference = level
            return False
        if abs(level / self._reference - 1.0) <= self.options["drift"]:
            return False
        self._epoch += 1
        self._start_search()
        return True

    def _mark_resume(self) -> None:
        self._on_resume()
        self._emit({"event": "resume", "n": self._total})

    def _on_resume(self) -> None:
        # A new process: its first iterations (graph building, new connections) are warm-up too. The
        # restart's cost is not the search's, so the budget does not pay for them: a resumed search
        # ends with the same decision as one that never stopped.
        self._last = None
        self._uncharged = self.options["warmup"]

    def _emit(self, event: dict[str, Any]) -> None:
        if self._log is None or (self._replaying and event["event"] == "report"):
            return  # a replayed report is in the log already
        if self._log.is_open:
            self._log.write(event)
        else:
            self._unwritten.append(event)

    # --- resume ------------------------------------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        return {
            "event": "start",
            "format": FORMAT,
            "version": VERSION,
            "strategy": self.strategy,
            "num_classes": self.num_classes,
            "options": _normalized(self.options),
        }

    def _check_header(self, header: dict[str, Any]) -> None:
        where = f"log_path: {self._log.path if self._log else ''}"
        if header.get("event") != "start" or header.get("format") != FORMAT:
            raise ValueError(f"{where}: not a threshold-search log (first line must be its header)")
        if header.get("version") != VERSION:
            raise ValueError(f"{where}: log version {header.get('version')!r}; this code reads {VERSION}")
        for key in ("strategy", "num_classes"):
            if header.get(key) != getattr(self, key):
                raise ValueError(
                    f"{where}: the log is of a search with {key}={header.get(key)!r}, "
                    f"this searcher has {key}={getattr(self, key)!r}"
                )
        logged = header.get("options", {})
        mine = _normalized(self.options)
        for name in sorted(set(logged) | set(mine)):
            if logged.get(name) != mine.get(name):
                raise ValueError(
                    f"{where}: the log was written with {name}={logged.get(name)!r}, "
                    f"this searcher has {name}={mine.get(name)!r}; resume with the same options"
                )

    def _replay(self, events: Sequence[dict[str, Any]]) -> None:
        for event in events:
            kind = event["event"]
            if kind == "resume":
                self._on_resume()
            elif kind == "report":
                try:
                    slice_bytes = event.get("slice_bytes")
                    chunk_bytes = event.get("chunk_bytes")
                    trial = Trial(tuple(float(t) for t in event["thresholds"]), slice_bytes, chunk_bytes)
                    record = self._report(trial, float(event["time"]))
                except (KeyError, TypeError, ValueError) as error:
                    raise ValueError(f"log_path: report {event.get('n')!r} is malformed: {error}") from None
                mine = _normalized(record)
                for key in _CHECKED:
                    if mine.get(key) != event.get(key):
                        raise ValueError(
                            f"log_path: replaying report {event.get('n')} gives {key}={mine.get(key)!r}, "
                            f"the log says {event.get(key)!r}; the log was written by other code or options"
                        )
            elif kind != "rank":
                raise ValueError(f"log_path: unknown event {kind!r}; expected report, rank or resume")


def _normalized(value: Any) -> Any:
    """The value as it reads back from JSON (tuples become lists), for comparisons with a log."""
    return json.loads(json.dumps(value))
