"""`geryon plan aggregation` as a user runs it: a real subprocess, exit codes, messages, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from geryon_cli import geryon

ROOT = Path(__file__).resolve().parents[2]


def test_builtin_text_report() -> None:
    r = geryon("plan", "aggregation", "--topology", "p3.16xlarge")
    assert r.returncode == 0, r.stderr
    assert "C(G) = 0.291666667 (7/24)" in r.stdout
    assert "Lemma 2.1 (eq. 3): max_e c_e = 1 >= C(T_MWST) = 0.5 (1/2)" in r.stdout
    assert "ring (Sec. 2, Hamiltonian cycle of links)" in r.stdout


def test_json_report() -> None:
    r = geryon("plan", "aggregation", "--topology", "p2.16xlarge", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["c_g"] == pytest.approx(15 / 8)
    assert data["utilisation_ratio"] == "15:14:8"


def test_a_users_file(tmp_path: Path) -> None:
    path = tmp_path / "ring4.json"
    edges = [{"ends": [f"g{i}", f"g{(i + 1) % 4}"], "capacity": 25} for i in range(4)]
    path.write_text(json.dumps({"nodes": ["g0", "g1", "g2", "g3"], "unit": "GB/s", "edges": edges}))
    r = geryon("plan", "aggregation", "--topology", str(path), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["c_g"] == pytest.approx(3 / 4 / 25)  # (n-1)/sum 1/c_e, a ring is uniform


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"edges": []}, "nodes: missing"),
        (
            {"nodes": ["a", "b"], "edges": [{"ends": ["a", "x"], "capacity": 1}]},
            "edges[0].ends[1]: unknown node 'x'",
        ),
        (
            {"nodes": ["a", "b"], "edges": [{"ends": ["a", "b"], "capacity": -1}]},
            "edges[0].capacity: expected a finite number > 0, got -1",
        ),
        (
            {"nodes": ["a", "b", "c"], "edges": [{"ends": ["a", "b"], "capacity": 1}]},
            "edges: the graph is not connected: c cannot",
        ),
        (
            {
                "nodes": ["a", "b"],
                "edges": [{"ends": ["a", "b"], "capacity": 1}, {"ends": ["b", "a"], "capacity": 1}],
            },
            "edges[1].ends: duplicate link b-a (also edges[0])",
        ),
        (
            {"nodes": ["a", "b"], "edges": [{"ends": ["a", "b"], "capacity": 1}], "gpus": 2},
            "unknown key 'gpus'",
        ),
    ],
)
def test_bad_files_exit_2_naming_the_field(tmp_path: Path, data: dict, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    r = geryon("plan", "aggregation", "--topology", str(path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"geryon plan: error: --topology: {path}: ")
    assert message in r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr


def test_unknown_topology_and_missing_subcommand_exit_2() -> None:
    r = geryon("plan", "aggregation", "--topology", "p9.huge")
    assert r.returncode == 2 and "is neither a built-in topology (p3.16xlarge, dgx-1" in r.stderr
    assert geryon("plan").returncode == 2


def _without_scipy(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    blocker = tmp_path / "noscipy"
    (blocker / "scipy").mkdir(parents=True, exist_ok=True)
    (blocker / "scipy" / "__init__.py").write_text("raise ImportError('no scipy here (test)')\n")
    env = {**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_without_scipy_a_clear_error_and_exit_2(tmp_path: Path) -> None:
    r = _without_scipy(tmp_path, "-m", "geryon", "plan", "aggregation", "--topology", "p3.8xlarge")
    assert r.returncode == 2, r.stderr
    assert "geryon plan needs SciPy: pip install 'geryon[plan]'" in r.stderr
    assert "Traceback" not in r.stderr
    r = _without_scipy(tmp_path, "-c", "import geryon.plan.aggregation, geryon.plan.cli, geryon.cli")
    assert r.returncode == 0, r.stderr


# --- geryon plan training ------------------------------------------------------------------------


def _profile_file(tmp_path: Path) -> Path:
    from geryon.threshold.profile import synthetic

    path = tmp_path / "profile.json"
    synthetic([4 * 20000, 4 * 400000, 4 * 2_000_000], [1e-3, 2e-3, 2e-3], [2e-3, 4e-3, 4e-3]).save(path)
    return path


def test_plan_training_recommends_settings_and_predicts_every_mode(tmp_path: Path) -> None:
    profile = str(_profile_file(tmp_path))
    args = ("plan", "training", "--profile", profile, "--workers", "4", "--ps", "2", "--bandwidth", "1gbit")
    r = geryon(*args, "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data["modes"]) == {"vanilla", "P+S", "end-host", "paper", "geryon", "ideal", "bound"}
    assert data["recommended"]["classes"] >= 2 and data["reasons"]
    assert data["workers"] == 4 and data["bandwidth_bps"] == 1e9
    text = geryon(*args, "--max-classes", "3", "--slices", "none,1MiB")
    assert text.returncode == 0, text.stderr
    assert "Recommended settings:" in text.stdout and "Why:" in text.stdout
    assert "searching 2 slice sizes x classes 2..3" in text.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-classes", "9"], "--max-classes: expected 2..8, got 9"),
        (["--slices", "4MiB,lots"], "--slices: "),
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--bandwidth", "fast"], "--bandwidth"),
        (["--tf-inflight", "0.5"], "--tf-inflight: expected a number >= 1 or 'all'"),
        (["--transport", "rdma"], "--transport: invalid choice: 'rdma'"),
        (["--verbs-ack", "1e-6"], "--verbs-ack: only with --transport tf-verbs, not tf-grpc"),
        (["--background", "1gbit:x"], "--background: background.hosts: unknown 'x'"),
        (["--background", "1gbit:workers:in:top"], "--background: background.queue: unknown 'top'"),
        (["--background", "1:2:3:4:5"], "is not RATE[:HOSTS[:DIR[:QUEUE]]]"),
        (["--forward", "dag"], "--forward dag: "),
    ],
)
def test_plan_training_bad_flags_exit_2_naming_the_flag(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    r = geryon("plan", "training", "--profile", str(_profile_file(tmp_path)), *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr


def test_plan_training_with_background_traffic_predicts_slower_baselines(tmp_path: Path) -> None:
    # The demo's testbed: half the link into every worker, in the least urgent class's queue (as the
    # testbed switch queues unmarked traffic). P+S shares the link with it; the plan says so.
    args = ("plan", "training", "--profile", str(_profile_file(tmp_path)), "--workers", "2", "--ps", "2")
    args += ("--bandwidth", "200mbit", "--json", "--quiet")
    quiet = json.loads(geryon(*args).stdout)
    r = geryon(*args, "--background", "100mbit:workers:in:lowest")
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    assert loaded["modes"]["P+S"] > quiet["modes"]["P+S"] * 1.2


def test_plan_training_with_a_barrier_predicts_the_joined_rounds(tmp_path: Path) -> None:
    # --barrier: every iteration waits for the whole last update (the demo's rounds, a coordinator that
    # joins every step), so no pull of the next iteration overlaps this one's pushes: slower, never faster.
    args = ("plan", "training", "--profile", str(_profile_file(tmp_path)), "--workers", "2", "--ps", "2")
    args += ("--bandwidth", "200mbit", "--max-classes", "2", "--slices", "none", "--json", "--quiet")
    free = json.loads(geryon(*args).stdout)
    r = geryon(*args, "--barrier")
    assert r.returncode == 0, r.stderr
    joined = json.loads(r.stdout)
    for mode in ("vanilla", "P+S", "geryon"):
        assert joined["modes"][mode] >= free["modes"][mode] * 0.999, mode
    assert joined["modes"]["P+S"] > free["modes"]["P+S"] * 1.05  # 0.780 s against 0.713 s
    shown = geryon("simulate", "--help")
    assert "--barrier" in shown.stdout and "synchronous rounds" in shown.stdout


def test_plan_training_on_the_papers_transport(tmp_path: Path) -> None:
    # The same plan with fifo and network on TF 1.x's RDMA rendezvous (the simulator's tf-verbs).
    args = ("plan", "training", "--profile", str(_profile_file(tmp_path)), "--workers", "4", "--ps", "2")
    r = geryon(*args, "--bandwidth", "1gbit", "--transport", "tf-verbs", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["modes"]) >= {"vanilla", "P+S", "paper", "geryon"}


def test_plan_training_needs_a_model_or_a_profile() -> None:
    r = geryon("plan", "training")
    assert r.returncode == 2 and "--model or --profile: one is required" in r.stderr
