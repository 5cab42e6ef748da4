"""The simulator's hybrid mode and its cost and traffic knobs: hand-computed cases, invariants, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from geryon.threshold.profile import synthetic
from geryon.threshold.simknobs import CHUNK_BYTES, ENDHOST_GAP_S, TF_INFLIGHT, Background, Incast, PsCosts
from geryon.threshold.simulator import MODES, simulate

# 8000 bit/s links move 1000 B/s: byte counts read as milliseconds x 1000.
SLOW = dict(workers=1, num_ps=1, bandwidth_bps=8000)


def push_end(result, layer: int) -> float:
    (span,) = [s for s in result.spans if s.category == "push" and s.args["layer"] == layer]
    return span.end_s


# --- hybrid: urgency order with chunk preemption inside a class -----------------------------------------


def test_hybrid_preempts_at_the_next_chunk_boundary_hand_computed():
    # Two layers in one class (threshold 0.25 < both urgencies), 4 KiB chunks. Pulls go urgent first:
    # 4096 B by 4.096 s, then 40960 B by 45.056 s. Backward of layer 1 (1 s) ends at 46.056 and its
    # push starts; backward of layer 0 (5 s) ends at 51.056 with 5000 B of layer 1's push sent. The
    # next boundary is 8192 B (54.248 s); layer 0's push then takes 4.096 s (ends 58.344) and layer 1's
    # last 32768 B end at 91.112. Immediate preemption (ideal) ends layer 0's push at 55.152, FIFO
    # inside the class (network without interleaving) at 91.112.
    p = synthetic([4096, 40960], [0.0, 0.0], [5.0, 1.0])
    kw = dict(**SLOW, thresholds=(0.25,), iterations=1, trace=True, chunk_bytes=4096)
    hybrid = simulate(p, mode="hybrid", push_order="urgency", **kw)  # pushes preempted like pulls
    ideal = simulate(p, mode="ideal", **kw)
    network = simulate(p, mode="network", interleave=False, **kw)
    assert {s.args["class"] for s in hybrid.spans if s.category in ("pull", "push")} == {0}
    assert push_end(hybrid, 0) == pytest.approx(58.344)
    assert push_end(hybrid, 1) == pytest.approx(91.112)
    assert push_end(ideal, 0) == pytest.approx(55.152)
    assert push_end(network, 0) == pytest.approx(91.112)
    for r in (hybrid, ideal, network):  # every mode keeps the link busy: the same last byte
        assert r.iteration_s == pytest.approx(91.112)


def test_hybrid_pushes_in_arrival_order_never_preempt_hand_computed():
    # The case above with push_order="arrival": pulls still go most urgent first, but layer 0's gradient
    # (ready at 51.056) waits for layer 1's whole push (46.056 + 40.96 = 87.016), then takes 4.096 s.
    p = synthetic([4096, 40960], [0.0, 0.0], [5.0, 1.0])
    kw = dict(**SLOW, thresholds=(0.25,), iterations=1, trace=True, chunk_bytes=4096)
    r = simulate(p, mode="hybrid", push_order="arrival", **kw)
    pulls = {s.args["layer"]: s.end_s for s in r.spans if s.category == "pull"}
    assert pulls == pytest.approx({0: 4.096, 1: 45.056})
    assert push_end(r, 1) == pytest.approx(87.016)
    assert push_end(r, 0) == pytest.approx(91.112)
    assert r.push_order == "arrival" and r.to_dict()["push_order"] == "arrival"
    assert simulate(p, mode="hybrid", **kw).push_order == "whole"  # the default, as the data plane


def test_hybrid_push_orders_hand_computed():
    # Three layers in one class, 4 KiB chunks. Pulls end at 4.096, 8.192, 49.152; backward (1 s each)
    # makes layer 2's gradient (40960 B) at 50.152, layer 1's at 51.152, layer 0's at 52.152.
    # urgency: layer 1 takes over at layer 2's next boundary (54.248); layer 0, now queued too, is more
    # urgent, so it goes first (58.344), then layer 1 (62.44), then layer 2's rest (99.304).
    # whole: layer 2's push finishes (91.112), then the most urgent, layer 0 (95.208), then layer 1.
    # arrival: layer 2, then layer 1 (ready first, 95.208), then layer 0 (99.304).
    p = synthetic([4096, 4096, 40960], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    kw = dict(**SLOW, mode="hybrid", thresholds=(0.25,), iterations=1, trace=True, chunk_bytes=4096)
    expect = {
        "urgency": {0: 58.344, 1: 62.44, 2: 99.304},
        "whole": {0: 95.208, 1: 99.304, 2: 91.112},
        "arrival": {0: 99.304, 1: 95.208, 2: 91.112},
    }
    for order, ends in expect.items():
        r = simulate(p, push_order=order, **kw)
        assert {layer: push_end(r, layer) for layer in ends} == pytest.approx(ends), order
        assert r.iteration_s == pytest.approx(99.304)


def test_hybrid_orders_inside_a_connection_only_and_connections_of_a_class_share_the_nic():
    # Whole variables on 2 PSes: layer 0 (4096 B) on ps0, layer 1 (40960 B) on ps1, one class. Pulls
    # share the worker's port: layer 0 by 8.192 s, layer 1 by 45.056. Backward: layer 1's push starts at
    # 46.056, layer 0's at 51.056 on another connection (to ps0): the data plane orders inside a
    # connection only, so the worker's NIC shares fairly between the two (500 B/s each): layer 0 ends
    # at 51.056 + 8.192 = 59.248, layer 1's last 31864 B at full rate by 91.112.
    p = synthetic([4096, 40960], [0.0, 0.0], [5.0, 1.0])
    kw = dict(workers=1, num_ps=2, bandwidth_bps=8000, partition=False, thresholds=(0.25,), iterations=1)
    r = simulate(p, mode="hybrid", trace=True, chunk_bytes=4096, sender_order="connection", **kw)
    assert push_end(r, 0) == pytest.approx(59.248)
    assert push_end(r, 1) == pytest.approx(91.112)
    assert r.sender_order == "connection"
    # One order per sending process (sender_order="host", the default as in the data plane) gives the
    # NIC to the most urgent connection: layer 0's push takes the whole link at 51.056, ends at 55.152.
    # The worker is the host's one sending process, so one order per NIC ("nic") is the same.
    host = simulate(p, mode="hybrid", trace=True, chunk_bytes=4096, **kw)
    assert push_end(host, 0) == pytest.approx(55.152)
    assert push_end(host, 1) == pytest.approx(91.112)
    assert host.to_dict()["sender_order"] == "host"
    nic = simulate(p, mode="hybrid", trace=True, chunk_bytes=4096, sender_order="nic", **kw)
    assert push_end(nic, 0) == push_end(host, 0) and push_end(nic, 1) == push_end(host, 1)


def pull_end(result, layer: int, iteration: int, worker: int) -> float:
    (span,) = [
        s
        for s in result.spans
        if s.category == "pull"
        and s.args["layer"] == layer
        and s.args["iteration"] == iteration
        and s.args["worker"] == worker
    ]
    return span.end_s


def test_co_hosted_pushes_and_pulls_keep_one_order_per_process_hand_computed():
    # Two co-hosted hosts, whole variables: layer 0 (4096 B) on ps0 (host 0), layer 1 (40960 B) on ps1
    # (host 1), one class; 1000 B/s links. Each host's NIC carries its PS's pulls and its worker's
    # pushes: two sending processes. Twice a pull and a push of different urgency meet on one NIC:
    # host 1's at 10.096 s (ps1's layer-1 pull to worker 0, since 0; worker 1's layer-0 push, after its
    # backward) and host 0's at 51.056 (worker 0's layer-1 push, since 46.056; ps0's iteration-1 pull of
    # layer 0 to worker 1, once worker 0's own layer-0 gradient is in).
    p = synthetic([4096, 40960], [0.0, 0.0], [5.0, 1.0])
    kw = dict(workers=2, num_ps=2, bandwidth_bps=8000, partition=False, thresholds=(0.25,), iterations=1)
    kw.update(colocate=True, trace=True, chunk_bytes=4096)
    # The data plane (sender_order="host", the default): each process keeps its own urgency order and
    # the NIC shares the two fairly (500 B/s each): the layer-0 push takes 8.192 s (ends 18.288), the
    # iteration-1 layer-0 pull too (ends 59.248); neither is held back by the other process's transfer.
    host = simulate(p, mode="hybrid", **kw)
    assert host.sender_order == "host"
    assert push_end(host, 0) == pytest.approx(18.288)
    assert pull_end(host, 0, 1, 1) == pytest.approx(59.248)
    assert push_end(host, 1) == pytest.approx(91.112)
    # One order per NIC (sender_order="nic") orders the two processes' transfers against each other:
    # layer 0 (rank 0) takes the whole NIC both times, 4.096 s each (14.192, 55.152).
    nic = simulate(p, mode="hybrid", sender_order="nic", **kw)
    assert push_end(nic, 0) == pytest.approx(14.192)
    assert pull_end(nic, 0, 1, 1) == pytest.approx(55.152)
    assert push_end(nic, 1) == pytest.approx(91.112)  # work-conserving: the big push ends as before
    # Per connection: the two connections of one class share the NIC, as the two processes do here.
    conn = simulate(p, mode="hybrid", sender_order="connection", **kw)
    assert push_end(conn, 0) == pytest.approx(18.288)
    assert pull_end(conn, 0, 1, 1) == pytest.approx(59.248)


def test_hybrid_keeps_strict_priority_between_classes_like_network():
    # Threshold 0.75 puts layer 0 alone in class 0: it never waits behind class 1 at any port.
    p = synthetic([4096, 40960], [0.0, 0.0], [5.0, 1.0])
    kw = dict(**SLOW, thresholds=(0.75,), iterations=1, trace=True, chunk_bytes=4096)
    hybrid = simulate(p, mode="hybrid", **kw)
    network = simulate(p, mode="network", **kw)
    # Layer 0's push is alone in its class, so it takes the link at once: 51.056 + 4.096.
    assert push_end(hybrid, 0) == pytest.approx(55.152)
    assert push_end(network, 0) == pytest.approx(55.152)


@pytest.mark.parametrize(
    ("push_order", "sender_order"),
    [
        ("urgency", "connection"),
        ("arrival", "connection"),
        ("whole", "connection"),
        ("whole", "host"),
        ("urgency", "nic"),
    ],
)
def test_hybrid_is_never_slower_than_network_without_interleaving_and_bounded_by_ideal(
    push_order, sender_order
):
    rng = random.Random(11)
    for _ in range(30):
        n = rng.randint(2, 6)
        p = synthetic(
            [4 * rng.randint(500, 20000) for _ in range(n)],
            [rng.uniform(1e-4, 3e-3) for _ in range(n)],
            [rng.uniform(1e-4, 5e-3) for _ in range(n)],
        )
        kw = dict(
            workers=rng.choice([1, 2, 4]),
            num_ps=rng.choice([1, 2]),
            bandwidth_bps=rng.choice([1e7, 1e8]),
            thresholds=(rng.choice([0.3, 0.5, 0.9]),),
            chunk_bytes=4096,
            barrier=True,
            iterations=2,
        )
        hybrid = simulate(p, mode="hybrid", push_order=push_order, sender_order=sender_order, **kw)
        n_, c = hybrid.comm_s, hybrid.compute_s
        assert max(n_, c) * (1 - 1e-9) <= hybrid.first_iteration_s <= (n_ + c) * (1 + 1e-9)
        assert max(n_, c) * (1 - 1e-9) <= hybrid.iteration_s <= (n_ + c) * (1 + 1e-9)


def test_hybrid_moves_exactly_the_bytes_of_the_plan_and_chunks_bound_the_events():
    p = synthetic([400_000, 800_000, 4_000_000], [1e-3, 1e-3, 1e-3], [2e-3, 2e-3, 2e-3])
    r = simulate(p, workers=4, num_ps=2, bandwidth_bps=1e9, mode="hybrid", iterations=3, symmetric=False)
    total = p.total_bytes * 4 * 3
    assert sum(v for k, v in r.link_bytes.items() if k.endswith(".nic")) == pytest.approx(2 * total)
    assert r.chunk_bytes == CHUNK_BYTES


# --- end-host: its per-transfer cost ---------------------------------------------------------------------


def test_end_host_waits_its_gap_before_every_transfer_hand_computed():
    # Two 1000 B layers, no compute: each pull waits 0.5 s then moves in 1 s (3.0); each push the same
    # on the worker's connection: 4.5 and 6.0.
    p = synthetic([1000, 1000], [0.0, 0.0], [0.0, 0.0])
    r = simulate(p, **SLOW, mode="end-host", iterations=1, endhost_gap_s=0.5)
    assert r.iteration_s == pytest.approx(6.0)
    assert simulate(p, **SLOW, mode="end-host", iterations=1, endhost_gap_s=0).iteration_s == pytest.approx(
        4.0
    )
    assert r.endhost_gap_s == 0.5
    assert ENDHOST_GAP_S == 300e-6  # ByteScheduler Sec. 4.1, cited in simknobs
    # Only end-host pays it.
    for mode in ("fifo", "network", "hybrid", "ideal"):
        assert simulate(p, **SLOW, mode=mode, iterations=1, endhost_gap_s=0.5).iteration_s == pytest.approx(
            4.0
        )


GAP_SETTINGS = [
    dict(workers=16, num_ps=4),  # representative, more workers than PSes: the quiet case
    dict(workers=16, num_ps=4, slice_bytes=64 << 10, barrier=True),
    dict(workers=2, num_ps=4),  # the worker's ports fill: every gap re-allocates
    dict(workers=4, num_ps=2, symmetric=False),
    dict(workers=4, num_ps=3, colocate=True),
    dict(workers=8, num_ps=2, partition=False),
    dict(workers=8, num_ps=2, background=(Background(3e8, hosts="all", direction="both"),)),
]


def off_and_on(monkeypatch, switch, run):
    """`run()` with the simulator's `Rates.<switch>` off, then on: [(result, network.allocate calls)]."""
    import geryon.threshold.sim_rates as rates

    calls = {"n": 0}
    allocate = rates.allocate

    def counted(*args, **kwargs):
        calls["n"] += 1
        return allocate(*args, **kwargs)

    monkeypatch.setattr(rates, "allocate", counted)
    runs = []
    for on in (False, True):
        monkeypatch.setattr(rates.Rates, switch, on)
        calls["n"] = 0
        runs.append((run(), calls["n"]))
    return runs


@pytest.mark.parametrize("setting", GAP_SETTINGS)
def test_end_host_gaps_without_reallocation_match_the_full_path(monkeypatch, setting):
    # A transfer's gap leaves the allocation alone where its coming and going moves no other rate
    # (sim_rates.Rates._quiet_rate); the result must equal re-allocating at every gap, span by span.

    p = synthetic(
        [300_000, 40_000, 2_500_000, 800_000, 120_000],
        [2e-3, 1e-3, 4e-3, 1e-3, 5e-4],
        [3e-3, 2e-3, 6e-3, 2e-3, 1e-3],
    )
    kw = dict(bandwidth_bps=1e9, mode="end-host", iterations=3, trace=True, endhost_gap_s=2e-4, **setting)
    (full, full_calls), (quiet_run, quiet_calls) = off_and_on(
        monkeypatch, "quiet_gaps", lambda: simulate(p, **kw)
    )
    assert quiet_run.iteration_ends == pytest.approx(full.iteration_ends, rel=1e-9)
    assert quiet_run.link_bytes == pytest.approx(full.link_bytes, rel=1e-9)

    def key(s):
        return (s.host, s.track, s.name, s.args["iteration"])

    a, b = sorted(full.spans, key=key), sorted(quiet_run.spans, key=key)
    assert [key(s) for s in a] == [key(s) for s in b]
    assert [s.start_s for s in b] == pytest.approx([s.start_s for s in a], rel=1e-9)
    assert [s.end_s for s in b] == pytest.approx([s.end_s for s in a], rel=1e-9)
    assert quiet_calls <= full_calls
    if setting == GAP_SETTINGS[0]:
        assert quiet_calls < full_calls / 10  # the case it is for: PS ports are one flow's each


def test_smaller_slices_cost_end_host_more():
    p = synthetic([4_000_000, 4_000_000], [1e-3, 1e-3], [1e-3, 1e-3])
    kw = dict(workers=2, num_ps=2, bandwidth_bps=1e10, mode="end-host")
    coarse = simulate(p, slice_bytes=1 << 20, **kw).iteration_s
    fine = simulate(p, slice_bytes=64 << 10, **kw).iteration_s
    free_fine = simulate(p, slice_bytes=64 << 10, endhost_gap_s=0, **kw).iteration_s
    assert fine > coarse and fine > free_fine


# --- PS costs ----------------------------------------------------------------------------------------------


def test_ps_update_and_per_message_costs_hand_computed():
    # 1000 B, 1 s forward and backward: pull 0..1, forward 1..2, backward 2..3, push 3..4, then the
    # update (1000 B x 1e-3 s/B = 1 s) ends the iteration at 5. Two workers add a second gradient to
    # aggregate: 1000 x (2 x 0.5e-3 + 1e-3) = 2 s of PS work, and each 1000 B now takes 2 s (the PS
    # link is shared): 2 + 1 + 1 + 2 + 2 = 8. A per-message cost of 0.25 s delays the pull and the push.
    p = synthetic([1000], [1.0], [1.0])
    upd = PsCosts(update_s_per_byte=1e-3)
    assert simulate(p, **SLOW, mode="fifo", iterations=1, ps_costs=upd).iteration_s == pytest.approx(5.0)
    both = PsCosts(aggregate_s_per_byte=0.5e-3, update_s_per_byte=1e-3)
    two = dict(SLOW, workers=2)
    for symmetric in (True, False):
        r = simulate(p, **two, mode="fifo", iterations=1, ps_costs=both, symmetric=symmetric)
        assert r.iteration_s == pytest.approx(8.0)
    msg = PsCosts(update_s_per_byte=1e-3, per_message_s=0.25)
    assert simulate(p, **SLOW, mode="fifo", iterations=1, ps_costs=msg).iteration_s == pytest.approx(5.5)
    # per_slice_s applies only to pieces of a sliced parameter: 4 slices of 250 B here.
    sl = PsCosts(per_slice_s=0.25)
    whole = simulate(p, **SLOW, mode="fifo", iterations=1, ps_costs=sl).iteration_s
    sliced = simulate(p, **SLOW, mode="fifo", iterations=1, ps_costs=sl, slice_bytes=250).iteration_s
    assert whole == pytest.approx(4.0) and sliced > 4.0


def test_ps_updates_are_serial_per_ps_and_steady_state_pays_them():
    p = synthetic([1000, 1000], [0.0, 0.0], [0.0, 0.0])
    costs = PsCosts(update_s_per_byte=1e-3)
    # Both gradients reach the one PS; its two 1 s updates run one after the other.
    r = simulate(p, **SLOW, mode="ideal", iterations=3, barrier=True, ps_costs=costs)
    free = simulate(p, **SLOW, mode="ideal", iterations=3, barrier=True)
    assert r.iteration_s >= free.iteration_s + 1.0 - 1e-9


def test_ps_costs_load_and_bad_values_name_the_key(tmp_path: Path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"aggregate_s_per_byte": 1e-10, "per_message_s": 5e-5}))
    assert PsCosts.load(str(path)) == PsCosts(aggregate_s_per_byte=1e-10, per_message_s=5e-5)
    with pytest.raises(ValueError, match=r"ps_costs\.update_s_per_byte: expected a finite number"):
        PsCosts(update_s_per_byte=float("nan"))
    with pytest.raises(ValueError, match="unknown key 'update'"):
        PsCosts.from_dict({"update": 1.0})
    assert PsCosts().free and not PsCosts(per_slice_s=1e-6).free
    # bench/bench_ps_costs.py's calibration document loads too; its loopback rate is no PS cost.
    doc = {
        "format": "geryon.ps-costs",
        "version": 1,
        "knobs": {
            "aggregate_s_per_byte": 1e-10,
            "update_s_per_byte": 2e-10,
            "per_message_s": 1e-4,
            "per_slice_s": 2e-4,
            "loopback_s_per_byte": 1e-9,
        },
        "meta": {},
    }
    path.write_text(json.dumps(doc))
    assert PsCosts.load(str(path)) == PsCosts(1e-10, 2e-10, 1e-4, 2e-4)


# --- TensorFlow's transfer order ----------------------------------------------------------------------------


def test_a_tf_window_serves_that_many_at_once_in_a_seeded_random_order():
    # Ten 1000 B layers, all pulls ready at once: with a window of 1 they go one at a time in a random
    # order (so the first forward waits a random number of seconds), the same for the same seed.
    p = synthetic([1000] * 10, [0.01] * 10, [0.01] * 10)
    kw = dict(**SLOW, mode="fifo", iterations=1, trace=True)
    orders = set()
    for seed in range(6):
        r = simulate(p, inflight=1, seed=seed, **kw)
        pulls = sorted((s.start_s, s.args["layer"]) for s in r.spans if s.category == "pull")
        ends = sorted(s.end_s for s in r.spans if s.category == "pull")
        assert ends == pytest.approx([float(i) for i in range(1, 11)])  # one at a time, line rate
        orders.add(tuple(layer for _, layer in pulls))
        again = simulate(p, inflight=1, seed=seed, **kw)
        assert again.iteration_s == r.iteration_s
    assert len(orders) > 1
    # A window at least as wide as the pending transfers is fair sharing, the order does not matter.
    fair = simulate(p, inflight=None, **kw).iteration_s
    assert simulate(p, inflight=10, seed=3, **kw).iteration_s == pytest.approx(fair)
    assert TF_INFLIGHT == 3.5


def test_a_tf_window_keeps_the_invariants():
    rng = random.Random(5)
    for _ in range(20):
        n = rng.randint(3, 12)
        p = synthetic(
            [4 * rng.randint(50, 4000) for _ in range(n)],
            [rng.uniform(1e-4, 3e-3) for _ in range(n)],
            [rng.uniform(1e-4, 5e-3) for _ in range(n)],
        )
        for mode in ("fifo", "network"):
            r = simulate(
                p,
                workers=1,
                num_ps=1,
                bandwidth_bps=1e7,
                mode=mode,
                inflight=rng.choice([1, 2.5, 9.5]),
                seed=rng.randint(0, 99),
                barrier=True,
                iterations=3,
            )
            assert max(r.comm_s, r.compute_s) * (1 - 1e-9) <= r.iteration_s
            assert r.iteration_s <= (r.comm_s + r.compute_s) * (1 + 1e-9)


# --- background traffic -------------------------------------------------------------------------------------


def test_background_shares_fairly_without_priorities_and_yields_to_training_with_them():
    # 1000 B pull with 500 B/s of background into the worker: a fifo port shares 500/500, the pull
    # takes 2 s; priority ports serve training first: 1 s. Pushes leave the worker: untouched.
    p = synthetic([1000], [0.0], [0.0])
    bg = (Background(4000, "workers", "in"),)
    t = {
        m: simulate(p, **SLOW, mode=m, iterations=1, background=bg, endhost_gap_s=0).iteration_s
        for m in MODES
    }
    assert t["fifo"] == pytest.approx(3.0) and t["end-host"] == pytest.approx(3.0)
    assert (
        t["network"] == pytest.approx(2.0)
        and t["hybrid"] == pytest.approx(2.0)
        and t["ideal"] == pytest.approx(2.0)
    )
    out = (Background(4000, "workers", "out"),)
    assert simulate(p, **SLOW, mode="fifo", iterations=1, background=out).iteration_s == pytest.approx(3.0)
    both = (Background(4000, "all", "both"),)
    r = simulate(p, **SLOW, mode="fifo", iterations=1, background=both)
    assert r.iteration_s == pytest.approx(4.0)
    assert r.to_dict()["background"] == [
        {"rate_bps": 4000.0, "hosts": "all", "direction": "both", "queue": "below"}
    ]


def test_background_bytes_report_its_simulated_share_hand_computed():
    # The same 1000 B pull, 500 B/s of background into the worker (8000 bit/s links: 1000 B/s).
    # fifo: 500 B/s during the 2 s pull, then its full 500 B/s during the 1 s push: 1500 B over 3 s.
    # network: nothing during the 1 s pull (training first), 500 B/s during the push: 500 B over 2 s.
    p = synthetic([1000], [0.0], [0.0])
    bg = (Background(4000, "workers", "in"),)
    fifo = simulate(p, **SLOW, mode="fifo", iterations=1, background=bg)
    assert fifo.background_bytes == {"switch->worker0": pytest.approx(1500.0)}
    net = simulate(p, **SLOW, mode="network", iterations=1, background=bg)
    assert net.background_bytes == {"switch->worker0": pytest.approx(500.0)}
    # Out of the worker's NIC it meets the push instead: 500 B in the pull's 1 s, 1000 B in the push's 2 s.
    out = simulate(p, **SLOW, mode="fifo", iterations=1, background=(Background(4000, "workers", "out"),))
    assert out.background_bytes == {"worker0.nic": pytest.approx(1500.0)}
    assert out.to_dict()["background_bytes"] == {"worker0.nic": pytest.approx(1500.0)}
    assert simulate(p, **SLOW, mode="fifo", iterations=1).background_bytes == {}


def test_background_in_the_lowest_class_shares_its_queue_hand_computed():
    # Two classes (threshold 0.75): an urgent 1000 B pull (class 0) and a 1000 B pull of low urgency
    # (class 1) into the worker's port at 1000 B/s, with 500 B/s of background. Below every class the
    # background waits: 1 s + 1 s. In class 1's queue it takes half the port while the low pull is
    # there: urgent 1 s, then the low pull at 500 B/s, 2 s. Priority between classes holds either way.
    p = synthetic([1000, 1000], [0.0, 0.0], [0.0, 0.0])  # urgency 1.0 and 0.5
    for mode in ("network", "hybrid"):
        t = {
            q: simulate(
                p,
                **SLOW,
                mode=mode,
                iterations=1,
                thresholds=(0.75,),
                background=(Background(4000, queue=q),),
            ).iteration_s
            for q in ("below", "lowest")
        }
        assert t["lowest"] - t["below"] == pytest.approx(1.0), (mode, t)


def test_background_on_ps_links_agrees_between_representative_and_every_worker():
    p = synthetic([40_000, 80_000], [1e-3, 1e-3], [2e-3, 2e-3])
    bg = (Background(2e6, "ps", "both"),)
    for mode in MODES:
        kw = dict(workers=4, num_ps=2, bandwidth_bps=1e7, mode=mode, background=bg, iterations=2)
        rep = simulate(p, symmetric=True, **kw)
        every = simulate(p, symmetric=False, **kw)
        assert rep.iteration_s == pytest.approx(every.iteration_s, rel=1e-9), mode
        # A representative's PS port stands for every worker's share of it, as in link_bytes.
        assert rep.background_bytes == pytest.approx(every.background_bytes, rel=1e-9), mode


# --- incast: a switch port's share of its rate with >= 2 senders -----------------------------------------


def test_incast_slows_only_ports_with_two_senders_hand_computed():
    # 1000 B, no compute, 1000 B/s links. Two workers, one PS: the PS NIC sends each worker 500 B/s
    # (2 s, each worker port has one sender: untouched); both pushes meet at the PS port, each worker
    # sending nowhere else ("alone"): at half its rate, 2000 B take 4 s. "shared" does not apply there.
    p = synthetic([1000], [0.0], [0.0])
    two = dict(SLOW, workers=2, mode="fifo", iterations=1)
    for symmetric in (True, False):
        assert simulate(p, **two, symmetric=symmetric).iteration_s == pytest.approx(4.0)
        r = simulate(p, **two, symmetric=symmetric, incast=Incast(alone=0.5))
        assert r.iteration_s == pytest.approx(6.0)
        assert r.to_dict()["incast"] == {"alone": 0.5, "shared": 1.0}
        assert simulate(
            p, **two, symmetric=symmetric, incast=Incast(shared=0.5)
        ).iteration_s == pytest.approx(4.0)
    # One worker, one PS: no port has two senders.
    assert simulate(
        p, **SLOW, mode="fifo", iterations=1, incast=Incast(0.5, 0.5)
    ).iteration_s == pytest.approx(2.0)


def test_incast_shared_where_senders_also_send_elsewhere_hand_computed():
    # Two 1000 B layers, one on each of 2 PSes (no partitioning), 2 workers: every PS NIC sends to both
    # workers and every worker NIC to both PSes, so every switch port has 2 senders that share their
    # NICs ("shared"). At 0.8 a port carries 800 B/s, 400 per flow: 2.5 s of pulls, 2.5 s of pushes.
    p = synthetic([1000, 1000], [0.0, 0.0], [0.0, 0.0])
    kw = dict(workers=2, num_ps=2, bandwidth_bps=8000, mode="fifo", iterations=1, partition=False)
    for symmetric in (True, False):
        assert simulate(p, **kw, symmetric=symmetric).iteration_s == pytest.approx(4.0)
        got = simulate(p, **kw, symmetric=symmetric, incast=Incast(alone=1.0, shared=0.8))
        assert got.iteration_s == pytest.approx(5.0)
        assert simulate(p, **kw, symmetric=symmetric, incast=Incast(alone=0.8)).iteration_s == pytest.approx(
            4.0
        )
    # One worker pulling from 2 PSes that send nowhere else: its port's senders are "alone".
    one = dict(kw, workers=1)
    assert simulate(p, **one, incast=Incast(shared=0.5)).iteration_s == pytest.approx(4.0)
    assert simulate(p, **one, incast=Incast(alone=0.5)).iteration_s == pytest.approx(6.0)


def test_incast_agrees_between_representative_and_every_worker_in_every_mode():
    p = synthetic([40_000, 80_000, 8_000], [1e-3, 2e-3, 1e-3], [2e-3, 2e-3, 1e-3])
    inc = Incast(alone=0.9, shared=0.7)
    for mode in MODES:
        kw = dict(workers=3, num_ps=2, bandwidth_bps=1e7, mode=mode, iterations=3, barrier=True, incast=inc)
        kw["background"] = (Background(2e6, "workers", "in"),)
        rep = simulate(p, symmetric=True, **kw).iteration_s
        every = simulate(p, symmetric=False, **kw).iteration_s
        assert rep == pytest.approx(every, rel=1e-9), mode
        assert rep > simulate(p, **{**kw, "incast": None}).iteration_s, mode


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alone": 0}, r"incast\.alone: expected a share of the port's rate in \(0, 1\], got 0"),
        ({"shared": 1.2}, r"incast\.shared: expected a share of the port's rate in \(0, 1\], got 1\.2"),
        ({"shared": True}, r"incast\.shared"),
    ],
)
def test_bad_incast_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Incast(**kwargs)


def test_incast_is_refused_co_hosted_and_must_be_an_incast():
    p = synthetic([1000], [0.0], [0.0])
    with pytest.raises(ValueError, match="incast: not modelled with colocate=True"):
        simulate(p, **dict(SLOW, workers=2), mode="fifo", colocate=True, incast=Incast(shared=0.5))
    with pytest.raises(ValueError, match="incast: expected an Incast"):
        simulate(p, **SLOW, mode="fifo", incast=0.5)  # type: ignore[arg-type]
    # The default is the fluid model, co-hosted too.
    assert simulate(p, **dict(SLOW, workers=2), mode="fifo", colocate=True, incast=Incast()).iteration_s > 0


# --- bad input ---------------------------------------------------------------------------------------------

P = synthetic([400, 400], [1e-3, 1e-3], [1e-3, 1e-3])
OK = dict(workers=2, num_ps=2, bandwidth_bps=1e9, mode="hybrid")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chunk_bytes": 1024}, r"chunk_bytes: expected an integer number of bytes in \[4096, 1073741824\]"),
        ({"chunk_bytes": 4096.0}, "chunk_bytes"),
        ({"endhost_gap_s": -1}, "endhost_gap_s: expected a finite number of seconds >= 0"),
        ({"inflight": 0.5}, "inflight: expected None or a number of transfers >= 1"),
        ({"seed": "x"}, "seed: expected an integer"),
        ({"push_order": "lifo"}, "push_order: unknown push order 'lifo'; allowed: urgency, arrival, whole"),
        (
            {"sender_order": "process"},
            "sender_order: unknown sender order 'process'; allowed: host, nic, connection",
        ),
        ({"ps_costs": {"per_message_s": 1}}, "ps_costs: expected a PsCosts"),
        ({"background": ["5gbit"]}, "background: expected Background entries"),
    ],
)
def test_bad_knobs_name_the_argument(change, message):
    with pytest.raises(ValueError, match=message):
        simulate(P, **{**OK, **change})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_bps": 0}, "background.rate_bps"),
        ({"rate_bps": 1e9, "hosts": "racks"}, "background.hosts: unknown 'racks'; allowed: workers, ps, all"),
        ({"rate_bps": 1e9, "direction": "up"}, "background.direction: unknown 'up'; allowed: in, out, both"),
        ({"rate_bps": 1e9, "queue": "top"}, "background.queue: unknown 'top'; allowed: below, lowest"),
    ],
)
def test_bad_background_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Background(**kwargs)


# --- cohost_fast: two hosts standing for a co-hosted cluster ------------------------------------------------


def test_cohost_fast_moves_the_bytes_each_host_moves_and_stays_small():
    p = synthetic([40_000, 80_000, 400_000], [1e-3, 1e-3, 1e-3], [2e-3, 2e-3, 2e-3])
    total = p.total_bytes
    for mode in MODES:
        r = simulate(
            p,
            workers=12,
            num_ps=4,
            bandwidth_bps=1e9,
            mode=mode,
            colocate=True,
            cohost_fast=True,
            barrier=True,
        )
        assert r.cohost_fast and r.symmetric and r.to_dict()["cohost_fast"]
        it = r.iterations
        # The worker-only host pulls and pushes the whole model each iteration on its own ports.
        assert r.link_bytes["switch->host4"] == pytest.approx(total * it)
        assert r.link_bytes["host4.nic"] == pytest.approx(total * it)
        # Host 0's NIC: its worker's pushes to the 3 other PSes ((P-1)/P of the model), PS 0's pulls to the
        # 3 other co-hosted workers (the same, by the mirror) and to the 8 worker-only hosts (8/4 models).
        assert r.link_bytes["host0.nic"] == pytest.approx(total * it * (3 / 4 + 3 / 4 + 8 / 4))
        assert max(r.compute_s, r.comm_s / 2) * (1 - 1e-9) <= r.iteration_s


def test_cohost_fast_with_one_ps_keeps_the_co_hosted_workers_transfers_at_home():
    p = synthetic([1000], [1.0], [1.0])
    one = simulate(p, workers=1, num_ps=1, bandwidth_bps=8000, mode="fifo", colocate=True, cohost_fast=True)
    assert one.iteration_s == pytest.approx(p.compute_s)
    # Three workers on hosts of their own pull 1000 B each from PS 0's one link: 3 s, as the exact path.
    kw = dict(workers=4, num_ps=1, bandwidth_bps=8000, mode="fifo", colocate=True, iterations=1)
    fast = simulate(p, cohost_fast=True, **kw)
    exact = simulate(p, **kw)
    assert fast.iteration_s == pytest.approx(exact.iteration_s)


def test_cohost_fast_takes_a_thousand_hosts_in_few_events():
    p = synthetic([4 * 100_000] * 16, [1e-3] * 16, [2e-3] * 16)
    r = simulate(
        p, workers=1024, num_ps=64, bandwidth_bps=1e10, mode="hybrid", colocate=True, cohost_fast=True
    )
    assert r.events <= r.iterations * (2 * 2 * r.shards + 2 * 2 * p.num_layers) * 4


# --- end-host's stop-and-wait per sender --------------------------------------------------------------------


def test_endhost_per_sender_sends_one_transfer_at_a_time_hand_computed():
    # 1000 B/s links, one 1000 B parameter on one PS, two workers, a 0.5 s gap. Per connection both pulls
    # wait 0.5 s and share the PS's NIC (done at 2.5); forward 2.5..3.5, backward 3.5..4.5, both pushes
    # wait 0.5 s and share the PS's port: 7.0. Per sender the PS sends worker0's pull 0.5..1.5, then after
    # its gap worker1's 2.0..3.0; worker0 pushes 4.0..5.0 (its own sender, after its gap), worker1
    # 5.5..6.5: 6.5.
    p = synthetic([1000], [1.0], [1.0])
    kw = dict(workers=2, num_ps=1, bandwidth_bps=8000, mode="end-host", iterations=1, endhost_gap_s=0.5)
    conn = simulate(p, trace=True, **kw)
    sender = simulate(p, trace=True, endhost_scope="sender", **kw)
    assert conn.iteration_ends == pytest.approx((7.0,))
    assert sender.iteration_ends == pytest.approx((6.5,))
    transfers = sorted(
        (s.category, s.args["worker"], s.start_s, s.end_s)
        for s in sender.spans
        if s.category in ("pull", "push")
    )
    want = [("pull", 0, 0.5, 1.5), ("pull", 1, 2.0, 3.0), ("push", 0, 4.0, 5.0), ("push", 1, 5.5, 6.5)]
    assert [x[:2] for x in transfers] == [x[:2] for x in want]
    assert [x[2:] for x in transfers] == [pytest.approx(x[2:]) for x in want]
    assert conn.endhost_scope == "connection" and sender.to_dict()["endhost_scope"] == "sender"
    # Its senders treat workers unequally, so every worker is simulated, whatever symmetric says.
    assert conn.symmetric and not sender.symmetric


@pytest.mark.parametrize("colocate", [False, True])
def test_endhost_per_sender_keeps_the_invariants(colocate):
    p = synthetic([40_000, 80_000, 400_000], [1e-3, 2e-3, 1e-3], [2e-3, 2e-3, 1e-3])
    for barrier in (False, True):
        r = simulate(
            p,
            workers=4,
            num_ps=3,
            bandwidth_bps=1e9,
            mode="end-host",
            slice_bytes=20_000,
            barrier=barrier,
            colocate=colocate,
            endhost_scope="sender",
        )
        # Every transfer of a sender waits its gap one after another: at most shards x workers gaps per
        # sender and phase on top of N + C.
        gaps = r.shards * r.workers * ENDHOST_GAP_S
        assert r.iteration_s <= r.comm_s + r.compute_s + 2 * gaps
        if barrier:
            assert max(r.comm_s, r.compute_s) * (1 - 1e-9) <= r.iteration_s


def test_endhost_scope_bad_values_name_the_field():
    p = synthetic([1000], [1.0], [1.0])
    with pytest.raises(ValueError, match=r"endhost_scope: unknown scope 'host'; allowed: connection, sender"):
        simulate(p, **SLOW, mode="end-host", endhost_scope="host")
    with pytest.raises(ValueError, match="cohost_fast: not with endhost_scope='sender'"):
        simulate(p, **SLOW, mode="end-host", endhost_scope="sender", colocate=True, cohost_fast=True)
