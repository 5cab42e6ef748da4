"""`geryon simulate` as a user runs it: a real subprocess, exit codes, messages, JSON and traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from geryon_cli import geryon

from geryon.threshold.profile import synthetic


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chain where the big last layer (an FC layer) would block the first one under fifo."""
    path = tmp_path_factory.mktemp("profile") / "chain.json"
    synthetic(
        [400_000, 800_000, 1_200_000, 8_000_000], [0.004, 0.004, 0.004, 0.002], [0.008, 0.008, 0.008, 0.004]
    ).save(path)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bandwidth=-5gbit"], "--bandwidth: '-5gbit' is not a rate"),
        (["--bandwidth", "0"], "--bandwidth: '0' must be a rate above 0"),
        (["--mode", "warp"], "--mode: unknown mode 'warp'; allowed: fifo, end-host, network, hybrid, ideal"),
        (["--chunk-size", "1KiB"], "--chunk-size: expected an integer number of bytes in [4096, 1073741824]"),
        (["--chunk-size", "lots"], "--chunk-size:"),
        (["--endhost-gap", "-1"], "--endhost-gap: expected seconds >= 0"),
        (["--tf-inflight", "0.5"], "--tf-inflight: expected a number >= 1 or 'all', got '0.5'"),
        (["--background", "fast"], "--background:"),
        (["--background", "1gbit:racks"], "--background: background.hosts: unknown 'racks'"),
        (["--background", "1gbit:ps:sideways"], "--background: background.direction: unknown 'sideways'"),
        (
            ["--no-partition", "--slice-size", "1MiB"],
            "--slice-size: --no-partition places every variable whole",
        ),
        (["--threshold", "1.5"], "--threshold[0]: 1.5 is not a number in [0, 1]"),
        (["--cohost-fast"], "--cohost-fast: only with --colocate"),
        (["--threshold", "0.6", "0.2"], "--threshold must be strictly increasing"),
        (["--threshold", "0.5", "--classes", "3"], "--threshold: 3 classes need 2 thresholds, got 1"),
        (["--threshold", "soon"], "--threshold: 'soon' is not 'auto' or a list of numbers"),
        (["--classes", "9"], "--classes: 9 classes are not allowed; use 2 to 8"),
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--slice-size", "huge"], "--slice-size:"),
        (["--colocate", "--ps", "3", "--workers", "2"], "--colocate: PS i shares host i with worker i"),
        (["--search-chunk"], "--search-chunk: searches with the thresholds; give --threshold auto"),
        (["--chunk-candidates", "64KiB"], "--chunk-candidates: only with --search-chunk"),
        (
            ["--threshold", "auto", "--search-chunk", "--chunk-candidates", "64KiB,1KiB"],
            "--chunk-candidates[1]: expected a chunk size in bytes",
        ),
        (
            ["--threshold", "auto", "--search-chunk", "--chunk-candidates", "64KiB,lots"],
            "--chunk-candidates:",
        ),
        (
            ["--threshold", "auto", "--search-chunk", "--chunk-candidates", "64KiB,64KiB"],
            "--chunk-candidates: sizes must be distinct",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(profile_file: Path, args: list[str], message: str) -> None:
    r = geryon("simulate", "--profile", str(profile_file), *args)
    assert r.returncode == 2, r.stderr
    assert f"geryon simulate: error: {message}" in r.stderr
    assert r.stdout == ""


def test_unknown_model_exits_2() -> None:
    r = geryon("simulate", "--model", "vgg99")
    assert r.returncode == 2
    assert "geryon simulate: error: --model:" in r.stderr and "vgg99" in r.stderr


def test_profile_with_a_missing_field_exits_2_naming_it(tmp_path: Path, profile_file: Path) -> None:
    data = json.loads(profile_file.read_text())
    del data["layers"][1]["backward_s"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    r = geryon("simulate", "--profile", str(broken))
    assert r.returncode == 2
    assert "--profile:" in r.stderr and "layers[1]: missing field 'backward_s'" in r.stderr


def test_missing_and_non_json_profiles_exit_2(tmp_path: Path) -> None:
    r = geryon("simulate", "--profile", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "cannot read profile" in r.stderr
    (tmp_path / "junk.json").write_text("{not json")
    r = geryon("simulate", "--profile", str(tmp_path / "junk.json"))
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_table_lists_every_mode_and_json_orders_them(profile_file: Path) -> None:
    common = [
        "simulate",
        "--profile",
        str(profile_file),
        "--workers",
        "2",
        "--ps",
        "2",
        "--bandwidth",
        "2gbit",
    ]
    r = geryon(*common)
    assert r.returncode == 0, r.stderr
    for mode in ("fifo", "end-host", "network", "hybrid", "ideal"):
        assert f"\n{mode} " in r.stdout
    r = geryon(*common, "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    report = json.loads(r.stdout)
    t = {m: report["modes"][m]["iteration_s"] for m in report["modes"]}
    assert t["ideal"] <= t["network"] * (1 + 1e-9) <= t["fifo"] * (1 + 1e-9)
    assert t["ideal"] <= t["hybrid"] * (1 + 1e-9) <= t["network"] * (1 + 1e-9)
    assert report["thresholds"] == [0.5]
    # The defaults of the cost knobs are reported: TF's measured window, ByteScheduler's gap, a free PS.
    assert report["knobs"]["inflight"] == 3.5 and report["knobs"]["endhost_gap_s"] == 300e-6
    assert "ps_costs" not in report["knobs"]


def test_trace_is_chrome_trace_json(tmp_path: Path, profile_file: Path) -> None:
    trace = tmp_path / "trace.json"
    r = geryon(
        "simulate", "--profile", str(profile_file), "--workers", "2", "--ps", "2", "--mode", "network",
        "--trace", str(trace), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete and all(e["dur"] >= 0 and "ts" in e and "pid" in e for e in complete)


def test_threshold_auto_reports_the_search(profile_file: Path) -> None:
    r = geryon(
        "simulate", "--profile", str(profile_file), "--workers", "2", "--ps", "2", "--mode", "network",
        "--threshold", "auto", "--json", "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["search"]["iterations"] >= 1
    assert 0 <= report["thresholds"][0] <= 1


@pytest.mark.parametrize("strategy", ["bayes", "bytescheduler"])
def test_threshold_auto_with_search_chunk_picks_a_candidate_chunk(profile_file: Path, strategy: str) -> None:
    r = geryon(
        "simulate", "--profile", str(profile_file), "--workers", "2", "--ps", "2", "--mode", "hybrid",
        "--threshold", "auto", "--search", strategy, "--search-chunk",
        "--chunk-candidates", "16KiB,256KiB,1MiB", "--json", "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    s = report["search"]
    assert s["chunk_bytes"] in (16 << 10, 256 << 10, 1 << 20)
    assert report["knobs"]["chunk_bytes"] == s["chunk_bytes"]
    assert all(t["chunk_bytes"] in s["chunk_candidates"] for t in s["trials"])


@pytest.mark.slow
def test_builtin_model_with_flops_profile_and_saved_profile(tmp_path: Path) -> None:
    saved = tmp_path / "alexnet.json"
    r = geryon(
        "simulate", "--model", "alexnet", "--batch-size", "128", "--device", "v100", "--workers", "4",
        "--ps", "4", "--bandwidth", "10gbit", "--mode", "fifo", "network", "--save-profile", str(saved),
        "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert set(report["modes"]) == {"fifo", "network"}
    assert report["batch_size"] == 128
    assert json.loads(saved.read_text())["format"] == "geryon.profile"


def test_forward_dag_needs_a_model_or_a_profile_saved_with_it(tmp_path: Path, profile_file: Path) -> None:
    r = geryon("simulate", "--profile", str(profile_file), "--forward", "dag")
    assert r.returncode == 2
    assert "--forward dag: " in r.stderr and "is a chain profile" in r.stderr and "--save-profile" in r.stderr
    trace = tmp_path / "trace"
    trace.mkdir()
    r = geryon("simulate", "--profile", str(trace), "--model", "tiny", "--batch-size", "8", "--forward=dag")
    assert r.returncode == 2 and "--forward dag: not with a profiler trace" in r.stderr
    r = geryon("simulate", "--profile", str(profile_file), "--forward", "tree")
    assert r.returncode == 2 and "--forward: invalid choice: 'tree'" in r.stderr


@pytest.mark.slow
def test_forward_dag_runs_a_branching_models_dataflow_and_saves_it(tmp_path: Path) -> None:
    saved = tmp_path / "inception.json"
    args = ("simulate", "--workers", "2", "--ps", "1", "--bandwidth", "10gbit", "--mode", "hybrid", "--json")
    dag = geryon(*args, "--model", "inceptionv3", "--forward", "dag", "--save-profile", str(saved))
    assert dag.returncode == 0, dag.stderr
    layers = json.loads(saved.read_text())["layers"]
    assert all("after" in la for la in layers)
    # A branching model: some layer waits on two or more others (a concatenation of towers).
    assert any(len(la["after"]) >= 2 for la in layers)
    report = json.loads(dag.stdout)
    assert report["forward"] == "dag"
    # The saved profile is the dataflow again, with or without the flag, and simulates the same.
    for extra in ((), ("--forward", "dag")):
        again = geryon(*args, "--profile", str(saved), *extra)
        assert again.returncode == 0, again.stderr
        same = json.loads(again.stdout)["modes"]["hybrid"]  # all but the run's own wall time:
        assert {**same, "wall_s": 0} == {**report["modes"]["hybrid"], "wall_s": 0}
    chain = json.loads(geryon(*args, "--model", "inceptionv3").stdout)
    assert chain["forward"] == "chain"


def test_a_reader_that_goes_away_is_not_a_traceback(profile_file: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        f"{sys.executable} -m geryon simulate --profile {profile_file} --workers 2 --ps 2 --quiet | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.startswith("synthetic: 2 workers")
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr


def test_colocated_ps_share_the_workers_links(profile_file: Path) -> None:
    common = ["simulate", "--profile", str(profile_file), "--workers", "2", "--ps", "2", "--json", "--quiet"]
    apart = json.loads(geryon(*common, "--mode", "fifo").stdout)
    together = geryon(*common, "--mode", "fifo", "--colocate")
    assert together.returncode == 0, together.stderr
    report = json.loads(together.stdout)
    assert report["colocate"] is True and report["modes"]["fifo"]["colocate"] is True
    # Two hosts instead of four: the ports are named per host.
    assert set(report["modes"]["fifo"]["link_bytes"]) != set(apart["modes"]["fifo"]["link_bytes"])
    assert any(k.startswith("host") for k in report["modes"]["fifo"]["link_bytes"])


def test_ps_costs_file_and_background_reach_the_simulator(tmp_path: Path, profile_file: Path) -> None:
    common = ["simulate", "--profile", str(profile_file), "--workers", "2", "--ps", "2", "--json", "--quiet"]
    base = json.loads(geryon(*common, "--mode", "hybrid").stdout)["modes"]["hybrid"]
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"update_s_per_byte": 1e-8, "per_message_s": 1e-3}))
    r = geryon(*common, "--mode", "hybrid", "--ps-costs", str(costs), "--background", "1gbit:all:both")
    assert r.returncode == 0, r.stderr
    sim = json.loads(r.stdout)["modes"]["hybrid"]
    assert sim["ps_costs"]["update_s_per_byte"] == 1e-8 and sim["ps_costs"]["per_message_s"] == 1e-3
    assert sim["background"] == [{"rate_bps": 1e9, "hosts": "all", "direction": "both", "queue": "below"}]
    assert sim["iteration_s"] > base["iteration_s"]


def test_a_ps_costs_file_with_a_bad_key_or_value_exits_2_naming_it(
    tmp_path: Path, profile_file: Path
) -> None:
    for data, message in (
        ({"per_mesage_s": 1e-3}, "unknown key 'per_mesage_s'; allowed: aggregate_s_per_byte"),
        ({"per_slice_s": -1}, "per_slice_s: expected a finite number of seconds >= 0, got -1"),
        ([1, 2], "expected a JSON object"),
    ):
        path = tmp_path / "costs.json"
        path.write_text(json.dumps(data))
        r = geryon("simulate", "--profile", str(profile_file), "--ps-costs", str(path), "--quiet")
        assert r.returncode == 2, r.stderr
        assert f"geryon simulate: error: --ps-costs: {path}: {message}" in r.stderr
        assert r.stdout == ""
