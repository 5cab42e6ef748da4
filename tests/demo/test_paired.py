"""geryon.demo.paired: pair ratios, the seeded bootstrap interval, verdicts, and pairing a result's runs."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
from demo_results import result

from geryon.demo import paired


def test_the_interval_is_seeded_holds_the_median_and_collapses_on_constant_data() -> None:
    values = [1.0, 1.2, 0.9, 1.1, 1.05, 1.3, 0.95]
    ci = paired.bootstrap_ci(values)
    assert ci is not None and ci == paired.bootstrap_ci(values)  # same result read twice: same interval
    assert ci[0] <= statistics.median(values) <= ci[1]
    assert paired.bootstrap_ci([1.1] * 5) == (1.1, 1.1)
    assert paired.bootstrap_ci([1.1]) is None and paired.bootstrap_ci([]) is None


def test_the_interval_covers_the_true_median_about_95_times_in_100_and_narrows_with_more_pairs() -> None:
    rng = random.Random(3)
    trials, covered = 100, 0
    for _ in range(trials):
        sample = [rng.gauss(1.10, 0.05) for _ in range(30)]  # the true median is 1.10
        lo, hi = paired.bootstrap_ci(sample, resamples=1000) or (0.0, 0.0)
        covered += lo <= 1.10 <= hi
    # A percentile bootstrap of a median at n=30 covers a little under its nominal 95%.
    assert 0.85 * trials <= covered <= trials
    few = paired.bootstrap_ci([rng.gauss(1.10, 0.05) for _ in range(8)]) or (0.0, 0.0)
    many = paired.bootstrap_ci([rng.gauss(1.10, 0.05) for _ in range(200)]) or (0.0, 0.0)
    assert many[1] - many[0] < few[1] - few[0] and many[0] > 1.0


def test_bad_levels_and_resamples_are_refused_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="level"):
        paired.bootstrap_ci([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError, match="resamples"):
        paired.bootstrap_ci([1.0, 2.0], resamples=0)


def test_verdicts_name_the_faster_mode_only_when_the_interval_excludes_one() -> None:
    assert paired.verdict((1.02, 1.2), "geryon", "endhost") == "geryon faster"
    assert paired.verdict((0.8, 0.97), "geryon", "endhost") == "endhost faster"
    assert paired.verdict((0.95, 1.08), "geryon", "endhost") == "not significant"
    assert paired.verdict(None, "geryon", "endhost") == "one pair: no interval"
    row = paired.compare("geryon", [1.0, 1.01, 0.99, 1.02, 0.98], "endhost", "round")
    assert row["verdict"] == "not significant" and row["pairs"] == 5 and row["ratio"] == 1.0
    assert paired.compare("a", [], "b", "run")["verdict"] == "not measured"


def _paired(r: dict[str, Any], rotation: list[str], times: dict[str, list[list[float]]]) -> None:
    """Marks the rotation's runs as one paired cluster per repeat with the given round times."""
    for run in r["runs"]:
        if run["mode"] in rotation:
            run["paired"] = {"rotation": rotation, "alternation": "round"}
            run["step_times"] = times[run["mode"]][run["repeat"]]


def test_paired_modes_pair_round_by_round_and_others_run_by_run() -> None:
    r = result({"ps": [0.8, 0.9], "geryon": [0.5, 0.5], "paper": [0.5, 0.5], "endhost": [0.55, 0.6]})
    _paired(
        r,
        ["geryon", "paper", "endhost"],
        {
            "geryon": [[0.50, 0.52, 0.48], [0.50, 0.51, 0.60]],
            "paper": [[0.50, 0.52, 0.48], [0.50, 0.51, 0.60]],
            "endhost": [[0.55, 0.57, 0.53], [0.55, 0.56, 0.66]],
        },
    )
    rows = {(x["a"], x["b"]): x for x in paired.compare_result(r)}
    gh = rows[("geryon", "endhost")]
    assert gh["unit"] == "round" and gh["pairs"] == 6 and gh["repeats"] == 2
    assert gh["ratio"] == pytest.approx(
        statistics.median([0.55 / 0.5, 0.57 / 0.52, 0.53 / 0.48, 1.1, 0.56 / 0.51, 1.1])
    )
    assert gh["verdict"] == "geryon faster"
    assert rows[("geryon", "paper")]["verdict"] == "not significant"  # the same times: ratio 1
    gp = rows[("geryon", "ps")]
    assert gp["unit"] == "run" and gp["pairs"] == 2
    assert gp["ratio"] == pytest.approx(statistics.median([0.8 / 0.5, 0.9 / 0.5]))
    assert ("geryon", "vanilla") not in rows  # vanilla did not run


def test_failed_runs_are_left_out_of_the_pairs() -> None:
    r = result({"ps": [0.8, None, 0.8], "geryon": [0.5, 0.5, 0.5]})
    (row,) = [x for x in paired.compare_result(r) if x["b"] == "ps"]
    assert row["pairs"] == 2 and row["repeats"] == 2
    text = "\n".join(paired.format_rows([row]))
    assert "geryon/ps  1.600x  95% [1.600, 1.600]  2 run pairs  geryon faster" in text
