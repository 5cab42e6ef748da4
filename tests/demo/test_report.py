"""The demo's table and targets, over synthetic results in the runner's schema."""

from __future__ import annotations

import math
import re

import pytest
from demo_results import result

from geryon.demo.report import format_table, run_images_per_s, summarize

# batch 32, 2 workers: images/s = 64 / step s (single: 32 / step s).
STEPS = {
    "vanilla": [1.0, 1.1, 0.9],  # 64.0, 58.2, 71.1 images/s -> median 64
    "ps": [0.8, 0.8, 0.8],  # 80
    "geryon": [0.64, 0.6, 0.7],  # 100, 106.7, 91.4 -> median 100
    "endhost": [0.66, 0.66, 0.66],  # 96.97
    "single": [0.25, 0.25, 0.25],  # 128 with one worker
}


def target(summary: dict, name: str) -> dict:
    (t,) = [t for t in summary["targets"] if t["name"] == name]
    return t


def test_medians_speedups_scaling_and_ratios() -> None:
    s = summarize(result(STEPS))
    m = s["modes"]
    assert list(m) == ["vanilla", "ps", "geryon", "endhost", "single"]
    assert m["vanilla"]["images_per_s"] == pytest.approx(64.0)
    assert m["geryon"]["images_per_s"] == pytest.approx(100.0)
    assert sorted(m["geryon"]["images_per_s_all"]) == pytest.approx([64 / 0.7, 100.0, 64 / 0.6])
    assert m["geryon"]["median_step_s"] == pytest.approx(0.64)
    assert m["geryon"]["speedup_vs_vanilla"] == pytest.approx(100 / 64)
    assert m["vanilla"]["speedup_vs_vanilla"] == pytest.approx(1.0)
    # images/s / (workers x single's images/s)
    assert m["geryon"]["scaling_efficiency"] == pytest.approx(100 / (2 * 128))
    assert m["single"]["scaling_efficiency"] == pytest.approx(1.0)
    assert m["geryon"]["thresholds"] == [0.5]
    assert m["geryon"]["search_iterations"] == 9
    assert m["ps"]["thresholds"] is None and m["ps"]["search_iterations"] is None
    assert s["ratios"]["geryon/ps"] == pytest.approx(1.25)
    assert s["ratios"]["geryon/vanilla"] == pytest.approx(100 / 64)
    assert s["ratios"]["geryon/endhost"] == pytest.approx(100 / (64 / 0.66))
    for name in ("geryon/ps", "geryon/vanilla"):
        assert target(s, name)["met"] is True
    # 1.03x, but the paired interval over the 3 run pairs spans 1: not shown to be faster.
    assert target(s, "geryon/endhost")["met"] is False
    assert "not significant" in target(s, "geryon/endhost")["note"]


def test_table_lists_every_mode_with_aligned_columns_and_the_targets() -> None:
    text = format_table(result(STEPS))
    lines = text.splitlines()
    assert lines[0].startswith("model vggmini, 32x32x3, batch 32/worker, 2 workers, 2 PS, 100 Mbit/s")
    header = lines[1]
    rows = {line.split()[0]: line for line in lines[2:7]}
    assert list(rows) == ["vanilla", "ps", "geryon", "endhost", "single"]
    # Right-aligned numbers end under their header.
    end = header.index("images/s") + len("images/s")
    assert rows["geryon"][:end].endswith("100.0") and rows["vanilla"][:end].endswith("64.0")
    end = header.index("x vanilla") + len("x vanilla")
    assert rows["geryon"][:end].endswith("1.56x")
    end = header.index("scaling") + len("scaling")
    assert rows["geryon"][:end].endswith("39.1%")
    assert "91.4-106.7" in rows["geryon"]
    assert re.search(r"geryon >= 1\.15x ps\s+1\.25x\s+met", text)
    assert re.search(r"geryon >= 1\.5x vanilla\s+1\.56x\s+met", text)
    assert re.search(r"geryon > endhost\s+1\.03x\s+NOT met\s+2 PSes; paired .*not significant", text)
    assert "Targets (ratios: paired where 2+ pairs, else medians over 3 repeats):" in text


def test_a_missed_target_is_shown_as_not_met_with_its_number() -> None:
    steps = {**STEPS, "geryon": [0.75], "endhost": [0.7]}  # 85.3 images/s vs ps 80, vanilla 64, endhost 91.4
    s = summarize(result(steps))
    assert target(s, "geryon/ps")["met"] is False
    assert target(s, "geryon/ps")["measured"] == pytest.approx(85.333 / 80, rel=1e-3)
    assert target(s, "geryon/vanilla")["met"] is False
    assert target(s, "geryon/endhost")["met"] is False
    text = format_table(result(steps))
    assert re.search(r"geryon >= 1\.15x ps\s+1\.07x\s+NOT met", text)
    assert re.search(r"geryon >= 1\.5x vanilla\s+1\.33x\s+NOT met", text)
    assert re.search(r"geryon > endhost\s+0\.93x\s+NOT met", text)


def test_without_a_single_run_scaling_efficiency_is_na() -> None:
    steps = {k: v for k, v in STEPS.items() if k != "single"}
    s = summarize(result(steps))
    assert all(m["scaling_efficiency"] is None for m in s["modes"].values())
    text = format_table(result(steps))
    header, geryon = text.splitlines()[1], text.splitlines()[4]
    end = header.index("scaling") + len("scaling")
    assert geryon[:end].endswith("n/a")


def test_scaling_is_against_the_local_run_when_the_result_has_one() -> None:
    # The paper's baseline: one worker without PS or network, median images/s over its repeats.
    res = result(STEPS)
    res["local"] = [
        {"label": "r0-local", "error": None, "images_per_s": 160.0},
        {"label": "r1-local", "error": "boom", "images_per_s": None},
        {"label": "r2-local", "error": None, "images_per_s": 150.0},
    ]
    s = summarize(res)
    assert s["scaling_basis"] == "local" and s["local_images_per_s"] == pytest.approx(155.0)
    assert s["modes"]["geryon"]["scaling_efficiency"] == pytest.approx(100 / (2 * 155))
    assert s["modes"]["single"]["scaling_efficiency"] == pytest.approx(128 / 155)
    text = format_table(res)
    assert "single-worker training without PS or network, 155.0 images/s, the paper's baseline" in text
    assert "note: one worker with its PSes" not in text  # single at 83% of alone: nothing to explain
    res["local"] = [{"label": "r0-local", "error": None, "images_per_s": 760.0}]
    assert "note: one worker with its PSes (single) trains at 17% of one worker alone" in format_table(res)


def test_without_a_local_run_scaling_falls_back_to_single_and_says_so() -> None:
    res = result(STEPS)
    res["local"] = [{"label": "r0-local", "error": "the local run exited without a result"}]
    s = summarize(res)
    assert s["scaling_basis"] == "single"
    assert s["modes"]["geryon"]["scaling_efficiency"] == pytest.approx(100 / (2 * 128))
    assert "no local run in this result, so against one worker WITH the PSes" in format_table(res)


def test_a_failed_mode_is_shown_failed_and_its_targets_are_not_measured() -> None:
    steps = {**STEPS, "endhost": [None, None, None], "single": [None, 0.25, 0.25]}
    res = result(steps)
    s = summarize(res)
    assert s["modes"]["endhost"]["images_per_s"] is None
    assert s["modes"]["endhost"]["failed"] == 3
    assert s["ratios"]["geryon/endhost"] is None
    t = target(s, "geryon/endhost")
    assert t["met"] is None and "endhost failed" in t["note"]
    # One failed repeat of three: medians over the two that completed, said in a note.
    assert s["modes"]["single"]["images_per_s"] == pytest.approx(128.0)
    assert s["modes"]["single"]["ok"] == 2
    text = format_table(res)
    assert re.search(r"^endhost .*FAILED \(3/3 runs\): RuntimeError: worker1 died$", text, re.M)
    assert "Traceback" not in text
    assert (
        "single: 1 of 3 runs failed (RuntimeError: worker1 died); medians over the 2 that completed" in text
    )
    assert re.search(r"geryon > endhost\s+n/a\s+n/a\s+not measured: endhost failed", text)


def test_the_endhost_target_needs_two_pses() -> None:
    s = summarize(result(STEPS, ps=1))
    t = target(s, "geryon/endhost")
    assert t["met"] is None
    assert t["measured"] == pytest.approx(100 / (64 / 0.66))
    assert "needs >= 2 PSes; this run has 1" in t["note"]


def test_prediction_errors_are_targets_within_ten_percent() -> None:
    prediction = {
        "modes": {
            "ps": {"predicted_s": 0.72, "measured_s": 0.8, "error": 0.1},
            "geryon": {"predicted_s": 0.5, "measured_s": 0.64, "error": (0.64 - 0.5) / 0.64, "bound_s": 0.4},
            "vanilla": {"predicted_s": 1.05, "measured_s": 1.0, "error": -0.05},
            "single": {"predicted_s": 0.2, "measured_s": None, "error": None},
        }
    }
    res = result(STEPS, prediction=prediction)
    s = summarize(res)
    assert target(s, "prediction/ps")["met"] is True  # exactly 10%
    assert target(s, "prediction/geryon")["met"] is False
    assert target(s, "prediction/vanilla")["met"] is True
    assert target(s, "prediction/single")["met"] is None
    text = format_table(res)
    assert re.search(
        r"prediction error geryon <= 10%\s+\+21\.9%\s+NOT met\s+measured 0\.640, predicted 0\.500", text
    )
    assert re.search(r"prediction error vanilla <= 10%\s+-5\.0%\s+met", text)
    header = text.splitlines()[1]
    geryon = next(line for line in text.splitlines() if line.startswith("geryon "))
    end = header.index("predicted s") + len("predicted s")
    assert geryon[:end].endswith("0.500")
    assert header.endswith("error  x bound") and len(geryon) == len(header)
    # The measured step over the simulator's lower bound (issue 38 item 5); n/a without a bound.
    assert geryon.endswith("+21.9%    1.60x")
    assert next(line for line in text.splitlines() if line.startswith("ps ")).endswith("+10.0%      n/a")
    assert "x bound = step / the simulator's lower bound" in text


def test_a_failed_prediction_is_reported() -> None:
    res = result(STEPS, prediction={"error": "measuring the vggmini profile failed (exit 1): boom"})
    s = summarize(res)
    assert target(s, "prediction")["met"] is None
    text = format_table(res)
    assert "prediction: failed: measuring the vggmini profile failed (exit 1): boom" in text


def test_images_per_s_comes_from_step_times_when_missing() -> None:
    res = result({"ps": [0.8]})
    run = res["runs"][0]
    run["images_per_s"] = None
    run["median_step_s"] = None
    run["step_times"] = [0.5, 0.8, 2.0]
    assert run_images_per_s(run, res["config"]) == pytest.approx(64 / 0.8)
    assert summarize(res)["modes"]["ps"]["median_step_s"] == pytest.approx(0.8)


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"config": None, "runs": None},
        {"config": {"modes": "geryon"}, "runs": [1, "x", None, {"mode": "geryon"}]},
        {"config": {"workers": 0, "batch_size": "32"}, "runs": [{"mode": "ps", "images_per_s": math.nan}]},
        {
            "runs": [{"mode": "single", "images_per_s": -1.0, "error": None}],
            "prediction": {"modes": {"x": 1}},
        },
    ],
)
def test_malformed_results_never_crash(broken: dict) -> None:
    s = summarize(broken)
    text = format_table(broken)
    for mode, m in s["modes"].items():
        assert m["images_per_s"] is None
        assert re.search(rf"^{mode} .*FAILED", text, re.M)


def test_the_table_says_why_the_default_shape_under_its_title() -> None:
    res = result(STEPS)
    res["shape_note"] = "why this shape: only network priority can order against it"
    lines = format_table(res).splitlines()
    assert lines[1] == res["shape_note"]
    assert "why this shape" not in format_table(result(STEPS))


def _pair(ratio: float, ci: tuple[float, float]) -> dict:
    verdict = "not significant" if ci[0] <= 1 <= ci[1] else "A faster" if ci[0] > 1 else "B faster"
    return {
        "a": "geryon",
        "b": "endhost",
        "ratio": ratio,
        "ci": list(ci),
        "pairs": 40,
        "unit": "round",
        "verdict": verdict,
    }


@pytest.mark.parametrize(
    ("ci", "met"),
    [((0.998, 1.103), False), ((1.005, 1.110), True)],
)
def test_geryon_beats_endhost_only_when_the_paired_interval_clears_one(
    ci: tuple[float, float], met: bool
) -> None:
    # "geryon > endhost" claims geryon is faster: a paired ratio of 1.06 whose interval spans 1 is noise.
    from geryon.demo.report import _targets

    r = result(STEPS)
    s = summarize(r)
    targets = _targets(s["modes"], s["ratios"], r["config"], None, [_pair(1.061, ci)])
    (t,) = [t for t in targets if t["name"] == "geryon/endhost"]
    assert t["measured"] == pytest.approx(1.061)
    assert t["met"] is met
    assert "paired 1.061x" in t["note"]


def test_the_table_says_which_ps_costs_and_incast_the_prediction_used() -> None:
    prediction = {
        "modes": {"ps": {"predicted_s": 0.72, "measured_s": 0.8, "error": 0.1}},
        "ps_costs": {"note": "PS costs: out/bench/ps_costs.json"},
        "incast": {"note": "incast: out/bench/incast.json (fifo: alone 1.000, shared 0.852)"},
    }
    text = format_table(result(STEPS, prediction=prediction))
    assert "PS costs: out/bench/ps_costs.json" in text
    assert "incast: out/bench/incast.json (fifo: alone 1.000, shared 0.852)" in text
