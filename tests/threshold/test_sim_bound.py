"""The simulator's lower bound (geryon.threshold.sim_bound): its ports by hand, and no mode below it.

The bound is a relaxation (compute alone, or the busiest port busy for the whole iteration), so no
mode may beat it on any cluster: the grid below runs every mode, with and without the barrier,
partitioning and co-hosting, over random chain models whose compute and bytes swing from
compute-bound to network-bound (issue 38 item 4: the old `ideal` was beaten by hybrid).
"""

from __future__ import annotations

import itertools
import random

import pytest

from geryon.threshold.profile import synthetic
from geryon.threshold.sim_bound import lower_bound, port_bytes
from geryon.threshold.sim_modes import MODES
from geryon.threshold.simknobs import TF_INFLIGHT
from geryon.threshold.simulator import simulate


def test_separate_hosts_ports_carry_the_model_per_worker_and_each_ps_its_share_of_every_worker():
    ports = port_bytes([100.0, 50.0, 30.0], [0, 1, 1], workers=4, num_ps=2, colocate=False)
    assert ports["worker0.nic"] == ports["switch->worker0"] == 180.0
    assert ports["ps0.nic"] == ports["switch->ps0"] == 400.0
    assert ports["ps1.nic"] == ports["switch->ps1"] == 320.0


def test_co_hosted_ports_carry_their_ps_to_the_others_and_the_rest_of_the_model_home():
    ports = port_bytes([100.0, 50.0, 30.0], [0, 1, 1], workers=3, num_ps=2, colocate=True)
    # host 0: its PS's 100 to 2 other workers, its worker's 80 to PS 1; host 2 holds no PS.
    assert ports["host0.nic"] == ports["switch->host0"] == 2 * 100 + 80
    assert ports["host1.nic"] == 2 * 80 + 100
    assert ports["host2.nic"] == ports["switch->host2"] == 180


def test_the_bound_is_the_larger_of_compute_and_the_busiest_port():
    b = lower_bound([1e6], [0], workers=8, num_ps=1, colocate=False, bandwidth_bps=1e9, compute_s=0.01)
    assert b.by == "ps0.nic" and b.port == "ps0.nic"
    assert b.seconds == pytest.approx(8e6 * 8 / 1e9)
    b = lower_bound([1e6], [0], workers=8, num_ps=1, colocate=False, bandwidth_bps=1e9, compute_s=1.0)
    assert (b.by, b.seconds, b.port) == ("compute", 1.0, "ps0.nic")


def test_every_result_carries_the_bound_of_its_cluster():
    profile = synthetic([4000, 8000], [1e-3, 1e-3], [2e-3, 2e-3])
    results = [simulate(profile, workers=2, num_ps=2, bandwidth_bps=1e8, mode=m) for m in MODES]
    assert len({r.bound for r in results}) == 1
    assert results[0].to_dict()["bound"]["seconds"] == results[0].bound.seconds


def _profiles(count: int) -> list:
    rng = random.Random(38)
    out = []
    for _ in range(count):
        n = rng.randint(2, 7)
        sizes = [4 * rng.choice([0, 1, 10, 100, 1000, 25000, 250000]) for _ in range(n)]
        if not any(sizes):
            sizes[0] = 4000
        fwd = [rng.uniform(1e-4, 5e-3) for _ in range(n)]
        bwd = [2 * f * rng.uniform(0.5, 1.5) for f in fwd]
        out.append(synthetic(sizes, fwd, bwd))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_no_mode_goes_below_the_bound(seed: int) -> None:
    rng = random.Random(seed)
    below = []
    cells = 0
    for profile in _profiles(3 + seed):
        for workers, num_ps, colocate, barrier, partition in itertools.product(
            (1, 2, 5), (1, 2, 4), (False, True), (False, True), (True, False)
        ):
            if colocate and num_ps > workers:
                continue
            bps = rng.choice([1e7, 1e8, 1e9, 1e10])
            for mode in MODES:
                kw = {"inflight": TF_INFLIGHT} if mode in ("fifo", "network") else {}
                r = simulate(
                    profile,
                    workers=workers,
                    num_ps=num_ps,
                    bandwidth_bps=bps,
                    mode=mode,
                    thresholds=(rng.choice([0.0, 0.5, 1.0]),),
                    slice_bytes=rng.choice([None, 40000]),
                    barrier=barrier,
                    partition=partition,
                    colocate=colocate,
                    iterations=3,
                    seed=seed,
                    **kw,
                )
                cells += 1
                assert r.bound is not None
                if r.iteration_s < r.bound.seconds * (1 - 1e-9):
                    below.append((mode, workers, num_ps, colocate, barrier, partition, r.iteration_s))
    assert cells > 100
    assert not below, below[:5]
