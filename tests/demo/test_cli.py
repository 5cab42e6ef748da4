"""`geryon demo` / `geryon bench` arguments: bad knobs exit 2 naming the flag, before any testbed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geryon.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--steps", "0"], "--steps 0: expected an integer in 1..100000"),
        (["demo", "--steps", "many"], "--steps 'many': expected an integer"),
        (["demo", "--model", "lenet"], "--model 'lenet': expected one of vggmini, tiny"),
        (["demo", "--modes", "vanilla,turbo"], "--modes: unknown mode 'turbo'"),
        (["demo", "--modes", "ps,ps"], "a mode is named twice"),
        (
            ["demo", "--modes", "geryon,hybrid"],
            "--modes: unknown mode 'hybrid'; allowed: vanilla, ps, geryon, paper",
        ),
        (["demo", "--background", "fast"], "--background: 'fast' is not a rate"),
        (
            ["demo", "--background", "500mbit"],
            "--background 500000000: expected an integer in 1000000..200000000",
        ),
        (["bench", "--background", "100kbit"], "--background 100000: expected an integer in 1000000.."),
        (["demo", "--chunk-size", "1KiB"], "--chunk-size 1024: expected an integer in 4096..1073741824"),
        (["bench", "--chunk-size", "2GiB"], "--chunk-size 2147483648: expected an integer in 4096.."),
        (["demo", "--chunk-size", "big"], "--chunk-size: invalid size 'big'"),
        (["demo", "--second-job", "lenet:8"], "--second-job 'lenet:8': model must be one of"),
        (["bench", "--second-job", "tiny:0"], "--second-job 'tiny:0': BATCH must be in 1..4096"),
        (["demo", "--background=-5mbit"], "--background: '-5mbit' is not a rate"),
        (["bench", "--workers", "1,x"], "--workers 'x': expected an integer"),
        (["bench", "--workers", "1,,2"], "--workers '1,,2': expected a comma-separated list"),
        (["bench", "--workers", "0"], "--workers 0: expected an integer in 1..16"),
        (["bench", "--ps", "2,99"], "--ps 99: expected an integer in 1..16"),
        (["bench", "--rate", "10MBps"], "--rate: '10MBps' looks like bytes per second"),
        (["bench", "--rate", "100kbit"], "--rate 100000: expected an integer in 1000000.."),
        (["bench", "--buffer", "lots"], "--buffer: invalid size 'lots'"),
        (["bench", "--slice-size", "1MiB,0"], "--slice-size: invalid size '0'"),
        (["bench", "--classes", "9"], "--classes 9: expected an integer in 2..6"),
        (["bench", "--search", "random"], "--search 'random': expected one of sweep, guided, bayes"),
        (["bench", "--search", "fixed:0.7,0.2", "--classes", "3"], "strictly increasing"),
        (["bench", "--search", "fixed:0.5", "--classes", "3"], "3 classes need 2 threshold(s)"),
        (["bench", "--input-shape", "32,32"], "--input-shape '32,32': expected H,W,C"),
        (["bench", "--model", "resnet50", "--input-shape", "16,16,3"], "resnet50 needs at least 32x32"),
        (["bench", "--repeats", "0"], "--repeats 0: expected an integer in 1..100"),
        (["demo", "--profile-source", "both"], "--profile-source 'both': expected one of alone, cluster"),
        (["bench", "--profile-source", ""], "--profile-source '': expected one of alone, cluster"),
        (["demo", "--ps-costs", "/nonexistent/ps.json"], "--ps-costs: cannot read calibration"),
        (["demo", "--api", "keras2"], "--api 'keras2': expected one of custom, fit"),
        (
            ["bench", "--api", "fit", "--steps-per-execution", "0"],
            "--steps-per-execution 0: expected an integer",
        ),
        (
            ["demo", "--api", "fit", "--steps-per-execution", "x"],
            "--steps-per-execution 'x': expected an integer",
        ),
        (
            ["demo", "--steps-per-execution", "4"],
            "--steps-per-execution 4: only --api fit runs more than one",
        ),
        (
            ["bench", "--api", "fit", "--model", "vgg16"],
            "--model 'vgg16': --api fit trains one of vggmini, tiny",
        ),
        (
            ["demo", "--incast", "/nonexistent/incast.json"],
            "--incast: /nonexistent/incast.json: cannot read it",
        ),
    ],
)
def test_bad_knobs_exit_2_naming_the_flag(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checked before anything is built: the bad value is reported in well under a second.
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize("text", ["none", "0", "NONE"])
def test_background_none_turns_the_default_background_off(text: str) -> None:
    import argparse

    from geryon.demo.cli import add_bench, add_demo, bench_config, demo_config

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_demo(sub)
    add_bench(sub)
    assert demo_config(parser.parse_args(["demo"]))["background_bits"] == 100_000_000
    assert demo_config(parser.parse_args(["demo", "--background", text]))["background_bits"] == 0
    assert bench_config(parser.parse_args(["bench", "--background", text]))["background_bits"] == 0


def test_an_out_dir_that_cannot_be_made_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["demo", "--quick", "--out", str(blocker / "sub")]) == 2
    assert "--out" in capsys.readouterr().err


def test_bench_lists_expand_to_their_product_and_keep_scalars() -> None:
    import argparse

    from geryon.demo.cli import add_bench, bench_config
    from geryon.demo.config import bench_configs

    parser = argparse.ArgumentParser()
    add_bench(parser.add_subparsers())
    args = parser.parse_args(
        ["bench", "--workers", "1,2,4", "--slice-size", "1MiB,256KiB", "--rate", "50mbit", "--steps", "7"]
    )
    configs = bench_configs(bench_config(args))
    assert [(c["workers"], c["slice_bytes"]) for c in configs] == [
        (w, s) for w in (1, 2, 4) for s in (1 << 20, 256 << 10)
    ]
    assert {c["rate_bits"] for c in configs} == {50_000_000}
    assert {c["steps"] for c in configs} == {7}
    assert all(c["model"] == "vggmini" and c["input_shape"] == [32, 32, 3] for c in configs)


def test_half_a_per_class_incast_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # bench_incast's per-class patterns come in pairs: one without the other is a broken file.
    eff = {"2 senders": {"mean": 1.0}, "2x2": {"mean": 0.85}, "2 senders per class": {"mean": 0.95}}
    path = tmp_path / "incast.json"
    path.write_text(json.dumps({"bench": "incast", "results": [{"switch": "priority", "efficiency": eff}]}))
    assert main(["demo", "--incast", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--incast: " in err and "results[0].efficiency['2x2 per class'].mean" in err, err
