"""bench/bench_e2e.py without the cluster: its flags, its run plan and its tables on synthetic results.

The runs themselves (real TF training on the emulated cluster) are `geryon.demo.runner.run_demo`'s,
tested in tests/demo; here only what the script adds on top."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
from demo_results import result

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def e2e(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its sibling benchlib
    return importlib.import_module("bench_e2e")


def scaled(res: dict, workers: int) -> dict:
    """The same result as if run with `workers` workers (throughput scales with the global batch)."""
    res["config"]["workers"] = workers
    for run in res["runs"]:
        if run["mode"] != "single":
            run["workers"] = workers
            run["images_per_s"] = res["config"]["batch_size"] * workers / run["median_step_s"]
    return res


def test_defaults_plan_the_targets_run(e2e: ModuleType) -> None:
    args = e2e.parse_args([])
    assert args.repeats == 5 and args.sweep_workers == [1, 2, 4]
    assert args.sweep_slices == [1 << 20, 512 << 10, 256 << 10]
    ((section, name, overrides),) = e2e.plan(args)
    assert (section, name) == ("targets", "targets")
    assert overrides["modes"] == ["vanilla", "ps", "geryon", "paper", "endhost", "single"]
    assert overrides["repeats"] == 5  # the minimum of alternations
    assert overrides["rate_bits"] is None  # the runner's default


def test_sweeps_plan_one_run_per_point(e2e: ModuleType) -> None:
    args = e2e.parse_args(
        [
            *("--rate", "50mbit", "--fig8-9", "--rates", "50mbit,200mbit", "--sweep-workers", "1,2,4"),
            *("--table-iv", "--sweep-slices", "1MiB,256K", "--repeats", "2", "--model", "tiny"),
        ]
    )
    runs = e2e.plan(args)
    assert [s for s, _, _ in runs] == ["targets"] + ["fig8-9"] * 6 + ["table-iv"] * 2
    assert runs[0][2]["rate_bits"] == 50_000_000
    fig = [o for s, _, o in runs if s == "fig8-9"]
    assert [(o["rate_bits"], o["workers"]) for o in fig] == [
        (r, w) for r in (50_000_000, 200_000_000) for w in (1, 2, 4)
    ]
    assert fig[0]["modes"] == ["single"] and fig[1]["modes"] == ["vanilla", "ps", "geryon"]
    table = [o for s, _, o in runs if s == "table-iv"]
    assert [o["slice_bytes"] for o in table] == [1 << 20, 256 << 10]
    assert all(o["modes"] == ["geryon", "paper", "endhost"] for o in table)  # one paired cluster
    assert all(o["repeats"] == 2 and o["model"] == "tiny" for _, _, o in runs)
    # Distinct names: each run writes its own folder.
    assert len({n for _, n, _ in runs}) == len(runs)
    assert e2e.plan(e2e.parse_args(["--no-targets", "--table-iv"]))[0][0] == "table-iv"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "10g"], "argument --rate: '10g' is not a rate"),
        (["--repeats", "0"], "argument --repeats: '0': expected an integer >= 1"),
        (["--sweep-workers", "1,,4"], "argument --sweep-workers: '1,,4': expected a comma-separated list"),
        (["--sweep-slices", "1MiB,x"], "argument --sweep-slices: invalid size 'x'"),
        (["--no-targets"], "--no-targets: nothing left to run"),
        (["--background", "fast"], "argument --background: 'fast' is not a rate"),
        (["--chunk-size", "x"], "argument --chunk-size: invalid size 'x'"),
        (["--api", "keras2"], "argument --api: 'keras2': expected custom, fit or custom,fit"),
        (["--api", "fit,fit"], "argument --api: 'fit,fit': expected custom, fit or custom,fit"),
        (["--steps-per-execution", "0"], "argument --steps-per-execution: '0': expected an integer >= 1"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    e2e: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        e2e.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nope"], "--model 'nope'"),
        (["--modes", "geryon,turbo"], "--modes: unknown mode 'turbo'"),
        (["--chunk-size", "1KiB"], "--chunk-size 1024: expected an integer in 4096..1073741824"),
        (["--background", "400mbit"], "--background 400000000: expected an integer in 1000000..200000000"),
        (["--second-job", "lenet"], "--second-job 'lenet': model must be one of"),
        (["--api", "fit", "--model", "vgg16"], "--model 'vgg16': --api fit trains one of vggmini, tiny"),
    ],
)
def test_a_bad_runner_knob_exits_2_before_any_run(
    e2e: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    pytest.importorskip("geryon.demo.runner")
    assert e2e.main([*argv, "--out", "/nonexistent/never-written.json"]) == 2
    assert message in capsys.readouterr().err


def test_paired_only_with_a_second_job_plans_one_targets_run(e2e: ModuleType) -> None:
    args = e2e.parse_args(
        ["--modes", "geryon,paper,endhost", "--second-job", "vggmini:16", "--background", "none"]
    )
    ((section, _, overrides),) = e2e.plan(args)
    assert section == "targets" and overrides["modes"] == "geryon,paper,endhost"
    assert overrides["second_job"] == "vggmini:16" and overrides["background_bits"] == 0


def test_custom_and_fit_plan_one_targets_run_each(e2e: ModuleType) -> None:
    args = e2e.parse_args(["--api", "custom,fit", "--steps-per-execution", "10", "--table-iv"])
    runs = e2e.plan(args)
    assert [(s, n) for s, n, _ in runs[:2]] == [("targets", "targets"), ("targets", "targets-fit")]
    assert [(o["api"], o["steps_per_execution"]) for _, _, o in runs[:2]] == [("custom", None), ("fit", 10)]
    assert all(o["api"] == "custom" for s, _, o in runs if s == "table-iv")  # the sweeps: the first api
    ((_, _, fit),) = e2e.plan(e2e.parse_args(["--api", "fit"]))
    assert (fit["api"], fit["steps_per_execution"]) == ("fit", None)  # the runner's default, 1


def test_api_rows_compare_each_pair_of_the_fit_path_with_the_custom_loop(e2e: ModuleType) -> None:
    custom = result({"ps": [0.8, 0.8, 0.8], "geryon": [0.5, 0.5, 0.5], "endhost": [0.6, 0.6, 0.6]})
    fit = result({"ps": [0.8, 0.8, 0.8], "geryon": [0.52, 0.52, 0.52], "endhost": [0.6, 0.6, 0.6]})
    rows = {row["pair"]: row for row in e2e.api_rows(custom, fit)}
    assert rows["geryon/ps"]["custom"] == pytest.approx(1.6) and rows["geryon/ps"]["fit"] == pytest.approx(
        0.8 / 0.52
    )
    assert rows["geryon/ps"]["fit_over_custom"] == pytest.approx(0.5 / 0.52)
    assert rows["geryon/ps"]["within"] == "yes"  # 3.8% below the custom loop's ratio
    slow = result({"ps": [0.8, 0.8, 0.8], "geryon": [0.6, 0.6, 0.6], "endhost": [0.6, 0.6, 0.6]})
    rows = {row["pair"]: row for row in e2e.api_rows(custom, slow)}
    assert rows["geryon/endhost"]["within"] == "NO" and rows["geryon/endhost"]["fit"] == pytest.approx(1.0)


def test_target_rows_say_met_and_not_met(e2e: ModuleType) -> None:
    steps = {
        "vanilla": [1.0, 1.0],
        "ps": [0.8, 0.8],
        "geryon": [0.65, 0.7],
        "endhost": [0.7],
        "single": [0.25],
    }
    prediction = {"modes": {"geryon": {"predicted_s": 0.5, "measured_s": 0.675, "error": 0.175 / 0.675}}}
    rows = e2e.target_rows(result(steps, prediction=prediction))
    by = {r["target"]: r for r in rows}
    # geryon: median of 98.5 and 91.4 images/s = 94.9, over ps's 80 and vanilla's 64: 1.19x, 1.48x.
    assert (by["geryon >= 1.15x ps"]["measured"], by["geryon >= 1.15x ps"]["met"]) == ("1.19x", "met")
    assert (by["geryon >= 1.5x vanilla"]["measured"], by["geryon >= 1.5x vanilla"]["met"]) == (
        "1.48x",
        "NOT met",
    )
    assert by["geryon > endhost"]["met"] == "met"
    assert by["geryon > endhost"]["value"] == pytest.approx((64 / 0.65 + 64 / 0.7) / 2 / (64 / 0.7))
    assert (
        by["prediction error geryon <= 10%"]["measured"],
        by["prediction error geryon <= 10%"]["met"],
    ) == (
        "+25.9%",
        "NOT met",
    )


def test_fig8_rows_scale_against_the_single_worker_run(e2e: ModuleType) -> None:
    one = result({"single": [0.25]})  # 128 images/s
    one["config"]["workers"] = 1
    two = result({"vanilla": [1.0], "ps": [0.5], "geryon": [0.4]})  # 64, 128, 160 images/s
    four = scaled(result({"vanilla": [2.0], "ps": [0.8], "geryon": [0.5]}), 4)  # 64, 160, 256
    rows = e2e.fig8_rows([one, two, four])
    assert [r["workers"] for r in rows] == [1, 2, 4]
    assert rows[0]["geryon"] == pytest.approx(128) and rows[0]["eff_geryon"] == pytest.approx(1.0)
    assert rows[1]["x_vanilla"] == pytest.approx(2.5) and rows[1]["x_ps"] == pytest.approx(1.25)
    assert rows[1]["eff_geryon"] == pytest.approx(160 / (2 * 128))
    assert rows[2]["geryon"] == pytest.approx(256) and rows[2]["eff_geryon"] == pytest.approx(0.5)
    assert rows[2]["eff_vanilla"] == pytest.approx(64 / (4 * 128))


def test_fig8_rows_survive_a_failed_point(e2e: ModuleType) -> None:
    two = result({"vanilla": [None], "ps": [0.5], "geryon": [0.4]})
    (row,) = e2e.fig8_rows([two])
    assert row["vanilla"] is None and row["x_vanilla"] is None and row["eff_geryon"] is None
    assert row["x_ps"] == pytest.approx(1.25)


def test_table4_rows(e2e: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    results = []
    for slice_bytes, g, e in ((1 << 20, 0.5, 0.52), (256 << 10, 0.55, 0.7)):
        r = result({"geryon": [g], "endhost": [e]})
        r["config"]["slice_bytes"] = slice_bytes
        results.append(r)
    rows = e2e.table4_rows(results)
    assert [r["slice_kib"] for r in rows] == [1024, 256]
    assert rows[1]["ratio"] == pytest.approx(0.7 / 0.55)
    assert rows[0]["threshold"] == "0.5"
    assert rows[0]["paper"] is None and rows[0]["paired"] is not None  # run pairs: not one cluster here
    e2e.print_table(rows, e2e.TABLE4_COLUMNS)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:8] == ["slice", "KiB", "Geryon", "img/s", "paper", "img/s", "end-host", "img/s"]
    assert out[3].split()[:2] == ["256", "116.4"] and "91.4" in out[3] and "1.273" in out[3]


def test_paired_rows_carry_ratio_interval_and_verdict(e2e: ModuleType) -> None:
    r = result({"ps": [0.8, 0.82, 0.79], "geryon": [0.5, 0.52, 0.49], "paper": [0.5, 0.52, 0.49]})
    rows = {row["pair"]: row for row in e2e.paired_rows(r)}
    assert rows["geryon/ps"]["pairs"] == 3 and rows["geryon/ps"]["unit"] == "run"
    assert rows["geryon/ps"]["ci_lo"] > 1 and rows["geryon/ps"]["verdict"] == "geryon faster"
    assert rows["geryon/paper"]["verdict"] == "not significant"


def test_each_sweep_gets_a_chart_beside_the_rows_json(e2e: ModuleType, tmp_path: Path) -> None:
    matplotlib_image = pytest.importorskip("matplotlib.image")
    one = result({"single": [0.25]})
    one["config"]["workers"] = 1
    two = result({"vanilla": [1.0], "ps": [0.5], "geryon": [0.4]})
    slices = []
    for slice_bytes in (1 << 20, 256 << 10):
        r = result({"geryon": [0.5], "endhost": [0.52]})
        r["config"]["slice_bytes"] = slice_bytes
        slices.append(r)
    out = tmp_path / "e2e.json"
    paths = e2e.write_sweep_charts({"targets": [two], "fig8-9": [one, two], "table-iv": slices}, out)
    assert paths == [tmp_path / "e2e-fig8-9.png", tmp_path / "e2e-table-iv.png"]
    images = [matplotlib_image.imread(p) for p in paths]
    for image in images:
        assert image.shape[:2] == (480, 900) and image[..., :3].std() > 0.05
    assert (images[0] != images[1]).any()  # two sweeps, two pictures
    # Only the sweeps that ran get one.
    assert e2e.write_sweep_charts({"targets": [two], "fig8-9": [], "table-iv": []}, out) == []


def test_prediction_rows_put_each_modes_error_beside_the_alone_profiles(
    e2e: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    prediction = {
        "modes": {
            "ps": {"predicted_s": 0.5, "measured_s": 0.52, "error": 0.02 / 0.52},
            "geryon": {"predicted_s": 0.4, "measured_s": 0.5, "error": 0.2},
            "single": {"predicted_s": 0.3, "measured_s": None, "error": None},
        },
        "profile": {"used": "cluster", "from": "this run's ps mode"},
        "ps_costs": {"calibrated": False, "note": "PS costs: not calibrated — run bench/bench_ps_costs.py"},
    }
    alone = {
        "modes": {
            "ps": {"predicted_s": 0.35, "error": 0.15 / 0.52},
            "geryon": {"predicted_s": 0.3, "error": 0.4},
        }
    }
    rows = {r["mode"]: r for r in e2e.prediction_rows(result({"ps": [0.52]}, prediction=prediction), alone)}
    assert (rows["ps"]["met"], rows["geryon"]["met"], rows["single"]["met"]) == ("met", "NOT met", "n/a")
    assert rows["ps"]["profile"] == "cluster" and rows["ps"]["alone_error"] == pytest.approx(0.15 / 0.52)
    assert rows["single"]["alone_predicted_s"] is None
    from benchlib import print_table

    print_table(list(rows.values()), e2e.PREDICTION_COLUMNS)
    out = capsys.readouterr().out
    assert "+3.8%" in out and "+20.0%" in out and "alone error" in out


def test_prediction_flags_reach_the_runner_config(e2e: ModuleType, tmp_path: Path) -> None:
    args = e2e.parse_args(["--profile-source", "alone", "--ps-costs", str(tmp_path / "c.json")])
    ((_, _, overrides),) = e2e.plan(args)
    assert overrides["profile_source"] == "alone" and overrides["ps_costs"] == str(tmp_path / "c.json")
    assert e2e.plan(e2e.parse_args([]))[0][2]["profile_source"] is None  # the runner's default: cluster
