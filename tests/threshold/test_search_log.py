"""The search log: one JSON line per report; resuming from it (after a real SIGKILL) to the same decision."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from geryon.threshold.search import STRATEGIES, Searcher, make_searcher, resume_searcher

# A deterministic "noisy" curve: the wiggle stands in for noise but repeats exactly, so an interrupted
# and an uninterrupted search see the same measurements. Shared with the child process as source.
CURVE_SRC = textwrap.dedent(
    """
    import math

    def curve(ts, slice_bytes=None):
        return 1.0 + 2.0 * (ts[0] - 0.4) ** 2 + 0.02 * math.sin(97.0 * ts[0])
    """
)
namespace: dict[str, Any] = {}
exec(CURVE_SRC, namespace)
curve = namespace["curve"]

OPTIONS: dict[str, dict[str, Any]] = {
    "sweep": {"points": 7, "budget": 14},
    "guided": {"top": 3, "budget": 9},
    "bayes": {"budget": 14},
}

CHILD = CURVE_SRC + textwrap.dedent(
    """
    import json, os, signal, sys
    from geryon.threshold.search import make_searcher

    strategy, log_path, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = json.loads(sys.argv[4])
    predictor = curve if strategy == "guided" else None
    searcher = make_searcher(strategy, predictor=predictor, log_path=log_path, **options)
    for _ in range(kill_after):
        ts = searcher.next_threshold()
        searcher.report(ts, curve(ts))
    os.kill(os.getpid(), signal.SIGKILL)  # no close(), no flush beyond what report() did
    """
)


def run_to_end(searcher: Searcher, limit: int = 100) -> list[tuple[float, ...]]:
    asked = []
    for _ in range(limit):
        if searcher.converged:
            break
        ts = searcher.next_threshold()
        asked.append(ts)
        searcher.report(ts, curve(ts))
    return asked


def predictor_for(strategy: str) -> Any:
    return curve if strategy == "guided" else None


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_report_is_one_json_line(tmp_path: Path) -> None:
    log = tmp_path / "search.jsonl"
    with make_searcher("sweep", log_path=log, warmup=1) as searcher:
        asked = run_to_end(searcher)
        for _ in range(3):  # converged iterations are logged too
            searcher.report(searcher.next_threshold(), 1.0)
    lines = read_lines(log)
    assert lines[0]["event"] == "start" and lines[0]["strategy"] == "sweep"
    assert lines[0]["options"]["warmup"] == 1 and lines[0]["options"]["points"] == 5
    reports = [line for line in lines if line["event"] == "report"]
    assert len(reports) == len(asked) + 3 == 13
    assert [tuple(r["thresholds"]) for r in reports[: len(asked)]] == asked
    assert [r["n"] for r in reports] == list(range(1, 14))
    assert [r["warmup"] for r in reports[:4]] == [True, False, True, False]
    assert reports[0]["time"] == pytest.approx(curve(asked[0]))
    assert reports[len(asked) - 1]["converged"] and reports[-1]["best"]["thresholds"] == list(searcher.best)
    assert {"planner", "next", "live", "epoch"} <= set(reports[0])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kill_after", [1, 5])
def test_resume_after_sigkill_reaches_the_same_decision(
    tmp_path: Path, strategy: str, kill_after: int
) -> None:
    options = OPTIONS[strategy]
    reference = make_searcher(strategy, predictor=predictor_for(strategy), **options)
    run_to_end(reference)
    assert reference.best is not None

    log = tmp_path / f"{strategy}.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, strategy, str(log), str(kill_after), json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert sum(1 for line in read_lines(log) if line["event"] == "report") == kill_after

    resumed = resume_searcher(log, predictor=predictor_for(strategy))
    assert resumed.iterations == kill_after and not resumed.converged
    run_to_end(resumed)
    resumed.close()
    assert resumed.best == reference.best
    assert resumed.best_time == pytest.approx(reference.best_time)
    assert resumed.live_iterations == reference.live_iterations  # the restart's warm-up is not charged
    assert [line["event"] for line in read_lines(log)].count("resume") == 1

    # A second resume replays the whole log (with its resume line) and lands on the same state.
    again = make_searcher(strategy, predictor=predictor_for(strategy), log_path=log, **options)
    assert again.converged and again.best == reference.best
    again.close()


def test_resume_mid_measurement_with_repeats(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    first = make_searcher("sweep", log_path=log, repeats=3, warmup=1, budget=20)
    for _ in range(6):  # candidate 1: warm-up + 3; candidate 2: warm-up + 1 of 3
        ts = first.next_threshold()
        first.report(ts, curve(ts))
    first.close()
    second = make_searcher("sweep", log_path=log, repeats=3, warmup=1, budget=20)
    assert second.next_threshold() == ts
    second.report(ts, curve(ts))  # a warm-up again: new process
    lines = read_lines(log)
    assert lines[-1]["warmup"] is True and lines[-1]["used"] is False and lines[-1]["live"] == 6
    second.close()


def test_torn_last_line_is_dropped_and_repaired(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    with make_searcher("sweep", log_path=log, warmup=0) as s:
        for _ in range(3):
            ts = s.next_threshold()
            s.report(ts, curve(ts))
    with log.open("a") as f:
        f.write('{"event":"report","n":4,"thresh')  # killed mid-write
    with make_searcher("sweep", log_path=log, warmup=0) as s:
        assert s.iterations == 3
        run_to_end(s)
        best = s.best
    lines = read_lines(log)  # every line parses again
    assert [line["n"] for line in lines if line["event"] == "report"] == list(range(1, len(lines) - 1))
    reference = make_searcher("sweep", warmup=0)
    run_to_end(reference)
    assert best == reference.best


def test_guided_resume_uses_the_logged_predictions(tmp_path: Path) -> None:
    log = tmp_path / "g.jsonl"
    with make_searcher("guided", predictor=curve, log_path=log) as s:
        ts = s.next_threshold()
        s.report(ts, curve(ts))
    rank = [line for line in read_lines(log) if line["event"] == "rank"]
    assert len(rank) == 1 and len(rank[0]["predicted"]) == 39

    def unavailable(ts: tuple[float, ...]) -> float:
        raise AssertionError("the simulator must not run again on resume")

    with make_searcher("guided", predictor=unavailable, log_path=log) as s:
        run_to_end(s)
        assert s.best is not None


def test_resume_with_other_options_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    with make_searcher("sweep", log_path=log, budget=10) as s:
        s.report(s.next_threshold(), 1.0)
    size = log.stat().st_size
    with pytest.raises(ValueError, match="log was written with budget=10, this searcher has budget=12"):
        make_searcher("sweep", log_path=log, budget=12)
    with pytest.raises(ValueError, match="log is of a search with strategy='sweep'"):
        make_searcher("bayes", log_path=log)
    with pytest.raises(ValueError, match="num_classes=2, this searcher has num_classes=3"):
        make_searcher("sweep", 3, log_path=log)
    assert log.stat().st_size == size  # a refused resume writes nothing


def test_a_log_that_does_not_replay_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    with make_searcher("sweep", log_path=log, warmup=0) as s:
        run_to_end(s)
    lines = log.read_text().splitlines()
    tampered = json.loads(lines[3])
    tampered["time"] *= 5  # a different measurement makes a different decision downstream
    last = json.loads(lines[-1])
    lines[3] = json.dumps(tampered)
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"replaying report \d+ gives (next|best)=.*the log says"):
        make_searcher("sweep", log_path=log, warmup=0)
    assert last["converged"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"event":"report"}\n', "not a threshold-search log"),
        ('{"event":"start","format":"geryon.threshold-search","version":9}\n', "log version 9"),
        ('not json\n{"event":"x"}\n', r"s.jsonl:1: not valid JSON"),
        ("[1, 2]\n[3]\n", r"s.jsonl:1: expected an object with an 'event' field"),
    ],
)
def test_bad_log_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    log = tmp_path / "s.jsonl"
    log.write_text(content)
    with pytest.raises(ValueError, match=message):
        make_searcher("sweep", log_path=log)


def test_resume_searcher_needs_a_log(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no search log to resume"):
        resume_searcher(tmp_path / "missing.jsonl")


def test_unwritable_log_path_is_named(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "s.jsonl"
    with pytest.raises(ValueError, match="log_path: cannot write"):
        make_searcher("sweep", log_path=target)


def test_joint_search_resumes_with_slice_sizes(tmp_path: Path) -> None:
    log = tmp_path / "j.jsonl"
    sizes = [1024, 4096, 16384]

    def joint(trial: Any) -> float:
        return curve(trial.thresholds) + (0.0 if trial.slice_bytes == 4096 else 0.05)

    with make_searcher("bayes", log_path=log, slice_sizes=sizes, budget=20) as s:
        for _ in range(7):
            trial = s.next_trial()
            s.report(trial.thresholds, joint(trial), trial.slice_bytes)
    with resume_searcher(log) as s:
        while not s.converged:
            trial = s.next_trial()
            s.report(trial.thresholds, joint(trial), trial.slice_bytes)
        assert s.best_slice_bytes == 4096


def test_a_refused_searcher_writes_no_log(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    with pytest.raises(ValueError, match="predictor: returned nan"):
        make_searcher("guided", predictor=lambda ts: float("nan"), log_path=log)
    with pytest.raises(ValueError, match="urgencies: 2 distinct urgencies allow at most 2 classes"):
        make_searcher("sweep", 3, urgencies=[0.1, 0.9], log_path=log)
    assert not log.exists()
    with make_searcher("guided", predictor=curve, log_path=log) as s:  # the same path works afterwards
        s.report(s.next_threshold(), 1.0)
    assert [line["event"] for line in read_lines(log)] == ["start", "rank", "report"]


def test_resume_during_a_retune(tmp_path: Path) -> None:
    log = tmp_path / "g.jsonl"
    options: dict[str, Any] = {"drift_window": 3, "warmup": 0, "repeats": 1, "top": 3, "grid": 19}
    first = make_searcher("guided", predictor=curve, log_path=log, **options)
    run_to_end(first)
    for _ in range(3):
        first.report(first.next_threshold(), 1.0)
    for _ in range(2):
        first.report(first.next_threshold(), 2.0)  # the median of the window doubles: re-tune
    assert first.epoch == 1 and not first.converged
    ts = first.next_threshold()
    first.report(ts, 2.0 * curve(ts))
    first.close()
    ranks = [line for line in read_lines(log) if line["event"] == "rank"]
    assert [r["epoch"] for r in ranks] == [0, 1]  # the new search ranked again, and logged it

    second = resume_searcher(log, predictor=curve)
    assert second.epoch == 1 and not second.converged and second.live_iterations == 1
    assert second.best == first.best  # the old best stands until the new search decides
    while not second.converged:
        ts = second.next_threshold()
        second.report(ts, 2.0 * curve(ts))
    second.close()
    assert second.epoch == 1 and second.best is not None
