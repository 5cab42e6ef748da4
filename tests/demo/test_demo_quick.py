"""The CI end-to-end: `geryon demo --quick` as a real subprocess on a real testbed, and a crashed demo
cleaned up by `geryon testbed down`.

Each test has its own testbed state dir (GERYON_TESTBED_STATE), so `down` never touches anyone
else's runs, and every check of "nothing left" is about this run's id only.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from demo_proc import demo_in_training

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
]
REPO = Path(__file__).resolve().parents[2]


def geryon(*argv: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "geryon", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    """The process runs and is one of ours (a PID reused by something else does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z" and b"geryon" in cmdline


def leftovers(run_id: str, state_dir: Path) -> list[str]:
    from geryon.testbed import namespaces

    files = sorted(p.name for p in state_dir.glob(f"{run_id}.*")) if state_dir.is_dir() else []
    return namespaces.listed(f"gtb-{run_id}-") + files


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("demo-quick")
    env = dict(os.environ, GERYON_TESTBED_STATE=str(tmp / "state"))
    started = time.monotonic()
    # 600 s: the hang guard; the bound on the time is a test of its own (test_nothing_is_left_behind).
    r = geryon("demo", "--quick", "--json", "--out", str(tmp / "out"), env=env, timeout=600)
    result = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    return {"rc": r.returncode, "stderr": r.stderr, "result": result, "state": tmp / "state",
            "seconds": time.monotonic() - started, "out": tmp / "out"}  # fmt: skip


def test_every_mode_completes_with_consistent_numbers(quick: dict[str, Any]) -> None:
    assert quick["rc"] == 0, quick["stderr"][-3000:]
    result = quick["result"]
    assert result["format"] == "geryon.demo" and result["version"] == 1
    cfg = result["config"]
    runs = {r["mode"]: r for r in result["runs"]}
    assert sorted(runs) == sorted(["vanilla", "ps", "geryon", "paper", "endhost", "single"])
    for mode, run in runs.items():
        assert run["error"] is None, (mode, run["error"])
        times = run["step_times"]
        assert len(times) == cfg["steps"] and all(t > 0 for t in times), mode
        # Every round this mode ran (warm-up, search, measured) with the thresholds then in force.
        assert len(run["round_thresholds"]) >= cfg["steps"] + 1
        assert run["median_step_s"] == pytest.approx(statistics.median(times))
        workers = 1 if mode == "single" else cfg["workers"]
        assert run["workers"] == workers
        assert run["images_per_s"] == pytest.approx(cfg["batch_size"] * workers / run["median_step_s"])
        assert run["losses"] and all(loss > 0 for loss in run["losses"])
    assert runs["vanilla"]["protocol"] == "grpc" and not runs["vanilla"]["partitioned"]
    assert runs["geryon"]["protocol"] == "grpc+geryon" and runs["geryon"]["partitioned"]
    # geryon, paper and endhost ran in ONE cluster, alternating round by round, the switch changing
    # between rounds (priority, priority, fifo: two changes per cycle).
    for mode in ("geryon", "paper", "endhost"):
        paired = runs[mode]["paired"]
        assert paired["rotation"] == ["geryon", "paper", "endhost"] and paired["alternation"] == "round"
        assert paired["switch_changes"] >= 2 * cfg["steps"]
        assert isinstance(runs[mode]["ordering_available"], bool)
        # With the data plane's ordering every task answered the mode's order before its rounds:
        # geryon and paper really ran different orders, round by round, in the same cluster.
        if runs[mode]["ordering_available"]:
            assert runs[mode]["order_in_force"] == [runs[mode]["order"]], runs[mode]
        # The chunk size is in force where the data plane has chunks.
        assert runs[mode]["chunk_bytes"] in (None, cfg["chunk_bytes"])
        # One settling round (unmeasured) before each measured round of a mode.
        assert len(runs[mode]["warmup_times"]) >= cfg["settle_rounds"] * cfg["steps"]
    assert runs["geryon"]["pids"] == runs["paper"]["pids"] == runs["endhost"]["pids"]
    # The search ran live (before the alternation) and paper used what it chose; endhost put every
    # parameter in one class.
    search = runs["geryon"]["search"]
    assert search["converged"] and search["live_iterations"] >= 2 and len(search["trials"]) >= 2
    assert len({tuple(t["thresholds"]) for t in search["trials"]}) >= 2
    assert runs["paper"]["thresholds"] == runs["geryon"]["thresholds"] == search["best"]
    assert runs["paper"]["thresholds_from"] == "geryon"
    assert runs["endhost"]["thresholds"] == [1.0] and runs["endhost"]["classes_used"] == 1
    assert runs["geryon"]["classes_used"] == runs["paper"]["classes_used"] == 2
    # The report pairs them round by round and says whether urgency order was applied.
    pairs = {(x["a"], x["b"]): x for x in result["summary"]["paired"]}
    assert pairs[("geryon", "endhost")]["unit"] == "round"
    assert pairs[("geryon", "endhost")]["pairs"] == cfg["steps"] and pairs[("geryon", "endhost")]["ci"]
    assert pairs[("geryon", "ps")]["unit"] == "run"
    assert (result["summary"]["ordering"] is None) == runs["geryon"]["ordering_available"]
    # Progress said what it did, and the table and files came out.
    assert "modes geryon+paper+endhost: round" in quick["stderr"] and "search trial" in quick["stderr"]
    assert Path(result["path"]).is_file() and result["summary"] and "modes" in result["summary"]
    assert result["charts"] and all(Path(p).is_file() for p in result["charts"])
    # The arrival timeline (P+S beside Geryon at its chosen threshold) and Geryon's simulated trace.
    assert str(quick["out"] / "timeline.png") in result["charts"]
    timeline = result["prediction"]["timeline"]
    assert list(timeline["modes"]) == ["ps", "paper", "geryon"]
    assert timeline["modes"]["geryon"]["thresholds"] == runs["geryon"]["thresholds"]
    assert len(timeline["modes"]["geryon"]["rows"]) == len(result["params"])
    trace = json.loads((quick["out"] / "trace-geryon.json").read_text())
    kinds = {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert kinds == {"forward", "backward", "pull", "push"}


def captured_profile(result: dict[str, Any], field: str, mode: str) -> Any:
    """The profile of a capture record (`incluster`, `incluster_single`), checked: worker 0 traced in
    `mode`'s run, real op times from TF's profiler, every layer of the tiny model, several steps."""
    from geryon.threshold.profile import Profile

    rec = result[field]
    assert rec["error"] is None and rec["mode"] == mode and rec["host"] == "worker0"
    profile = Profile.from_dict(rec["profile"])
    assert profile.source == f"incluster:{mode}:worker0" and profile.meta["steps"] >= 2
    assert profile.compute_s > 0 and all(la.forward_s > 0 and la.backward_s > 0 for la in profile.layers)
    assert profile.total_bytes == sum(p["bytes"] for p in result["params"])
    return profile


def test_the_scaling_baseline_trained_alone_without_ps_or_network(quick: dict[str, Any]) -> None:
    # The paper's single-GPU baseline (geryon.demo.local), once per repeat beside the modes.
    result = quick["result"]
    cfg = result["config"]
    assert len(result["local"]) == cfg["repeats"]
    for local in result["local"]:
        assert local["error"] is None, local
        assert len(local["step_times"]) == cfg["steps"] and all(t > 0 for t in local["step_times"])
        median = statistics.median(local["step_times"])
        assert local["images_per_s"] == pytest.approx(cfg["batch_size"] / median)
    summary = result["summary"]
    assert summary["scaling_basis"] == "local"
    single = summary["modes"]["single"]
    baseline = summary["local_images_per_s"]
    assert single["scaling_efficiency"] == pytest.approx(single["images_per_s"] / baseline)


def test_every_run_says_what_cpu_each_process_used_per_round(quick: dict[str, Any]) -> None:
    # From the chief's ready to its result (testbed.procs.cpu_per_round): what shares the 2 cores.
    for run in quick["result"]["runs"]:
        cpu = run["cpu"]
        assert cpu["rounds"] >= quick["result"]["config"]["steps"], run["mode"]
        assert {"chief", "worker0", "ps0"} <= set(cpu["seconds"]), (run["mode"], cpu)
        assert cpu["seconds"]["worker0"] > 0 and cpu["per_round"]["worker0"] > 0


def test_the_prediction_used_worker_0s_profile_traced_in_the_ps_run(quick: dict[str, Any]) -> None:
    result = quick["result"]
    profile = captured_profile(result, "incluster", "ps")
    used = result["prediction"]["profile"]
    assert (used["used"], used["from"], used["source"]) == ("cluster", "this run's ps mode", profile.source)
    assert used["compute_s"] == pytest.approx(profile.compute_s)
    # Cached for the next run of this cluster shape, beside the demo's JSON.
    cache = json.loads((quick["out"] / "profile-tiny-b32.json").read_text())
    assert any(k.startswith("cluster|tiny|16x16x3|batch32|") for k in cache["profiles"])
    # Progress (and the table) say which profile and which PS costs the prediction used.
    assert "profile: cluster (incluster:ps:worker0); PS costs: " in quick["stderr"]
    assert result["prediction"]["ps_costs"]["note"].startswith("PS costs: ")
    assert result["prediction"]["incast"]["note"].startswith("incast: ")
    assert "tracing worker 0" in quick["stderr"] and "in-cluster profile: C = " in quick["stderr"]
    # Traced over unmeasured rounds after the measured steps (the profiler slows the worker it traces).
    ps_run = next(r for r in result["runs"] if r["mode"] == "ps")
    assert ps_run["trace_rounds"] >= profile.meta["steps"] // 2 and len(ps_run["step_times"]) == 10


def test_the_single_mode_was_traced_in_its_own_cluster_and_predicted_from_that(quick: dict[str, Any]) -> None:
    result = quick["result"]
    profile = captured_profile(result, "incluster_single", "single")
    used = result["prediction"]["modes"]["single"]
    assert (used["profile"]["used"], used["profile"]["from"]) == ("cluster", "this run's single mode")
    assert used["compute_s"] == pytest.approx(profile.compute_s)
    single_run = next(r for r in result["runs"] if r["mode"] == "single")
    assert single_run["trace_rounds"] >= 1 and len(single_run["step_times"]) == 10
    assert "single's profile: cluster (incluster:single:worker0), this run's single mode" in quick["stderr"]


def test_the_paired_modes_were_traced_in_their_own_cluster_and_predicted_from_that(
    quick: dict[str, Any],
) -> None:
    # geryon, paper and endhost share one grpc+geryon cluster; its worker 0 was traced over unmeasured
    # rounds of the rotation after the measured ones, and their predictions use that profile.
    result = quick["result"]
    traced = "geryon+paper+endhost"
    profile = captured_profile(result, "incluster_paired", traced)
    runs = {r["mode"]: r for r in result["runs"]}
    for mode in ("geryon", "paper", "endhost"):
        used = result["prediction"]["modes"][mode]
        assert (used["profile"]["used"], used["profile"]["from"]) == ("cluster", f"this run's {traced} modes")
        assert used["compute_s"] == pytest.approx(profile.compute_s)
        assert runs[mode]["trace_rounds"] >= 1 and len(runs[mode]["step_times"]) == result["config"]["steps"]
    said = f"paired's profile: cluster (incluster:{traced}:worker0), this run's {traced} modes"
    assert said in quick["stderr"]
    # The grpc modes keep the ps mode's profile.
    assert "profile" not in result["prediction"]["modes"]["ps"]


def class_of(urgency: float, thresholds: list[float]) -> int:
    return sum(1 for t in thresholds if t >= urgency)  # the tagger's rule: class 0 most urgent


def test_the_geryon_run_sent_the_conv_parameters_on_the_high_class(quick: dict[str, Any]) -> None:
    result = quick["result"]
    runs = {r["mode"]: r for r in result["runs"]}
    params = result["params"]
    conv = [p for p in params if p["kind"] == "conv"]
    dense = [p for p in params if p["kind"] == "dense"]
    assert conv and dense and sum(p["bytes"] for p in dense) > sum(p["bytes"] for p in conv)
    geryon_run = runs["geryon"]
    assert geryon_run["switch"] == "priority"
    counters = geryon_run["switch_counters"]
    to_workers = {c: sum(counters[w][c]["bytes"] for w in ("worker0", "worker1")) for c in ("0", "1")}
    # Every round each worker pulls every parameter once, on the class its thresholds gave it then:
    # the switch's class 0 queue toward the workers carried at least those bytes (plus headers).
    expected = {0: 0, 1: 0}
    conv_pulls = 0
    for thresholds in geryon_run["round_thresholds"]:
        for p in params:
            expected[class_of(p["urgency"], thresholds)] += p["bytes"] * geryon_run["workers"]
        if all(class_of(p["urgency"], thresholds) == 0 for p in conv):
            conv_pulls += geryon_run["workers"]
    assert conv_pulls > 0, "the search never kept the conv layers urgent"
    assert to_workers["0"] >= expected[0] >= sum(p["bytes"] for p in conv) * conv_pulls
    assert to_workers["1"] >= expected[1]
    # The dense layers are the bulk: class 1 carried more than class 0.
    final = geryon_run["thresholds"]
    low = [p for p in params if class_of(p["urgency"], final) == 1]
    assert sum(p["bytes"] for p in low if p["kind"] == "dense") > 0.5 * sum(p["bytes"] for p in low)
    # Where the rounds' thresholds kept the bulk low, the low queue carried more. (A paired search may
    # spend rounds on thresholds that put most bytes in class 0; the bounds above hold either way.)
    if expected[1] > 1.5 * expected[0]:
        assert to_workers["1"] > to_workers["0"]


def test_endhost_ran_on_the_fifo_switch_and_the_baselines_unmarked(quick: dict[str, Any]) -> None:
    # Each mode's counters cover only its own rounds, although the switch changed under one cluster.
    runs = {r["mode"]: r for r in quick["result"]["runs"]}
    for mode in ("endhost", "vanilla", "ps", "single"):
        assert runs[mode]["switch"] == "fifo"
        for host, classes in runs[mode]["switch_counters"].items():
            assert list(classes) == ["0"], (mode, host)  # one FIFO queue per port
    model_bytes = sum(p["bytes"] for p in quick["result"]["params"])
    rounds = len(runs["endhost"]["round_thresholds"])
    for worker in ("worker0", "worker1"):  # both workers took part in every round
        assert runs["endhost"]["switch_counters"][worker]["0"]["bytes"] >= 0.5 * rounds * model_bytes


def test_nothing_is_left_behind(quick: dict[str, Any]) -> None:
    result = quick["result"]
    run_id = result["testbed"]["run_id"]
    assert leftovers(run_id, quick["state"]) == []
    pids = {pid for run in result["runs"] for pid in run["pids"].values()}
    # 2 PS + 2 workers + chief per cluster (paired: one); single: one worker; ps, single and the
    # paired cluster: the capture process.
    assert len(pids) == 4 * 5 - 1 + 3
    for mode in ("ps", "single", "geryon"):
        assert "capture" in {h for run in result["runs"] if run["mode"] == mode for h in run["pids"]}
    assert [pid for pid in pids if alive(pid)] == []
    # A bound against a quick run that grew, not a timing: it took 187 s beside a make demo in CI.
    assert quick["seconds"] < 300


def test_a_crashed_demo_is_cleaned_by_the_next_down(tmp_path: Path) -> None:
    env = dict(os.environ, GERYON_TESTBED_STATE=str(tmp_path / "state"))
    with demo_in_training("geryon", tmp_path, env) as (proc, run_id):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    record = json.loads((tmp_path / "state" / f"{run_id}.json").read_text())
    pids = [int(p["pid"]) for p in record["procs"]]
    # 2 PS, 2 workers, the chief and the capture process (the paired cluster's in-cluster trace)
    assert len(pids) == 6 and any(alive(pid) for pid in pids)  # the crash left them running
    assert leftovers(run_id, tmp_path / "state")
    r = geryon("testbed", "down", "--run-id", run_id, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert leftovers(run_id, tmp_path / "state") == []
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []
