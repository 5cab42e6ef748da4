"""The arrival timeline's rows from real simulator traces of a hand-built profile with a known schedule.

Two layers, one worker, one PS at 1 MB/s (8 Mbit/s): `first/kernel` (4 KB, urgency 1, consumed first)
and `second/kernel` (100 KB, urgency 0.5). Fair sharing pulls both at once at 0.5 MB/s each: the urgent
one arrives at 8 ms. Strict priority sends it alone at 1 MB/s: 4 ms, and the bulk one starts then.
Either way the bulk one is done at 104 ms (the link never idles).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demo.sim_config import one_link

from geryon.demo.predict import ITERATIONS, PAYLOAD_FRACTION, arrival_timeline
from geryon.demo.timeline import arrivals
from geryon.threshold.profile import LayerSpec, ParamSpec, Profile
from geryon.threshold.simulator import simulate
from geryon.threshold.trace import spans_from_chrome_trace

MS = 1e-3


def two_layers() -> Profile:
    layers = (LayerSpec("first", 1 * MS, 1 * MS), LayerSpec("second", 1 * MS, 1 * MS))
    params = (
        ParamSpec("first/kernel", (1000,), 4, 1.0, 0),
        ParamSpec("second/kernel", (25000,), 4, 0.5, 1),
    )
    return Profile("two", 1, layers, params)


def run(mode: str, **kw: object):  # type: ignore[no-untyped-def]
    setting = {
        "workers": 1,
        "num_ps": 1,
        "bandwidth_bps": 8e6,
        "mode": mode,
        "thresholds": (0.75,),
        "iterations": 2,
        "trace": True,
        "barrier": True,
        "interleave": mode == "fifo",
    }
    return simulate(two_layers(), **{**setting, **kw})  # type: ignore[arg-type]


def test_priority_makes_the_urgent_parameter_arrive_earlier_than_fair_sharing() -> None:
    fair = arrivals(run("fifo").spans, two_layers())
    prio = arrivals(run("network").spans, two_layers())
    for rows in (fair, prio):
        assert [r["param"] for r in rows] == ["first/kernel", "second/kernel"]
        assert [r["layer_name"] for r in rows] == ["first", "second"]
        assert [r["bytes"] for r in rows] == [4000, 100_000]
    assert fair[0]["arrival_s"] == pytest.approx(8 * MS)
    assert prio[0]["arrival_s"] == pytest.approx(4 * MS)
    assert prio[0]["arrival_s"] < fair[0]["arrival_s"]
    # Both pulls start when the iteration does under fair sharing; under priority the bulk one waits.
    assert fair[0]["first_byte_s"] == fair[1]["first_byte_s"] == pytest.approx(0)
    assert prio[1]["first_byte_s"] == pytest.approx(4 * MS)
    assert fair[1]["arrival_s"] == pytest.approx(104 * MS) == prio[1]["arrival_s"]
    # Each layer starts its forward pass the moment its parameter is there (it waited for it).
    for rows in (fair, prio):
        assert [r["forward_start_s"] for r in rows] == pytest.approx([r["arrival_s"] for r in rows])
    assert [r["class"] for r in prio] == [0, 1]


def test_the_steady_iteration_is_timed_from_its_own_start() -> None:
    sim = run("network")
    assert sim.spans is not None
    last = arrivals(sim.spans, two_layers())  # the last iteration by default
    first = arrivals(sim.spans, two_layers(), iteration=0)
    assert sim.iteration_ends[0] > 0.1  # the second iteration starts well after t = 0
    for a, b in zip(first, last, strict=True):
        assert a["arrival_s"] == pytest.approx(b["arrival_s"])
        assert a["forward_start_s"] == pytest.approx(b["forward_start_s"])


def test_a_sliced_parameter_arrives_with_its_last_slice() -> None:
    sim = run("fifo", slice_bytes=25_000)
    assert sim.spans is not None
    rows = arrivals(sim.spans, two_layers())
    assert len(rows) == 2  # one row per parameter, not per slice
    slices = [s for s in sim.spans if s.category == "pull" and s.args["param"] == "second/kernel"]
    last_iteration = [s for s in slices if s.args["iteration"] == 1]
    assert len(last_iteration) == 4
    start = sim.iteration_ends[0]
    assert rows[1]["arrival_s"] == pytest.approx(max(s.end_s for s in last_iteration) - start)
    assert rows[1]["first_byte_s"] == pytest.approx(0)


def test_spans_without_this_worker_or_iteration_are_refused() -> None:
    with pytest.raises(ValueError, match="trace=True"):
        arrivals([], two_layers())
    sim = run("fifo")
    assert sim.spans is not None
    with pytest.raises(ValueError, match="iteration: expected one of \\[0, 1\\], got 5"):
        arrivals(sim.spans, two_layers(), iteration=5)
    with pytest.raises(ValueError, match="worker 3"):
        arrivals(sim.spans, two_layers(), worker=3)


def test_predict_timeline_simulates_ps_and_geryon_and_writes_geryons_trace(tmp_path: Path) -> None:
    config = one_link()
    runs = [{"mode": "geryon", "protocol": "grpc+geryon", "switch": "priority", "partitioned": True}]
    trace = tmp_path / "trace-geryon.json"
    t = arrival_timeline(two_layers(), config, runs, {"geryon": {"thresholds": [0.75]}}, trace)
    assert list(t["modes"]) == ["ps", "paper", "geryon"] and t["iteration"] == ITERATIONS - 1
    ps, geryon = t["modes"]["ps"], t["modes"]["geryon"]
    assert geryon["thresholds"] == [0.75] and ps["thresholds"] is None
    assert (ps["simulated"]["mode"], geryon["simulated"]["mode"]) == ("fifo", "network")
    # The paper's Geryon beside it at the same thresholds: the same classes, FIFO inside a class.
    paper = t["modes"]["paper"]
    assert paper["thresholds"] == [0.75] and paper["simulated"]["mode"] == "network"
    # With the barrier every iteration is alike: the hand-computed arrivals hold in the last one too.
    # P+S is gRPC, one transfer at a time per connection (predict.GRPC_INFLIGHT): the first kernel
    # (4 KB, its connection's first transfer) alone at 8 Mbit/s, then the second (100 KB).
    # Links carry tensors at their TCP payload rate (predict.PAYLOAD_FRACTION of 8 Mbit/s).
    assert ps["simulated"]["inflight"] == 1.0
    assert ps["simulated"]["bandwidth_bps"] == pytest.approx(8e6 * PAYLOAD_FRACTION)
    assert [r["arrival_s"] for r in ps["rows"]] == pytest.approx(
        [4 * MS / PAYLOAD_FRACTION, 104 * MS / PAYLOAD_FRACTION]
    )
    assert [r["arrival_s"] for r in geryon["rows"]] == pytest.approx(
        [4 * MS / PAYLOAD_FRACTION, 104 * MS / PAYLOAD_FRACTION]
    )
    # 104 KB of pulls, 2 ms of layer 1's compute, then 104 KB of gradients pushed.
    assert ps["iteration_s"] == pytest.approx(0.208 / PAYLOAD_FRACTION + 0.002) == geryon["iteration_s"]
    assert t["trace"] == str(trace)
    spans = spans_from_chrome_trace(json.loads(trace.read_text()))
    assert {s.category for s in spans} == {"forward", "backward", "pull", "push"}
    assert {s.args["iteration"] for s in spans} == set(range(ITERATIONS))
    assert {s.track for s in spans if s.category == "pull"} == {"to worker0 class 0", "to worker0 class 1"}


def _row(cls: int | None, arrival: float, moved: bool = True) -> dict:
    return {"class": cls, "arrival_s": arrival, "first_byte_s": 0.0 if moved else None}


def test_class_order_gives_each_class_its_arrival_order_and_tau() -> None:
    from geryon.demo.timeline import class_order

    rows = [_row(0, 0.1), _row(1, 0.9), _row(1, 0.5), _row(1, 0.7), _row(0, 0.2), _row(1, 0.0, moved=False)]
    order = class_order(rows)
    assert sorted(order) == [0, 1]
    assert order[0] == {"arrival_order": [0, 4], "tau": 1.0}
    # Class 1 (rows 1, 2, 3 consumed in that order) arrived 2, 3, 1: pairs (1,2) and (1,3) discordant,
    # (2,3) concordant -> (1 - 2) / 3. Row 5 never crossed the network and does not count.
    assert order[1]["arrival_order"] == [2, 3, 1]
    assert order[1]["tau"] == pytest.approx(-1 / 3)
    assert class_order([_row(0, 0.1), _row(0, 0.1)])[0]["tau"] == 0.0  # a tie is neither
    assert class_order([_row(0, 0.1)])[0]["tau"] is None
    assert class_order([_row(None, 0.1)]) == {}


def test_the_hybrid_serves_a_class_in_urgency_order() -> None:
    # Four parameters of one class (all below the threshold), consumed in layer order, sizes
    # decreasing so a transfer-size order would be the reverse. The hybrid sends the most urgent first.
    from geryon.demo.timeline import class_order

    layers = tuple(LayerSpec(f"l{i}", 1 * MS, 1 * MS) for i in range(4))
    params = tuple(ParamSpec(f"l{i}/kernel", (4000 * (4 - i),), 4, 0.5 - i * 0.1, i) for i in range(4))
    profile = Profile("four", 1, layers, params)
    setting = {"workers": 1, "num_ps": 1, "bandwidth_bps": 8e6, "thresholds": (0.75,), "iterations": 2}
    sim = simulate(profile, mode="hybrid", trace=True, barrier=True, interleave=False, **setting)
    assert sim.spans is not None
    order = class_order(arrivals(sim.spans, profile))
    assert list(order) == [1] and order[1]["arrival_order"] == [0, 1, 2, 3] and order[1]["tau"] == 1.0


def test_the_prediction_simulates_the_runs_background() -> None:
    # A run with background traffic on the workers' ports is predicted with it: end-host shares the
    # FIFO port with all of it; Geryon's urgent class stays ahead of it and only the least urgent
    # class shares its queue with it (the testbed's switch puts the background's DSCP there).
    from geryon.demo.predict import sim_args, sim_setting

    config = one_link()
    times = {}
    for bg in (0.0, 4e6):
        for mode in ("endhost", "paper"):
            setting = sim_setting(mode, [], [0.75], {**config, "background_bits": bg})
            assert setting["background_bps"] == bg
            times[mode, bg] = simulate(two_layers(), iterations=2, **sim_args(setting)).iteration_s
    assert times["endhost", 4e6] > 1.3 * times["endhost", 0.0]
    assert times["paper", 0.0] < times["paper", 4e6] < times["endhost", 4e6]
    assert sim_args(setting)["background"][0].queue == "lowest"
