"""Several jobs on one fabric (geryon.threshold.sim_jobs): one job against the single-job simulator,
hand-computed two-job cases, what each policy promises, the metric, and bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from geryon_cli import geryon

from geryon.threshold.profile import Profile, synthetic
from geryon.threshold.sim_jobs import (
    POLICIES,
    JobSpec,
    _Fabric,
    compare_policies,
    simulate_jobs,
    weighted_utilization,
)
from geryon.threshold.simknobs import TRANSPORTS
from geryon.threshold.simulator import simulate

from .test_simulator import random_profile

# One 4-byte parameter at 32 bit/s: a transfer alone on a link takes exactly 1 s.
BPS = 32.0


# The single-job simulator's mode each policy runs a lone job in (job-priority: one class, no levels).
SINGLE_MODE = {"fifo": "fifo", "geryon": "network", "combined": "network", "job-priority": "fifo"}


@pytest.mark.parametrize(("seed", "transport"), [(s, t) for s in range(6) for t in TRANSPORTS])
def test_one_job_is_the_single_job_simulator(seed: int, transport: str) -> None:
    rng = random.Random(seed)
    prof = random_profile(rng)
    w, p = rng.randint(1, 3), rng.randint(1, 3)
    hosts = list(range(w + p + 2))  # two idle hosts: they change nothing
    rng.shuffle(hosts)
    ts = (rng.choice([0.3, 0.5, 0.8]),)
    spec = JobSpec("J", prof, tuple(hosts[:w]), tuple(hosts[w : w + p]), ts)
    bps = rng.choice([1e6, 1e7, 1e8])
    results = compare_policies(
        [spec], hosts=len(hosts), bandwidth_bps=bps, iterations=3, transport=transport, seed=seed
    )
    for policy, mode in SINGLE_MODE.items():
        ref = simulate(
            prof,
            workers=w,
            num_ps=p,
            bandwidth_bps=bps,
            mode=mode,
            thresholds=ts,
            iterations=3,
            interleave=True,
            inflight=None,
            colocate=False,
            symmetric=False,
            partition=True,
            transport=transport,
            seed=seed,
        )
        job = results[policy].jobs[0]
        assert job.step_s == pytest.approx(ref.iteration_s, rel=1e-9, abs=0), policy
        assert job.alone_s == pytest.approx(ref.iteration_s, rel=1e-9, abs=0), policy
        assert job.slowdown == pytest.approx(1.0, rel=1e-9)
        assert results[policy].weighted_utilization == pytest.approx(ref.gpu_utilization, rel=1e-9)


@pytest.mark.parametrize("seed", range(2))
def test_one_job_with_big_layers_on_the_data_plane(seed: int) -> None:
    """Layers of MBs: hybrid's 256 KiB chunks preempt, tf-verbs posts many requests; still simulate's."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    prof = synthetic(
        [4 * rng.randint(10_000, 400_000) for _ in range(n)],
        [rng.uniform(1e-3, 1e-2) for _ in range(n)],
        [rng.uniform(1e-3, 2e-2) for _ in range(n)],
    )
    w, p = rng.randint(1, 4), rng.randint(1, 3)
    spec = JobSpec("J", prof, tuple(range(w)), tuple(range(w, w + p)), (0.5,))
    for transport in ("geryon", "tf-verbs"):
        got = simulate_jobs(
            [spec], hosts=w + p, bandwidth_bps=1e9, policy="geryon", iterations=3, transport=transport
        )
        ref = simulate(
            prof,
            workers=w,
            num_ps=p,
            bandwidth_bps=1e9,
            mode="network",
            iterations=3,
            symmetric=False,
            transport=transport,
        )
        assert got.jobs[0].step_s == pytest.approx(ref.iteration_s, rel=1e-9, abs=0), transport


def test_combined_with_one_job_is_geryon() -> None:
    rng = random.Random(7)
    spec = JobSpec("J", random_profile(rng, 5), (0, 1), (2,), (0.4,))
    both = compare_policies([spec], hosts=3, bandwidth_bps=1e7, policies=("geryon", "combined"))
    assert both["combined"].jobs[0].step_s == both["geryon"].jobs[0].step_s
    assert both["combined"].jobs[0].fabric_classes == both["geryon"].jobs[0].fabric_classes == (0, 1)
    assert both["combined"].jobs[0].rank == 0 and both["geryon"].jobs[0].rank is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_two_equal_jobs_on_one_ps_host_by_hand(transport: str) -> None:
    """A and B: one 4-byte layer, 1 s forward, 1 s backward; workers on hosts 0 and 1, both PSes on host 2.

    Alone: pull 1 + compute 2 + push 1 = 4 s. fifo: both pulls share host 2's NIC (2 s), both pushes its
    switch port (2 s): 6 s each. job-priority (equal intensity, A first by name): A's pull 0-1, B's 1-2;
    A pushes 3-4 while B computes, B pushes 4-5 while A pulls again (the NIC, not the port): each job
    runs as alone, one second apart, 4 s each."""
    prof = synthetic([4], [1.0], [1.0])
    jobs = [JobSpec("A", prof, (0,), (2,), ()), JobSpec("B", prof, (1,), (2,), ())]
    # One tensor per connection: every transport carries it alike (tf-verbs without its ACK delay).
    res = compare_policies(
        jobs, hosts=3, bandwidth_bps=BPS, iterations=3, transport=transport, verbs_ack_s=0.0
    )
    for policy in ("fifo", "geryon"):
        for job in res[policy].jobs:
            assert (job.step_s, job.alone_s, job.slowdown) == pytest.approx((6.0, 4.0, 1.5), abs=1e-9)
        assert res[policy].weighted_utilization == pytest.approx(1 / 3, abs=1e-12)
    for policy in ("job-priority", "combined"):
        a, b = res[policy].jobs
        assert (a.rank, a.fabric_classes, b.rank, b.fabric_classes) == (0, (0,), 1, (1,))
        assert (a.step_s, b.step_s, a.slowdown, b.slowdown) == pytest.approx((4.0, 4.0, 1.0, 1.0), abs=1e-9)
        assert res[policy].weighted_utilization == pytest.approx(0.5, abs=1e-12)
        # The window opens when B's first iteration ends (5) and closes with A's third since (16).
        assert (res[policy].window_start_s, res[policy].window_s) == pytest.approx((5.0, 16.0), abs=1e-9)


def test_two_jobs_of_different_intensity_by_hand() -> None:
    """As above, but B computes 0.5 + 0.5 s (alone 3 s, intensity 1/3 < A's 1/2: A ranks first).

    job-priority: A keeps its alone 4 s (ends 4, 8, 12); B pulls after A (1-2), pushes after A's push
    (4-5), pulls again at 5 (5-6), ... ends 5, 9, 13: 4 s, slowdown 4/3.
    fifo: pulls share the NIC (0-2); B pushes 3-4, A 4-5, then they alternate alone (B: pull 4-5, push
    6-7, pull 7-8, push 9-10; A: pull 5-6, push 8-9, pull 9-10) until both push at 12 and share (12-14).
    A ends 5, 9, 14; B ends 4, 7, 10, 14. The window opens at A's first end (5) and closes at 14: A's
    step 4.5, B's (14 - 7) / 2 = 3.5."""
    a_prof = synthetic([4], [1.0], [1.0])
    b_prof = synthetic([4], [0.5], [0.5])
    jobs = [JobSpec("A", a_prof, (0,), (2,), ()), JobSpec("B", b_prof, (1,), (2,), ())]
    res = compare_policies(jobs, hosts=3, bandwidth_bps=BPS, policies=("fifo", "job-priority"), iterations=3)
    prio = res["job-priority"]
    a, b = prio.jobs
    assert (a.intensity, b.intensity) == pytest.approx((0.5, 1 / 3))
    assert (a.rank, b.rank) == (0, 1)
    assert (a.step_s, b.step_s) == pytest.approx((4.0, 4.0), abs=1e-9)
    assert (a.slowdown, b.slowdown) == pytest.approx((1.0, 4 / 3), abs=1e-9)
    assert prio.weighted_utilization == pytest.approx((0.5 + 0.25) / 2, abs=1e-12)
    fifo = res["fifo"]
    a, b = fifo.jobs
    assert (fifo.window_start_s, fifo.window_s) == pytest.approx((5.0, 14.0), abs=1e-9)
    assert (a.step_s, a.iterations, b.step_s, b.iterations) == pytest.approx((4.5, 3, 3.5, 3), abs=1e-9)
    assert fifo.weighted_utilization == pytest.approx((2 / 4.5 + 1 / 3.5) / 2, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_job_priority_serves_the_top_job_as_if_alone(seed: int) -> None:
    """Both jobs' PSes on the same hosts, workers on hosts of their own: the top job's traffic is
    above all of the other's on every port they share, so it runs exactly as alone, and never worse
    than under fifo."""
    rng = random.Random(100 + seed)
    p = rng.randint(1, 2)
    ps = tuple(range(p))
    wa, wb = rng.randint(1, 3), rng.randint(1, 3)
    a = JobSpec("A", random_profile(rng), tuple(range(p, p + wa)), ps, (0.5,))
    b = JobSpec("B", random_profile(rng), tuple(range(p + wa, p + wa + wb)), ps, (0.5,))
    res = compare_policies([a, b], hosts=p + wa + wb, bandwidth_bps=2e7, policies=("fifo", "job-priority"))
    top = min(res["job-priority"].jobs, key=lambda j: j.rank if j.rank is not None else 99)
    assert top.rank == 0
    assert top.step_s == pytest.approx(top.alone_s, rel=1e-9)
    assert top.step_s <= res["fifo"].job(top.name).step_s * (1 + 1e-9)


def test_jobs_on_separate_hosts_do_not_meet() -> None:
    """No shared port: every policy gives each job its alone step time, however different the speeds
    (the fast job is measured over many more iterations than the slow one's window holds)."""
    rng = random.Random(3)
    slow = JobSpec("slow", synthetic([400000], [0.001], [0.001]), (0,), (1,), (0.5,))
    fast = JobSpec("fast", random_profile(rng, 3), (2, 3), (4,), (0.5,))
    for policy, res in compare_policies([slow, fast], hosts=5, bandwidth_bps=1e7).items():
        for job in res.jobs:
            assert job.slowdown == pytest.approx(1.0, rel=1e-9), policy
        assert res.job("fast").iterations > 3 * res.job("slow").iterations


@pytest.mark.parametrize("policy", ["fifo", "combined"])
def test_growing_iterations_is_exact(policy: str) -> None:
    """A fast job's iterations are added as it nears its last (_JobReplay.extend): the same times, to
    the bit, as giving it enough from the start."""
    rng = random.Random(5)
    slow = JobSpec("slow", synthetic([40000, 400000], [0.001, 0.001], [0.001, 0.002]), (0,), (2, 3), (0.5,))
    fast = JobSpec("fast", random_profile(rng, 3), (1, 4), (2, 3), (0.5,))
    bands = (
        {"slow": (0, (0, 2)), "fast": (1, (1, 3))}
        if policy == "combined"
        else {"slow": (None, ()), "fast": (None, ())}
    )
    grown = _Fabric([slow, fast], 5, 1e7, policy, bands, 3).measure()
    ample = _Fabric([slow, fast], 5, 1e7, policy, bands, 3).measure(budgets=[200, 200])
    assert grown == ample
    assert grown[0][1][1] > 5  # the fast job did grow past its first budget (3 + 2)


def test_combined_band_layout() -> None:
    """Two jobs of two classes on four queues: A-urgent 0, B-urgent 1, A-bulk 2, B-bulk 3."""
    rng = random.Random(11)
    a = JobSpec("A", synthetic([4000, 4000], [0.02, 0.02], [0.02, 0.02]), (0,), (2,))
    b = JobSpec("B", random_profile(rng, 2), (1,), (2,))
    res = simulate_jobs([a, b], hosts=3, bandwidth_bps=1e6, policy="combined")
    by_rank = sorted(res.jobs, key=lambda j: j.rank if j.rank is not None else 99)
    assert [j.fabric_classes for j in by_rank] == [(0, 2), (1, 3)]
    assert by_rank[0].intensity >= by_rank[1].intensity
    geryon = simulate_jobs([a, b], hosts=3, bandwidth_bps=1e6, policy="geryon")
    assert [j.fabric_classes for j in geryon.jobs] == [(0, 1), (0, 1)]


def test_weighted_utilization_by_hand() -> None:
    # 2 GPUs at 1/2 and 1 GPU at 1/4: (2 * 0.5 + 0.25) / 3.
    assert weighted_utilization([2, 1], [1.0, 1.0], [2.0, 4.0]) == pytest.approx(1.25 / 3)
    # A step below compute (it cannot be) still counts as fully busy.
    assert weighted_utilization([1], [1.0], [0.5]) == 1.0
    prof = synthetic([4], [1.0], [1.0])
    jobs = [JobSpec("A", prof, (0, 1), (3,), ()), JobSpec("B", prof, (2,), (3,), ())]
    res = simulate_jobs(jobs, hosts=4, bandwidth_bps=BPS, policy="fifo")
    expect = sum(j.workers * j.compute_s / j.step_s for j in res.jobs) / 3
    assert res.weighted_utilization == pytest.approx(expect)
    assert res.to_dict()["jobs"][0]["workers"] == 2


def _job(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "A",
        "profile": synthetic([4], [1.0], [1.0]),
        "workers": (0,),
        "ps": (1,),
        "thresholds": (0.5,),
    }
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("jobs", "kwargs", "needle"),
    [
        ([_job()], {"policy": "priority"}, "policy: unknown policy 'priority'; allowed: fifo, geryon"),
        ([_job()], {"queues": 0}, "queues"),
        ([_job()], {"queues": 9}, "queues"),
        ([_job()], {"hosts": 0}, "hosts"),
        ([_job()], {"bandwidth_bps": -1}, "bandwidth_bps"),
        ([_job()], {"iterations": 0}, "iterations"),
        ([_job()], {"transport": "udp"}, "transport: unknown transport 'udp'"),
        ([_job()], {"verbs_ack_s": -1.0}, "verbs_ack_s"),
        ([_job()], {"seed": 1.5}, "seed"),
        ([], {}, "jobs"),
        (["A"], {}, r"jobs\[0\]"),
        ([_job(name="")], {}, r"jobs\[0\].name"),
        ([_job(), _job()], {}, r"jobs\[1\] \('A'\).name: listed twice"),
        ([_job(workers=(5,))], {}, r"\('A'\).workers: host 5"),
        ([_job(workers=())], {}, r"\('A'\).workers"),
        ([_job(ps=(0,))], {}, r"\('A'\).ps: host 0 already holds its workers"),
        ([_job(workers=(0, 0))], {}, r"\('A'\).workers: host 0"),
        ([_job(thresholds=(0.7, 0.2))], {}, r"\('A'\).thresholds"),
        ([_job(profile="vgg19")], {}, r"\('A'\).profile"),
        ([_job(thresholds=(0.2, 0.5))], {"policy": "geryon", "queues": 2}, "queues: job 'A' has 3 classes"),
    ],
)
def test_bad_arguments_name_the_field(jobs: list[JobSpec], kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"hosts": 3, "bandwidth_bps": BPS, "policy": "fifo"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=needle):
        simulate_jobs(jobs, **args)  # type: ignore[arg-type]


def test_policies_are_the_documented_four() -> None:
    assert POLICIES == ("fifo", "geryon", "job-priority", "combined")


# --- geryon simulate-jobs ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def profile_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("profiles")
    a, b = root / "a.json", root / "b.json"
    synthetic([400_000, 800_000, 8_000_000], [0.004, 0.004, 0.002], [0.008, 0.008, 0.004]).save(a)
    synthetic([200_000, 4_000_000], [0.002, 0.001], [0.004, 0.002]).save(b)
    return a, b


def test_cli_table_and_json(profile_files: tuple[Path, Path]) -> None:
    a, b = profile_files
    jobs = ["--job", f"A:{a}:0-1:4", "--job", f"B:{b}:2,3:4:0.3", "--bandwidth", "1gbit", "--quiet"]
    table = geryon("simulate-jobs", *jobs)
    assert table.returncode == 0, table.stderr
    assert "weighted util" in table.stdout
    for policy in POLICIES:
        assert policy in table.stdout
    out = geryon("simulate-jobs", *jobs, "--json", "--policy", "fifo", "combined", "--transport", "geryon")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert list(report["policies"]) == ["fifo", "combined"]
    assert report["hosts"] == 5 and report["jobs"][1]["thresholds"] == [0.3]
    # The command runs what the API runs.
    specs = [
        JobSpec("A", Profile.load(a), (0, 1), (4,), (0.5,)),
        JobSpec("B", Profile.load(b), (2, 3), (4,), (0.3,)),
    ]
    api = simulate_jobs(specs, hosts=5, bandwidth_bps=1e9, policy="combined", transport="geryon")
    got = report["policies"]["combined"]
    assert got["weighted_utilization"] == pytest.approx(api.weighted_utilization, rel=1e-12)
    assert [j["step_s"] for j in got["jobs"]] == pytest.approx([j.step_s for j in api.jobs], rel=1e-12)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--policy", "warp"],
            "--policy: unknown policy 'warp'; allowed: fifo, geryon, job-priority, combined",
        ),
        (["--queues", "9"], "--queues: expected 1 to 8"),
        (["--hosts", "2"], "--hosts: 2, but a job uses host 4"),
        (["--bandwidth", "fast"], "--bandwidth:"),
        (["--iterations", "0"], "--iterations: must be at least 1"),
        (["--threshold", "0.9,0.1"], "--threshold must be strictly increasing"),
        (["--job", "C:nowhere.json:5:6"], "--job: profile 'nowhere.json'"),
        (["--job", "C:{a}:5"], "--job: 'C:"),
        (["--job", "C:{a}:x:6"], "--job: C's workers 'x' is not a list of host indices"),
        (["--job", "A:{a}:5:6"], "--job: jobs[2] ('A').name: listed twice"),
        (["--job", "C:{a}:5:5"], "--job: jobs[2] ('C').ps: host 5 already holds its workers"),
        (["--queues", "1", "--policy", "geryon"], "--queues: job 'A' has 2 classes"),
        (["--verbs-ack", "1e-6"], "--verbs-ack: only with --transport tf-verbs"),
        (["--transport", "tf-verbs", "--verbs-ack", "-1"], "--verbs-ack: expected seconds >= 0"),
    ],
)
def test_cli_bad_flags_exit_2_naming_the_flag(
    profile_files: tuple[Path, Path], args: list[str], message: str
) -> None:
    a, b = profile_files
    base = ["--job", f"A:{a}:0-1:4", "--job", f"B:{b}:2,3:4", "--quiet"]
    out = geryon("simulate-jobs", *base, *[x.replace("{a}", str(a)) for x in args])
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
