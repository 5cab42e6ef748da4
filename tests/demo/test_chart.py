"""The demo's PNG charts: real files, read back as images; the redraw command on saved results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from demo_results import result

from geryon.demo.chart import CHARTS, main, sweep_labels, timeline_panels, write_charts, write_sweep_chart
from geryon.demo.predict import arrival_timeline
from geryon.threshold.profile import LayerSpec, ParamSpec, Profile

matplotlib_image = pytest.importorskip("matplotlib.image")

STEPS = {
    "vanilla": [1.0, 1.1, 0.9],
    "ps": [0.8, 0.8, 0.8],
    "geryon": [0.64, 0.6, 0.7],
    "endhost": [0.66, 0.66, 0.66],
    "single": [0.25, 0.25, 0.25],
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


SIZES = {"timeline.png": (560, 1380), "sweep": (480, 900)}  # rows x columns; the rest 7 x 4.2 in


def read_png(path: Path, kind: str | None = None) -> np.ndarray:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    image = matplotlib_image.imread(path)
    name = kind or path.name.split("-")[-1]
    assert image.shape[:2] == SIZES.get(name, (420, 700)), path.name  # at 100 dpi
    return image


def three_layers() -> Profile:
    """Small conv layers first, a big dense one last: priority lets the small ones through first."""
    layers = tuple(LayerSpec(n, 1e-3, 2e-3) for n in ("conv1", "conv2", "fc"))
    params = (
        ParamSpec("conv1/kernel", (3, 3, 3, 16), 4, 1.0, 0),
        ParamSpec("conv1/bias", (16,), 4, 1.0, 0),
        ParamSpec("conv2/kernel", (3, 3, 16, 32), 4, 2 / 3, 1),
        ParamSpec("fc/kernel", (2048, 64), 4, 1 / 3, 2),
    )
    return Profile("three", 8, layers, params)


def with_timeline(res: dict, thresholds: list[float]) -> dict:
    """`res` with a prediction whose timeline the simulator made for the three-layer profile."""
    config = {**res["config"], "workers": 2, "ps": 2, "rate_bits": 20e6, "slice_bytes": 65536}
    timeline = arrival_timeline(three_layers(), config, res["runs"], {"geryon": {"thresholds": thresholds}})
    return {**res, "prediction": {"modes": {}, "timeline": timeline}}


def test_four_charts_with_content(tmp_path: Path) -> None:
    paths = write_charts(with_timeline(result(STEPS), [0.5]), tmp_path / "charts")
    assert [p.name for p in paths] == list(CHARTS)
    assert list(CHARTS) == ["throughput.png", "scaling.png", "search.png", "timeline.png"]
    for p in paths:
        assert p.parent == tmp_path / "charts"
        assert p.stat().st_size > 5000
        image = read_png(p)
        # Something is drawn: not one flat colour.
        assert image[..., :3].std() > 0.05


def test_the_numbers_change_the_pictures(tmp_path: Path) -> None:
    a = write_charts(result(STEPS), tmp_path / "a")
    b = write_charts(result({**STEPS, "geryon": [0.4, 0.4, 0.4]}), tmp_path / "b")
    again = write_charts(result(STEPS), tmp_path / "again")
    # The measured charts (the timeline is the prediction's: no prediction here, see below).
    for pa, pb, pc in zip(a[:3], b[:3], again[:3], strict=True):
        assert not np.array_equal(read_png(pa), read_png(pb)), pa.name
        # Same result, same pixels: the charts are reproducible.
        assert np.array_equal(read_png(pa), read_png(pc)), pa.name


def test_a_failed_mode_still_charts(tmp_path: Path) -> None:
    steps = {**STEPS, "endhost": [None, None, None], "single": [None]}
    paths = write_charts(result(steps), tmp_path)
    assert [p.name for p in paths] == list(CHARTS)
    full = write_charts(result(STEPS), tmp_path / "full")
    for p in paths:
        assert p.stat().st_size > 5000
        read_png(p)
    # The failed modes are missing from the throughput and scaling charts.
    assert not np.array_equal(read_png(paths[0]), read_png(full[0]))
    assert not np.array_equal(read_png(paths[1]), read_png(full[1]))


def test_an_empty_result_writes_every_chart_over_old_ones(tmp_path: Path) -> None:
    old = write_charts(result(STEPS), tmp_path)
    before = {p.name: p.read_bytes() for p in old}
    paths = write_charts({}, tmp_path)
    assert [p.name for p in paths] == list(CHARTS)
    for p in paths:
        read_png(p)
        assert p.read_bytes() != before[p.name]


def test_the_timeline_draws_the_predicted_rows(tmp_path: Path) -> None:
    res = with_timeline(result(STEPS), [0.5])
    why, panels = timeline_panels(res)
    assert why == "" and list(panels) == ["ps", "paper", "geryon"]
    rows = panels["geryon"]["rows"]
    assert [r["param"] for r in rows] == [p.name for p in three_layers().params]
    assert [r["class"] for r in rows] == [0, 0, 0, 1]  # urgency > 0.5: class 0
    # Priority has the urgent class in sooner than fair sharing does, so the conv layers start sooner.
    fair = panels["ps"]["rows"]
    assert max(r["arrival_s"] for r in rows[:3]) < max(r["arrival_s"] for r in fair[:3])
    for f, g in zip(fair[:3], rows[:3], strict=True):
        assert g["forward_start_s"] <= f["forward_start_s"], g["param"]
    a = tmp_path / "a"
    write_charts(res, a)
    # Another threshold moves conv2 to the bulk class and changes its arrival: another picture.
    other = with_timeline(result(STEPS), [0.7])
    assert [r["class"] for r in timeline_panels(other)[1]["geryon"]["rows"]] == [0, 0, 1, 1]
    write_charts(other, tmp_path / "b")
    write_charts(res, tmp_path / "again")
    image = read_png(a / "timeline.png")
    assert image[..., :3].std() > 0.05
    assert not np.array_equal(image, read_png(tmp_path / "b" / "timeline.png"))
    assert np.array_equal(image, read_png(tmp_path / "again" / "timeline.png"))


@pytest.mark.parametrize(
    ("prediction", "why"),
    [
        (None, "no prediction in this result"),
        ({"error": "PredictError: config.model: expected one of"}, "the prediction failed"),
        ({"modes": {}}, "no timeline in this result's prediction"),
        ({"modes": {}, "timeline": {"error": "ValueError: boom"}}, "simulating it failed"),
        ({"modes": {}, "timeline": {"modes": {"ps": {"iteration_s": 1.0, "rows": [{}]}}}}, "well-formed"),
    ],
)
def test_a_missing_timeline_still_writes_timeline_png_saying_why(
    tmp_path: Path, prediction: dict | None, why: str
) -> None:
    real = write_charts(with_timeline(result(STEPS), [0.5]), tmp_path)[3]
    before = real.read_bytes()
    res = {**result(STEPS), "prediction": prediction}
    assert why in timeline_panels(res)[0]
    # Over a real timeline: the old picture is replaced by one saying why, not left behind.
    path = write_charts(res, tmp_path)[3]
    assert path == real
    image = read_png(path)
    assert image[..., :3].std() > 0.01  # the message is drawn
    assert path.read_bytes() != before


def test_a_prefix_keeps_each_settings_charts_apart(tmp_path: Path) -> None:
    first = write_charts(result(STEPS), tmp_path, prefix="bench-0-")
    second = write_charts(result({**STEPS, "geryon": [0.4]}), tmp_path, prefix="bench-1-")
    assert [p.name for p in first] == [f"bench-0-{c}" for c in CHARTS]
    assert [p.name for p in second] == [f"bench-1-{c}" for c in CHARTS]
    assert all(p.is_file() for p in first + second)
    assert not np.array_equal(read_png(first[0]), read_png(second[0]))


def sweep() -> list[dict]:
    results = []
    for workers, ps in ((2, 2), (2, 4)):
        r = result({"ps": [0.8], "geryon": [0.6 if ps == 2 else 0.7], "endhost": [0.65]}, ps=ps)
        r["config"]["workers"] = workers
        results.append(r)
    return results


def test_a_sweep_chart_labels_what_changed(tmp_path: Path) -> None:
    results = sweep()
    assert sweep_labels([r["config"] for r in results]) == ["2 PS", "4 PS"]
    configs = [
        {**results[0]["config"], "rate_bits": rate, "slice_bytes": s}
        for rate, s in ((1e8, None), (2e8, 262144))
    ]
    assert sweep_labels(configs) == ["100 Mbit/s, no slicing", "200 Mbit/s, 256 KiB slices"]
    assert sweep_labels([results[0]["config"]]) == ["#0"]
    path = write_sweep_chart(results, tmp_path / "sub" / "bench.png")
    assert path == tmp_path / "sub" / "bench.png"
    image = read_png(path, "sweep")
    assert image[..., :3].std() > 0.05
    results[1]["runs"][1]["images_per_s"] = 10.0  # geryon at 4 PS much slower: another picture
    results[1]["runs"][1]["median_step_s"] = 6.4
    assert not np.array_equal(image, read_png(write_sweep_chart(results, tmp_path / "b.png"), "sweep"))
    read_png(write_sweep_chart([], tmp_path / "empty.png"), "sweep")


# --- python -m geryon.demo.chart -------------------------------------------------------------------------
def test_redraw_a_saved_demo_result_beside_it_or_into_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "demo.json"
    saved.write_text(json.dumps(with_timeline(result(STEPS), [0.5])))
    assert main([str(saved)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / c) for c in CHARTS]
    for c in CHARTS:
        read_png(tmp_path / c)
    # Another name gets its own prefix; --out puts them elsewhere (created).
    other = tmp_path / "bench-3.json"
    other.write_text(saved.read_text())
    assert main([str(other), "--out", str(tmp_path / "elsewhere")]) == 0
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == sorted(
        f"bench-3-{c}" for c in CHARTS
    )
    # The redrawn timeline is the one drawn when the result was written.
    write_charts(json.loads(saved.read_text()), tmp_path / "direct")
    assert np.array_equal(read_png(tmp_path / "timeline.png"), read_png(tmp_path / "direct" / "timeline.png"))


def test_redraw_a_bench_list_with_the_sweep_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = sweep()
    results[0]["path"] = "/somewhere/bench-0.json"  # as run_bench leaves it
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps(results))
    assert main([str(saved)]) == 0
    names = [Path(p).name for p in capsys.readouterr().out.split()]
    assert names == [f"bench-0-{c}" for c in CHARTS] + [f"bench-1-{c}" for c in CHARTS] + ["bench.png"]
    read_png(tmp_path / "bench.png", "sweep")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ('{"format": "geryon.profile"}', "format: expected 'geryon.demo'"),
        ('{"format": "geryon.demo", "runs": 3}', "runs: expected a list"),
        ("[]", "an empty list"),
        ('[{"format": "geryon.demo", "runs": []}, 5]', "[1]: expected a geryon demo result"),
        ('"text"', "expected a geryon demo result (an object) or a list of them"),
    ],
)
def test_redraw_refuses_what_is_not_a_result_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m geryon.demo.chart: error: {path}: ") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["r.json"])


def test_redraw_runs_as_a_module(tmp_path: Path) -> None:
    saved = tmp_path / "demo.json"
    saved.write_text(json.dumps(result(STEPS)))
    ok = subprocess.run(
        [sys.executable, "-m", "geryon.demo.chart", str(saved), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [str(tmp_path / "out" / c) for c in CHARTS]
    bad = subprocess.run(
        [sys.executable, "-m", "geryon.demo.chart", str(tmp_path / "missing.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "missing.json: no such file" in bad.stderr


# --- the runner's report step -------------------------------------------------------------------------
def cache_profile(out: Path, res: dict) -> None:
    """The profile cache finish() reads, holding the three-layer profile for res's setting (no TF)."""
    from geryon.demo.predict import CACHE_FORMAT, profile_key

    config = {**res["config"], "input_shape": tuple(res["config"]["input_shape"]), "threads": 1}
    cache = {
        "format": CACHE_FORMAT,
        "version": 1,
        "profiles": {profile_key(config): three_layers().to_dict()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile-{res['config']['model']}-b{res['config']['batch_size']}.json").write_text(
        json.dumps(cache)
    )


def test_the_report_step_writes_charts_timeline_and_trace_beside_the_json(tmp_path: Path) -> None:
    from geryon.demo.runner import finish
    from geryon.progress import Progress

    quiet = Progress("test", enabled=False)
    res = result(STEPS, model="tiny", input_shape=(16, 16, 3), batch=8, rate_bits=20e6)
    res["config"]["threads"] = 1
    cache_profile(tmp_path, res)
    done = finish(json.loads(json.dumps(res)), tmp_path, "demo", quiet)
    assert done["prediction"]["profile"]["cached"] is True
    assert done["charts"] == [str(tmp_path / c) for c in CHARTS]
    trace = tmp_path / "trace-geryon.json"
    assert done["prediction"]["timeline"]["trace"] == str(trace)
    assert {e["cat"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"} >= {"pull"}
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert (
        timeline_panels(saved)[1]["geryon"]["rows"]
        == done["prediction"]["timeline"]["modes"]["geryon"]["rows"]
    )
    read_png(tmp_path / "timeline.png")

    # A bench setting: its own prefixed charts and trace; the demo's stay as they were.
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix == ".png"}
    bench = finish(json.loads(json.dumps(res)), tmp_path, "bench-0", quiet)
    assert bench["charts"] == [str(tmp_path / f"bench-0-{c}") for c in CHARTS]
    assert (tmp_path / "bench-0-trace-geryon.json").is_file() and (tmp_path / "bench-0.json").is_file()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before

    # A prediction that fails: no trace left from the run before, and timeline.png says why.
    res["config"]["rate_bits"] = 0
    failed = finish(json.loads(json.dumps(res)), tmp_path, "demo", quiet)
    assert "config.rate_bits" in failed["prediction"]["error"]
    assert not trace.exists()
    assert "the prediction failed" in timeline_panels(failed)[0]
    assert (tmp_path / "timeline.png").read_bytes() != before["timeline.png"]
