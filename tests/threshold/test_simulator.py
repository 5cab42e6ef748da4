"""The cluster replay simulator: hand-computed cases, the analytic model, invariants, and bad input."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from geryon.tagger.partition import plan_partitions
from geryon.threshold.model import in_order, iteration_time
from geryon.threshold.network import allocate
from geryon.threshold.profile import LayerSpec, ParamSpec, Profile, synthetic
from geryon.threshold.simulator import MODES, simulate

KB = 1000


def random_profile(rng: random.Random, layers: int | None = None) -> Profile:
    n = layers or rng.randint(2, 7)
    return synthetic(
        [4 * rng.randint(50, 4000) for _ in range(n)],
        [rng.uniform(1e-4, 3e-3) for _ in range(n)],
        [rng.uniform(1e-4, 5e-3) for _ in range(n)],
    )


def vgg19_like() -> Profile:
    """VGG-19's exact parameter shapes (float32) with K40-like FLOP-derived times, without TensorFlow."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512]
    layers: list[LayerSpec] = []
    params: list[ParamSpec] = []
    cin, hw, total = 3, 224, 19
    for c in cfg:
        if c == "M":
            hw //= 2
            continue
        assert isinstance(c, int)
        i = len(layers)
        flops = 2.0 * hw * hw * 9 * cin * c * 32
        layers.append(LayerSpec(f"conv{i}", flops / 4.3e12, 2 * flops / 4.3e12, flops))
        params += [
            ParamSpec(f"conv{i}/kernel", (3, 3, cin, c), 4, 1 - i / total, i),
            ParamSpec(f"conv{i}/bias", (c,), 4, 1 - i / total, i),
        ]
        cin = c
    for n_in, n_out in ((25088, 4096), (4096, 4096), (4096, 1000)):
        i = len(layers)
        flops = 2.0 * n_in * n_out * 32
        layers.append(LayerSpec(f"fc{i}", flops / 4.3e12, 2 * flops / 4.3e12, flops))
        params += [
            ParamSpec(f"fc{i}/kernel", (n_in, n_out), 4, 1 - i / total, i),
            ParamSpec(f"fc{i}/bias", (n_out,), 4, 1 - i / total, i),
        ]
    return Profile("vgg19", 32, tuple(layers), tuple(params))


# --- one worker, one PS: hand-computed cases and the analytic model ---------------------------------


def test_fifo_shares_the_link_among_pending_transfers_hand_computed():
    # 1000 B/s. Pulls of 1000 B and 3000 B share the link: layer 0 arrives at 2 s, layer 1 at 4 s.
    # Forward 0: 2..5, forward 1: 5..6, backward 1: 6..7 then push 1 (3000 B) from 7; backward 0:
    # 7..8 then push 0 (1000 B) shares from 8: push 0 done at 10, push 1 (1000 B left) at 11.
    p = synthetic([1000, 3000], [3.0, 1.0], [1.0, 1.0])
    r = simulate(p, workers=1, num_ps=1, bandwidth_bps=8000, mode="fifo", iterations=1)
    assert r.iteration_s == pytest.approx(11.0)
    assert r.compute_s == pytest.approx(6.0)
    assert r.comm_s == pytest.approx(8.0)  # 4000 B each way at 1000 B/s
    assert r.gpu_utilization == pytest.approx(6 / 11)
    assert r.alpha == pytest.approx((8 + 6 - 11) / 6)


@pytest.mark.parametrize(
    ("mode", "interleave"), [("end-host", True), ("ideal", True), ("fifo", False), ("network", False)]
)
def test_one_transfer_at_a_time_in_layer_order_is_the_analytic_model(mode, interleave):
    # end-host and ideal send the most urgent first; fifo and network without interleaving send in
    # ready order, and the pulls all become ready at once, listed in urgency order.
    rng = random.Random(7)
    for _ in range(25):
        p = random_profile(rng)
        bandwidth = rng.choice([1e6, 1e7, 1e8])
        expected = iteration_time(p, in_order(p), bandwidth).iteration_s
        kw = dict(
            workers=1, num_ps=1, bandwidth_bps=bandwidth, mode=mode, interleave=interleave, endhost_gap_s=0
        )
        first = simulate(p, iterations=1, **kw)
        assert first.iteration_s == pytest.approx(expected, rel=1e-12)
        # With TF's iteration barrier the next iteration starts like the first: the model again.
        steady = simulate(p, iterations=3, barrier=True, **kw)
        assert steady.iteration_s == pytest.approx(expected, rel=1e-9)


def test_network_with_one_class_per_layer_is_the_in_order_model():
    rng = random.Random(11)
    for _ in range(20):
        p = random_profile(rng, layers=rng.randint(2, 8))
        n = p.num_layers
        # Urgencies are 1 - l/n: a threshold just below each of them gives every layer its own class.
        thresholds = [1 - (i + 0.5) / n for i in range(n - 1)][::-1]
        expected = iteration_time(p, in_order(p), 1e7).iteration_s
        r = simulate(
            p, workers=1, num_ps=1, bandwidth_bps=1e7, mode="network", thresholds=thresholds, iterations=1
        )
        assert r.iteration_s == pytest.approx(expected, rel=1e-12)


def test_one_worker_one_ps_is_bounded_by_max_and_sum_of_comm_and_compute():
    rng = random.Random(3)
    for _ in range(30):
        p = random_profile(rng)
        bandwidth = rng.choice([1e6, 1e7, 1e8])
        slicing = rng.choice([None, 1000, 4000])
        for mode in MODES:
            for iterations, barrier in ((1, False), (3, True)):
                r = simulate(
                    p,
                    workers=1,
                    num_ps=1,
                    bandwidth_bps=bandwidth,
                    mode=mode,
                    slice_bytes=slicing,
                    iterations=iterations,
                    barrier=barrier,
                )
                n, c, t = r.comm_s, r.compute_s, r.iteration_s
                # end-host pays its per-transfer gap on top of moving the bytes: every pull and push once.
                gaps = 2 * r.shards * r.endhost_gap_s if mode == "end-host" else 0.0
                assert max(n, c) * (1 - 1e-9) <= t <= (n + c + gaps) * (1 + 1e-9), (mode, iterations)
                assert 0 <= r.alpha <= 1
                assert r.gpu_utilization == pytest.approx(c / t)
            # Without the barrier the next pulls overlap this iteration's pushes (full duplex):
            # still at least the compute and one direction's traffic, never more than N + C.
            r = simulate(p, workers=1, num_ps=1, bandwidth_bps=bandwidth, mode=mode, slice_bytes=slicing)
            gaps = 2 * r.shards * r.endhost_gap_s if mode == "end-host" else 0.0
            assert (
                max(r.comm_s / 2, r.compute_s) * (1 - 1e-9)
                <= r.iteration_s
                <= (r.comm_s + r.compute_s + gaps) * (1 + 1e-9)
            )


# --- several PSes: priorities in the fabric -----------------------------------------------------------


def test_fig5_network_priorities_beat_end_host_scheduling_hand_computed():
    # Paper Fig. 5: an urgent parameter on PS0 and a bulk one on PS1 reach one worker at once.
    # 1000 B/s links; both 1000 B. End-host: the switch shares, both arrive at 2 s, forward 0 runs
    # 2..3. Network: the urgent one arrives at 1 s, forward 0 runs 1..2, the bulk one is there by 2.
    p = synthetic([1000, 1000], [1.0, 0.0], [0.0, 0.0])
    common = dict(workers=1, num_ps=2, bandwidth_bps=8000, iterations=1, partition=False, endhost_gap_s=0)
    end_host = simulate(p, mode="end-host", **common)
    network = simulate(p, mode="network", **common)
    ideal = simulate(p, mode="ideal", **common)
    # After the forward pass both pushes go to different PSes through the worker's NIC.
    assert end_host.iteration_s == pytest.approx(3.0 + 2.0)
    assert network.iteration_s == pytest.approx(2.0 + 2.0)
    assert ideal.iteration_s == pytest.approx(network.iteration_s)


def priority_sensitive(rng: random.Random) -> Profile:
    """VGG-like: compute-heavy layers with small parameters first, then parameter-heavy light layers,
    the early compute about as long as moving the heavy parameters at 10 Mbit/s."""
    n = rng.randint(4, 8)
    h = n // 2
    sizes = [4 * rng.randint(50, 400) for _ in range(h)] + [4 * rng.randint(2000, 8000) for _ in range(n - h)]
    heavy_s = sum(sizes[h:]) * 8 / 1e7
    forward = [heavy_s / h * rng.uniform(0.5, 1.5) for _ in range(h)] + [
        rng.uniform(1e-4, 1e-3) for _ in range(h, n)
    ]
    return synthetic(sizes, forward, [2 * f for f in forward])


def test_ideal_beats_network_beats_fifo_when_ps_share_a_worker_port():
    # Fig. 5's setting: whole parameters (sliced) spread over several PSes that all send to one
    # worker's port; TF's iteration barrier, so every iteration starts with all pulls at once.
    rng = random.Random(5)
    gains = []
    for _ in range(20):
        p = priority_sensitive(rng)
        kw = dict(
            workers=1,
            num_ps=rng.randint(2, 6),
            bandwidth_bps=1e7,
            slice_bytes=2000,
            iterations=3,
            barrier=True,
            partition=False,
        )
        t = {mode: simulate(p, mode=mode, **kw).iteration_s for mode in MODES}
        assert t["ideal"] <= t["network"] * (1 + 1e-9)
        assert t["network"] <= t["fifo"] * (1 + 1e-9)
        gains.append(t["fifo"] / t["network"])
    assert sorted(gains)[len(gains) // 2] > 1.05  # not by a hair: the median gain is real


def test_symmetric_representative_worker_agrees_with_simulating_every_worker():
    rng = random.Random(13)
    for _ in range(8):
        p = random_profile(rng)
        workers, num_ps = rng.randint(1, 4), rng.randint(1, 4)
        for mode in MODES:
            kw = dict(
                interleave=rng.choice([True, False]),
                barrier=rng.choice([True, False]),
                workers=workers,
                num_ps=num_ps,
                bandwidth_bps=1e7,
                mode=mode,
                slice_bytes=2000,
                iterations=3,
            )
            one = simulate(p, **kw)
            every = simulate(p, symmetric=False, **kw)
            assert one.iteration_s == pytest.approx(every.iteration_s, rel=1e-9)
            assert one.iteration_ends == pytest.approx(every.iteration_ends, rel=1e-9)
            for port, moved in one.link_bytes.items():
                assert moved == pytest.approx(every.link_bytes[port], rel=1e-9)


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_every_port_moves_exactly_the_bytes_of_the_plan(mode, symmetric, interleave):
    p = random_profile(random.Random(17), layers=6)
    workers, num_ps, iterations, slicing = 3, 2, 2, 1500
    r = simulate(
        p,
        workers=workers,
        num_ps=num_ps,
        bandwidth_bps=1e7,
        mode=mode,
        slice_bytes=slicing,
        iterations=iterations,
        symmetric=symmetric,
        interleave=interleave,
    )
    plan = plan_partitions([(q.name, q.shape, q.element_size) for q in p.params], num_ps, slicing)
    assert r.shards == plan.total_shards
    total = sum(plan.bytes_per_ps())
    workers_simulated = 1 if symmetric else workers
    for w in range(workers_simulated):
        assert r.link_bytes[f"worker{w}.nic"] == pytest.approx(iterations * total, rel=1e-9)
        assert r.link_bytes[f"switch->worker{w}"] == pytest.approx(iterations * total, rel=1e-9)
    for ps, held in enumerate(plan.bytes_per_ps()):
        assert r.link_bytes[f"ps{ps}.nic"] == pytest.approx(workers * iterations * held, rel=1e-9)
        assert r.link_bytes[f"switch->ps{ps}"] == pytest.approx(workers * iterations * held, rel=1e-9)


def test_without_partitioning_whole_parameters_go_round_robin():
    p = synthetic([4000, 8000, 400], [1e-3] * 3, [1e-3] * 3)
    r = simulate(p, workers=2, num_ps=2, bandwidth_bps=1e7, mode="fifo", partition=False, iterations=1)
    assert r.shards == 3
    assert r.link_bytes["ps0.nic"] == pytest.approx(2 * (4000 + 400))
    assert r.link_bytes["ps1.nic"] == pytest.approx(2 * 8000)


@pytest.mark.parametrize("interleave", [True, False])
def test_same_input_same_output(interleave):
    p = random_profile(random.Random(19), layers=7)
    for mode in MODES:
        kw = dict(
            workers=4,
            num_ps=3,
            bandwidth_bps=1e7,
            mode=mode,
            slice_bytes=1000,
            iterations=3,
            trace=True,
            interleave=interleave,
        )
        a, b = simulate(p, **kw), simulate(p, **kw)
        da, db = a.to_dict(), b.to_dict()
        da.pop("wall_s")
        db.pop("wall_s")
        assert da == db
        assert a.chrome_trace()["traceEvents"] == b.chrome_trace()["traceEvents"]


def test_more_bandwidth_never_hurts_and_compute_bound_jobs_saturate_the_gpu():
    p = random_profile(random.Random(23), layers=5)
    times = [
        simulate(p, workers=4, num_ps=2, bandwidth_bps=bw, mode="network", slice_bytes=1000).iteration_s
        for bw in (1e6, 1e7, 1e8, 1e10, 1e12)
    ]
    assert times == sorted(times, reverse=True)
    fast = simulate(p, workers=4, num_ps=2, bandwidth_bps=1e13, mode="network")
    assert fast.gpu_utilization == pytest.approx(1.0, rel=1e-4)


def test_layers_without_parameters_and_empty_parameters():
    layers = (LayerSpec("in", 1.0, 0.0), LayerSpec("dense", 1.0, 1.0), LayerSpec("pool", 0.5, 0.5))
    params = (ParamSpec("dense/kernel", (0, 4), 4, 0.9, 1), ParamSpec("dense/bias", (250,), 4, 0.9, 1))
    p = Profile("odd", 1, layers, params)
    for mode in MODES:
        r = simulate(p, workers=2, num_ps=2, bandwidth_bps=8000, mode=mode, iterations=2, endhost_gap_s=0)
        # The bias is two 500 B shards, one per PS; two workers share each PS link, so every pull and
        # push takes 1 s. The pulls hide behind the forward of "in" (1 s); the pushes follow the
        # backward of "dense", while "in" has no backward.
        assert r.first_iteration_s == pytest.approx(1.0 + 1.0 + 0.5 + 0.5 + 1.0 + 1.0)
    no_params = Profile("none", 1, layers, ())
    r = simulate(no_params, workers=3, num_ps=2, bandwidth_bps=1e9, mode="fifo", iterations=3)
    assert r.iteration_s == pytest.approx(p.compute_s)
    assert r.shards == 0


def test_vgg19_sized_cluster_runs_with_a_few_events_per_shard():
    p = vgg19_like()
    r = simulate(p, workers=64, num_ps=16, bandwidth_bps=10e9, mode="network", slice_bytes=4 << 20)
    assert r.shards > 16 * 38 // 2
    # About one event per transfer and direction, plus the compute ops: no per-slice recomputation storm.
    assert r.events <= r.iterations * (2 * r.shards + 2 * p.num_layers) * 1.5
    assert r.compute_s <= r.iteration_s
    assert 0 < r.gpu_utilization <= 1


# --- bad input ------------------------------------------------------------------------------------------

P = synthetic([400, 400], [1e-3, 1e-3], [1e-3, 1e-3])
OK = dict(workers=2, num_ps=2, bandwidth_bps=1e9, mode="network")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bandwidth_bps": 0}, "bandwidth_bps"),
        ({"bandwidth_bps": -1e9}, "bandwidth_bps"),
        ({"bandwidth_bps": math.nan}, "bandwidth_bps"),
        ({"bandwidth_bps": math.inf}, "bandwidth_bps"),
        ({"bandwidth_bps": "10gbit"}, "bandwidth_bps"),
        ({"mode": "tictac"}, "mode: unknown mode 'tictac'; allowed: fifo, end-host, network, hybrid, ideal"),
        ({"thresholds": (1.5,)}, r"thresholds\[0\]"),
        ({"thresholds": (0.6, 0.4)}, "strictly increasing"),
        ({"thresholds": ()}, "thresholds"),
        ({"workers": 0}, "workers"),
        ({"workers": 2.5}, "workers"),
        ({"num_ps": 0}, "num_ps"),
        ({"slice_bytes": 0}, "slice_bytes"),
        ({"iterations": 0}, "iterations"),
        ({"iterations": True}, "iterations"),
        ({"trace": "yes"}, "trace"),
        ({"interleave": 1}, "interleave"),
        ({"colocate": "yes"}, "colocate"),
        ({"colocate": True, "num_ps": 3}, r"colocate: .*num_ps <= workers; got workers=2, num_ps=3"),
    ],
)
def test_bad_arguments_name_the_argument(change, message):
    with pytest.raises(ValueError, match=message):
        simulate(P, **{**OK, **change})


def test_a_profile_is_required():
    with pytest.raises(ValueError, match="profile"):
        simulate(P.to_dict(), **OK)  # type: ignore[arg-type]


def test_a_result_without_trace_says_how_to_get_one():
    r = simulate(P, **OK)
    with pytest.raises(ValueError, match="trace=True"):
        r.chrome_trace()


# --- an independent, time-stepped reference ---------------------------------------------------------


def time_stepped(
    p: Profile,
    workers: int,
    num_ps: int,
    bandwidth: float,
    mode: str,
    interleave: bool,
    iterations: int,
    colocate: bool = False,
) -> float:
    """Iteration ends by brute force: every worker, fixed steps, rates re-allocated every step.

    Shares only the port allocation (tested on its own) with the simulator: no events, no symmetry.
    Whole parameters go round-robin over the PSes (partition=False); returns the mean time between
    iteration ends after the first (or the first's end for one iteration). Colocated, PS k sits on
    worker k's ports, a transfer between them arrives at once, and without the barrier the pulls of
    one more iteration run, as the simulator documents.
    """
    dt = 1e-3
    shards = []  # (bytes, ps, layer, class, rank)
    ranks = sorted({(-q.urgency, q.layer) for q in p.params})
    for i, q in enumerate(p.params):
        cls = 0 if q.urgency > 0.5 else 1
        shards.append((q.bytes, i % num_ps, q.layer, cls, ranks.index((-q.urgency, q.layer))))
    cap = bandwidth / 8
    # Ports: worker w -> 2w (NIC), 2w+1 (switch port to it); PS k -> 2(workers+k), +1, or 2k, +1 colocated.
    ps_host = [k if colocate else workers + k for k in range(num_ps)]
    capacity = [cap] * (2 * (workers if colocate else workers + num_ps))
    rounds = iterations + (1 if colocate else 0)
    Key = tuple[str, int, int, int]  # (kind, worker, shard, iteration)
    left: dict[Key, float] = {}
    ready: dict[Key, int] = {}  # ready order
    head: dict[tuple[str, int, int, int], Key] = {}  # end-host: the transfer a connection is sending
    order = 0
    L = p.num_layers
    pending = [
        [sum(1 for sh in shards if sh[2] == layer) for layer in range(L)] * rounds for _ in range(workers)
    ]
    pushed = [[0] * len(shards) for _ in range(iterations)]

    def start(key: Key) -> None:
        nonlocal order
        if ps_host[shards[key[2]][1]] == key[1]:
            arrive(key)  # worker and PS on one host
        else:
            left[key] = shards[key[2]][0]
            ready[key] = order
            order += 1

    def arrive(key: Key) -> None:
        kind, w, s, it = key
        if kind == "pull":
            pending[w][it * L + shards[s][2]] -= 1
        else:
            pushed[it][s] += 1
            if pushed[it][s] == workers and it + 1 < rounds:
                for v in range(workers):
                    start(("pull", v, s, it + 1))

    for s in sorted(range(len(shards)), key=lambda j: shards[j][4]):
        for w in range(workers):
            start(("pull", w, s, 0))
    ops = [("f", layer) for layer in range(L)] + [("b", layer) for layer in reversed(range(L))]
    op = [0] * workers  # iteration * 2L + position
    busy_until: list[float | None] = [None] * workers
    ends: list[float] = []
    t = 0.0
    while len(ends) < iterations:
        changed = True
        while changed:  # compute that finishes or starts now
            changed = False
            for w in range(workers):
                finished = busy_until[w]
                if finished is not None and finished <= t + 1e-12:
                    it, pos = divmod(op[w], 2 * L)
                    kind, layer = ops[pos]
                    busy_until[w] = None
                    op[w] += 1
                    if kind == "b":
                        for s, sh in enumerate(shards):
                            if sh[2] == layer:
                                start(("push", w, s, it))
                    changed = True
                if busy_until[w] is None and op[w] < iterations * 2 * L:
                    it, pos = divmod(op[w], 2 * L)
                    kind, layer = ops[pos]
                    if kind == "b" or not pending[w][it * L + layer]:
                        spec = p.layers[layer]
                        busy_until[w] = t + (spec.forward_s if kind == "f" else spec.backward_s)
                        changed = True
        it = len(ends)
        if all(o >= (it + 1) * 2 * L for o in op) and all(c == workers for c in pushed[it]):
            ends.append(t)
            continue
        # Connections and what each sends now.
        conns: dict[tuple[str, int, int, int], list[Key]] = {}
        for key in left:
            kind, w, s, _ = key
            cls = shards[s][3] if mode == "network" else 0
            conns.setdefault((kind, w, shards[s][1], cls), []).append(key)
        served: dict[tuple[str, int, int, int], list[Key]] = {}
        for c, keys in conns.items():
            if mode in ("fifo", "network") and interleave:
                served[c] = keys
            elif mode in ("fifo", "network"):
                served[c] = [min(keys, key=lambda k: ready[k])]
            elif mode == "ideal":
                served[c] = [min(keys, key=lambda k: (shards[k[2]][4], ready[k]))]
            else:  # end-host finishes what it started
                if head.get(c) not in left:
                    head[c] = min(keys, key=lambda k: (shards[k[2]][4], ready[k]))
                served[c] = [head[c]]
        names = list(served)
        ups, downs, lu, ld = [], [], [], []
        for kind, w, ps, cls in names:
            src, dst = (ps_host[ps], w) if kind == "pull" else (w, ps_host[ps])
            ups.append(2 * src)
            downs.append(2 * dst + 1)
            rank = shards[served[(kind, w, ps, cls)][0][2]][4]
            level = {"fifo": None, "network": cls, "ideal": rank, "end-host": rank}[mode]
            lu.append(level)
            ld.append(None if mode in ("fifo", "end-host") else level)
        rates = allocate(ups, downs, lu, ld, capacity)
        t += dt
        for c, rate in zip(names, rates, strict=True):
            for key in served[c]:
                left[key] -= rate / len(served[c]) * dt
                if left[key] <= 1e-9:
                    del left[key]
                    arrive(key)
    return (ends[-1] - ends[0]) / (iterations - 1) if iterations > 1 else ends[0]


REFERENCE_CASES = {
    # colocate: (seed, ((workers, num_ps, iterations), ...))
    False: (31, ((2, 3, 1), (3, 2, 2))),
    True: (37, ((3, 3, 1), (3, 2, 2))),
}


@pytest.mark.parametrize("colocate", [False, True])
@pytest.mark.parametrize(
    ("mode", "interleave"),
    [
        ("fifo", True),
        ("fifo", False),
        ("network", True),
        ("network", False),
        ("end-host", True),
        ("ideal", True),
    ],
)
def test_the_event_driven_replay_matches_a_time_stepped_reference(mode, interleave, colocate):
    seed, cases = REFERENCE_CASES[colocate]
    rng = random.Random(seed)
    for workers, num_ps, iterations in cases:
        n = rng.randint(4, 6)
        p = synthetic(
            [4 * rng.randint(50, 300) for _ in range(n)],
            [rng.uniform(0.05, 0.3) for _ in range(n)],
            [rng.uniform(0.05, 0.3) for _ in range(n)],
        )
        want = time_stepped(p, workers, num_ps, 8000, mode, interleave, iterations, colocate=colocate)
        got = simulate(
            p,
            workers=workers,
            num_ps=num_ps,
            bandwidth_bps=8000,
            mode=mode,
            iterations=iterations,
            interleave=interleave,
            partition=False,
            symmetric=False,
            colocate=colocate,
        )
        # Steps of 1 ms delay each of the few dozen dependent events by at most one step.
        assert got.iteration_s == pytest.approx(want, abs=0.01)


# --- colocated parameter servers: PS i on worker i's host, as on the paper's testbed -------------------


def test_colocated_two_hosts_hand_computed():
    # 1000 B/s links; one 2000 B parameter in two 1000 B shards: part_0 on ps0 (host0), part_1 on ps1.
    # Colocated: worker0 has part_0 at once (its own host's PS, free); part_1 crosses host1's NIC and
    # the switch port to host0, alone on both (worker1's pull of part_0 goes the other way): 1 s.
    # Forward 1..2, backward 2..3; the push of part_0 is free, part_1 goes to host1 in 3..4. Both shards
    # are aggregated at 4, and each iteration repeats this: ends 4, 8, 12.
    # Separate hosts: worker0's port takes 2000 B of pulls, 1000 B from each PS: 2 s; forward 2..3,
    # backward 3..4, pushes 4..6: ends 6, 12, 18.
    p = synthetic([2000], [1.0], [1.0])
    for mode in MODES:
        for barrier in (False, True):
            kw = dict(
                workers=2,
                num_ps=2,
                bandwidth_bps=8000,
                mode=mode,
                iterations=3,
                barrier=barrier,
                endhost_gap_s=0,
            )
            co = simulate(p, colocate=True, **kw)
            sep = simulate(p, **kw)
            assert co.iteration_ends == pytest.approx((4.0, 8.0, 12.0))
            assert sep.iteration_ends == pytest.approx((6.0, 12.0, 18.0))
            assert co.iteration_s == pytest.approx(4.0)
            # N: the busiest port carries 1000 B of pulls, then 1000 B of pushes; separate: 2000 B each.
            assert co.comm_s == pytest.approx(2.0)
            assert sep.comm_s == pytest.approx(4.0)
            # Every port moves 1000 B of pulls and 1000 B of pushes per iteration; without the barrier
            # the pulls of a 4th iteration run too. The local halves move nothing anywhere.
            pulls = 3 if barrier else 4
            assert co.link_bytes == pytest.approx(
                {
                    port: 1000.0 * (3 + pulls)
                    for port in ("host0.nic", "switch->host0", "host1.nic", "switch->host1")
                }
            )
            # The two hosts hold alike shards (one 1000 B piece of the parameter each): one stands for both.
            assert co.symmetric is True and co.simulated_workers == 1
            assert co.colocate is True


def test_colocated_with_fewer_ps_than_workers_hand_computed():
    # Two hosts, one PS on host0; the 2000 B parameter is one shard on ps0. 1000 B/s links.
    # worker0's pull and push are local (free): forward 0..1, backward 1..2, push at 2. worker1 pulls
    # 2000 B over host0's NIC: 0..2, forward 2..3, backward 3..4, push over switch->host0 4..6.
    # The shard is aggregated at 6: ends 6, 12, 18. Separate hosts: ps0's NIC sends 2000 B to each
    # worker, 4000 B in 4 s; forward 4..5, backward 5..6, pushes share switch->ps0: 6..10; ends 10, 20.
    p = synthetic([2000], [1.0], [1.0])
    kw = dict(workers=2, num_ps=1, bandwidth_bps=8000, mode="network", iterations=3)
    co = simulate(p, colocate=True, **kw)
    assert co.iteration_ends == pytest.approx((6.0, 12.0, 18.0))
    assert simulate(p, **kw).iteration_ends == pytest.approx((10.0, 20.0, 30.0))
    # host0's NIC sends worker1 4 pulls (one more iteration's without the barrier) of 2000 B; its
    # switch port takes 3 pushes. host1 only has a worker.
    assert co.link_bytes == pytest.approx(
        {"host0.nic": 8000.0, "switch->host0": 6000.0, "host1.nic": 6000.0, "switch->host1": 8000.0}
    )
    # N: host0 sends 2000 B of pulls (W - 1 = 1 worker), host1 receives 2000 B: 2 s each way.
    assert co.comm_s == pytest.approx(4.0)


@pytest.mark.parametrize("barrier", [True, False])
@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_every_colocated_port_moves_exactly_its_hosts_remote_bytes(mode, interleave, barrier):
    p = random_profile(random.Random(41), layers=6)
    workers, iterations, slicing = 3, 2, 1500
    for num_ps in (2, 3):
        r = simulate(
            p,
            workers=workers,
            num_ps=num_ps,
            bandwidth_bps=1e7,
            mode=mode,
            slice_bytes=slicing,
            iterations=iterations,
            interleave=interleave,
            barrier=barrier,
            colocate=True,
        )
        held = plan_partitions([(q.name, q.shape, q.element_size) for q in p.params], num_ps, slicing)
        per_host = held.bytes_per_ps() + [0] * (workers - num_ps)
        total = sum(per_host)
        pulls = iterations + (0 if barrier else 1)
        expected = {}
        for h, b in enumerate(per_host):
            # Out: its PS's pulls to the other workers, its worker's pushes to the other PSes; in: the
            # reverse. What a worker moves to or from its own host's PS is on no port.
            expected[f"host{h}.nic"] = pulls * (workers - 1) * b + iterations * (total - b)
            expected[f"switch->host{h}"] = pulls * (total - b) + iterations * (workers - 1) * b
        assert r.link_bytes == pytest.approx(expected, rel=1e-9)


def test_colocated_ports_never_exceed_their_rate():
    # With the barrier each iteration's traffic lies between two iteration ends, so every interval is
    # at least what the busiest port moves per iteration at the link rate.
    rng = random.Random(43)
    for _ in range(6):
        p = random_profile(rng)
        workers = rng.randint(2, 5)
        num_ps = rng.randint(1, workers)
        for mode in MODES:
            r = simulate(
                p,
                workers=workers,
                num_ps=num_ps,
                bandwidth_bps=1e7,
                mode=mode,
                slice_bytes=2000,
                iterations=3,
                barrier=True,
                colocate=True,
            )
            cap = 1e7 / 8
            per_iteration = max(r.link_bytes.values()) / 3
            gaps = [b - a for a, b in itertools.pairwise((0.0, *r.iteration_ends))]
            assert min(gaps) >= per_iteration / cap * (1 - 1e-9)
            # N: the busiest port's pulls, then the busiest port's pushes.
            assert r.comm_s >= per_iteration / cap * (1 - 1e-9)


def test_colocation_loses_where_next_pulls_overlap_pushes_and_wins_where_they_alternate():
    # Layer 0: 1200 B, 0.5 s forward and backward; layer 1: 120000 B in 4000 B slices, instant.
    # 3 hosts, 1e5 B/s. Separate hosts, urgent first without the barrier: while worker0 computes
    # layer 0 backward, layer 1's gradient slices go out and, each once aggregated, come straight
    # back on the other direction of the link: about 121200 B / 1e5 B/s = 1.21 s per iteration.
    # Colocated, a host's NIC also sends its PS's third of every pull to the two other workers:
    # 2 * 121200 * 2/3 = 161600 B per iteration, 1.616 s at least, whatever the order.
    # With the barrier the phases alternate: separate hosts move 121200 B one way, then back (2.4 s),
    # colocated hosts 80800 B both ways in each phase (1.6 s).
    p = synthetic([1200, 120000], [0.5, 0.001], [0.5, 0.001])
    kw = dict(workers=3, num_ps=3, bandwidth_bps=8e5, slice_bytes=4000, iterations=3)
    for mode in ("end-host", "ideal"):
        sep = simulate(p, mode=mode, **kw).iteration_s
        co = simulate(p, mode=mode, colocate=True, **kw).iteration_s
        assert sep == pytest.approx(1.334, abs=0.01)
        assert co >= 1.616 * (1 - 1e-9)
        assert co > 1.2 * sep
    for mode in MODES:
        sep = simulate(p, mode=mode, barrier=True, **kw).iteration_s
        co = simulate(p, mode=mode, barrier=True, colocate=True, **kw).iteration_s
        assert sep >= 2.424 * (1 - 1e-9)
        assert co == pytest.approx(1.618, abs=0.01)


def test_ideal_beats_network_beats_fifo_on_colocated_hosts():
    rng = random.Random(47)
    gains = []
    for _ in range(12):
        p = priority_sensitive(rng)
        n = rng.randint(2, 6)
        kw = dict(
            workers=n,
            num_ps=n,
            bandwidth_bps=1e7,
            slice_bytes=2000,
            iterations=3,
            barrier=True,
            partition=False,
            colocate=True,
        )
        t = {mode: simulate(p, mode=mode, **kw).iteration_s for mode in MODES}
        assert t["ideal"] <= t["network"] * (1 + 1e-9)
        assert t["network"] <= t["fifo"] * (1 + 1e-9)
        gains.append(t["fifo"] / t["network"])
    assert sorted(gains)[len(gains) // 2] > 1.05


def test_colocate_simulates_every_worker_whatever_symmetric_says():
    p = random_profile(random.Random(53), layers=5)
    kw = dict(workers=4, num_ps=3, bandwidth_bps=1e7, mode="end-host", slice_bytes=1000, colocate=True)
    a = simulate(p, symmetric=True, **kw).to_dict()
    b = simulate(p, symmetric=False, **kw).to_dict()
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b
    assert a["symmetric"] is False
    assert a["colocate"] is True


@pytest.mark.parametrize("mode", MODES)
def test_colocated_trace_names_the_shared_hosts(mode):
    p = random_profile(random.Random(59), layers=4)
    workers, num_ps, iterations = 3, 2, 2
    r = simulate(
        p,
        workers=workers,
        num_ps=num_ps,
        bandwidth_bps=1e7,
        mode=mode,
        slice_bytes=1000,
        iterations=iterations,
        trace=True,
        colocate=True,
    )
    hosts = ["host0 (worker0+ps0)", "host1 (worker1+ps1)", "host2 (worker2)"]
    assert r.spans is not None
    assert {s.host for s in r.spans} == set(hosts)
    plan = plan_partitions([(q.name, q.shape, q.element_size) for q in p.params], num_ps, 1000)
    on_ps = [sum(1 for sh in plan.shards() if sh.ps_task == k) for k in range(num_ps)]
    pulls = [s for s in r.spans if s.category == "pull"]
    pushes = [s for s in r.spans if s.category == "push"]
    # Only transfers between hosts have spans: each shard goes to (from) the W - 1 other workers, and
    # without the barrier the pulls of one more iteration run.
    assert len(pulls) == (iterations + 1) * (workers - 1) * plan.total_shards
    assert len(pushes) == iterations * (workers - 1) * plan.total_shards
    for k, count in enumerate(on_ps):
        assert sum(1 for s in pulls if s.host == hosts[k]) == (iterations + 1) * (workers - 1) * count
    for h, host in enumerate(hosts):
        tracks = {s.track.split(" class ")[0] for s in r.spans if s.host == host and s.category != "forward"}
        assert f"to worker{h}" not in tracks and f"to ps{h}" not in tracks
        assert sum(1 for s in r.spans if s.host == host and s.category == "forward") == iterations * 4
    assert len(r.chrome_trace()["traceEvents"]) > len(r.spans)
