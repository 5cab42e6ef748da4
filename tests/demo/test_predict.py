"""The simulator's prediction for a demo run: a real profile of a real (tiny) model measured here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demo.sim_config import one_link
from demo_results import result

from geryon.demo.predict import (
    GRPC_INFLIGHT,
    INCAST_OFF,
    INCAST_UNMEASURED,
    ITERATIONS,
    ORDER_SEEDS,
    PAYLOAD_FRACTION,
    IncastError,
    PredictError,
    load_incast,
    predict,
    profile_key,
    relative_error,
    resolve_incast,
    sim_args,
    sim_setting,
    simulate_setting,
)
from geryon.demo.report import prediction_notes
from geryon.progress import Progress
from geryon.threshold.profile import LayerSpec, ParamSpec, Profile
from geryon.threshold.simknobs import Incast
from geryon.threshold.simulator import simulate

pytest.importorskip("tensorflow")

# A comm-bound setting for the tiny model (142 KB of parameters, a few ms of compute): 20 Mbit/s.
STEPS = {
    "vanilla": [0.2, 0.22],
    "ps": [0.12, 0.12],
    "geryon": [0.1, 0.11],
    "endhost": [0.105],
    "single": [0.06],
}


def tiny() -> dict:
    return result(STEPS, model="tiny", input_shape=(16, 16, 3), batch=8, rate_bits=20e6)


def quiet() -> Progress:
    return Progress("test", enabled=False)


def test_relative_error() -> None:
    assert relative_error(1.0, 0.9) == pytest.approx(0.1)
    assert relative_error(0.5, 0.6) == pytest.approx(-0.2)  # faster than predicted: negative
    assert relative_error(None, 0.5) is None
    assert relative_error(0.0, 0.5) is None


def test_each_mode_maps_onto_the_simulator() -> None:
    res = tiny()
    config = {**res["config"], "ps": 2, "classes": 2}
    runs = {m: [r for r in res["runs"] if r["mode"] == m] for m in STEPS}
    vanilla = sim_setting("vanilla", runs["vanilla"], None, config)
    assert (vanilla["mode"], vanilla["partition"], vanilla["slice_bytes"], vanilla["interleave"]) == (
        "fifo",
        False,
        None,
        True,
    )
    ps = sim_setting("ps", runs["ps"], None, config)
    assert (ps["mode"], ps["partition"], ps["slice_bytes"], ps["workers"]) == ("fifo", True, 1048576, 2)
    # A run that did not record its data plane's order maps to network (arrival order): one transfer
    # at a time per connection in TF's random request order, as gRPC.
    geryon = sim_setting("geryon", runs["geryon"], [0.3], config)
    assert (geryon["mode"], geryon["thresholds"], geryon["interleave"]) == ("network", (0.3,), True)
    ordered = sim_setting(
        "geryon", [{**runs["geryon"][0], "order": "urgency", "ordering_available": True}], [0.3], config
    )
    assert (ordered["mode"], ordered["interleave"], ordered["inflight"]) == ("hybrid", False, None)
    paper = sim_setting(
        "paper", [{**runs["geryon"][0], "order": "arrival", "ordering_available": True}], [0.3], config
    )
    assert (paper["mode"], paper["interleave"], paper["inflight"]) == ("network", True, GRPC_INFLIGHT)
    endhost = sim_setting("endhost", runs["endhost"], [0.3], config)
    assert endhost["mode"] == "end-host"
    single = sim_setting("single", runs["single"], None, config)
    assert (single["workers"], single["mode"], single["partition"]) == (1, "fifo", True)
    assert (endhost["interleave"], endhost["inflight"]) == (False, None)  # most urgent first
    for s in (vanilla, ps, geryon, endhost, single, ordered, paper):
        assert s["colocate"] is False and s["barrier"] is True
        # One transfer at a time per connection in a random order, or in urgency order.
        assert s["inflight"] == (GRPC_INFLIGHT if s["interleave"] else None)
        assert s["bandwidth_bps"] == pytest.approx(20e6 * PAYLOAD_FRACTION) and s["num_ps"] == 2
    # What the run recorded wins over the mode's name: a ps run on Geryon's flows and priority switch.
    odd = sim_setting(
        "ps", [{"protocol": "grpc+geryon", "switch": "priority", "partitioned": True}], None, config
    )
    assert odd["mode"] == "network"
    # No run recorded: the mode's defaults, and the default thresholds for k classes.
    assert sim_setting("geryon", [], None, {**config, "classes": 4})["thresholds"] == (0.25, 0.5, 0.75)


def urgent_behind_bulk() -> Profile:
    # The first layer's kernel and bias (small) and the second's 400 KB kernel on one PS: fair sharing
    # delivers the small ones at once; one transfer at a time in a random order puts the bias behind
    # the big kernel in some iterations (the simulator starts a connection's first transfer in
    # creation order, the rest at random), and the first layer's 100 ms forward then waits.
    ms = 1e-3
    layers = (LayerSpec("first", 100 * ms, 1 * ms), LayerSpec("second", 1 * ms, 1 * ms))
    params = (
        ParamSpec("first/kernel", (1000,), 4, 1.0, 0),
        ParamSpec("first/bias", (10,), 4, 1.0, 0),
        ParamSpec("second/kernel", (100000,), 4, 0.5, 1),
    )
    return Profile("two", 1, layers, params)


def test_random_request_orders_are_averaged_and_urgency_order_runs_once() -> None:
    config = one_link(background_bits=0)
    profile = urgent_behind_bulk()
    ps = sim_setting("ps", [], None, config)
    mean, first, seeds = simulate_setting(profile, ps)
    each = [simulate(profile, iterations=4, seed=k, **sim_args(ps)).iteration_s for k in range(ORDER_SEEDS)]
    assert seeds == ORDER_SEEDS and mean == pytest.approx(sum(each) / len(each))
    assert first.inflight == GRPC_INFLIGHT
    fair = simulate(profile, iterations=4, **sim_args({**ps, "inflight": None})).iteration_s
    assert mean > fair  # the small tensor no longer always overtakes the big one
    # Geryon's flows in urgency order (hybrid) run once; in arrival order (paper: network) they take
    # the worker's random request order, averaged as gRPC's.
    urgency = [
        {"protocol": "grpc+geryon", "switch": "priority", "order": "urgency", "ordering_available": True}
    ]
    assert simulate_setting(profile, sim_setting("geryon", urgency, [0.75], config))[2] == 1
    arrival = [{**urgency[0], "order": "arrival"}]
    assert simulate_setting(profile, sim_setting("paper", arrival, [0.75], config))[2] == ORDER_SEEDS


def test_predicts_every_mode_from_a_profile_measured_here_then_cached(tmp_path: Path) -> None:
    cache = tmp_path / "profiles.json"
    res = tiny()
    trace = tmp_path / "trace-geryon.json"
    p = predict(res, cache, quiet(), trace_path=trace)
    assert list(p["modes"]) == list(STEPS)
    for mode, m in p["modes"].items():
        assert m["predicted_s"] > 0, mode
        assert m["predicted_s"] >= m["compute_s"] > 0, mode
        assert m["error"] == pytest.approx((m["measured_s"] - m["predicted_s"]) / m["measured_s"])
    assert p["modes"]["vanilla"]["measured_s"] == pytest.approx(0.21)  # median over the two repeats
    # Comm-bound: whole variables on one PS each are slower than partition + slicing.
    assert p["modes"]["vanilla"]["predicted_s"] >= p["modes"]["ps"]["predicted_s"]
    assert p["modes"]["geryon"]["simulated"]["mode"] == "network"
    prof = p["profile"]
    assert prof["source"].startswith("measured:") and prof["cached"] is False
    assert prof["bytes"] > 100_000 and prof["params"] > 0 and prof["compute_s"] > 0
    data = json.loads(cache.read_text())
    assert data["format"] == "geryon.demo.profiles"
    # The profile was measured with the worker tasks' threads (the runner's default here).
    config = {**res["config"], "input_shape": (16, 16, 3), "threads": prof["threads"]}
    assert list(data["profiles"]) == [profile_key(config)]

    # The arrival timeline: P+S and Geryon at the threshold the geryon runs chose, one row per parameter
    # in consumption order, and Geryon's simulated run as a Chrome trace.
    timeline = p["timeline"]
    assert list(timeline["modes"]) == ["ps", "paper", "geryon"] and timeline["trace"] == str(trace)
    geryon = timeline["modes"]["geryon"]
    assert geryon["thresholds"] == [0.5] and geryon["simulated"]["mode"] == "network"
    # The timeline is one simulated run (seed 0) of the setting, the prediction the mean over the
    # request orders it draws (arrival order: network), neither with a fixed cost added.
    (stored,) = data["profiles"].values()
    one = simulate(Profile.from_dict(stored), iterations=ITERATIONS, **sim_args(geryon["simulated"]))
    assert p["modes"]["geryon"]["order_seeds"] == ORDER_SEEDS
    assert geryon["iteration_s"] == pytest.approx(one.iteration_s)
    for panel in timeline["modes"].values():
        rows = panel["rows"]
        assert len(rows) == prof["params"] and sum(r["bytes"] for r in rows) == prof["bytes"]
        assert [r["layer"] for r in rows] == sorted(r["layer"] for r in rows)
        assert all(0 <= r["arrival_s"] <= r["forward_start_s"] + 1e-12 for r in rows)
    urgent = [r for r in geryon["rows"] if r["class"] == 0]
    fair = {r["param"]: r for r in timeline["modes"]["ps"]["rows"]}
    assert urgent and max(r["arrival_s"] for r in urgent) < max(fair[r["param"]]["arrival_s"] for r in urgent)
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["cat"] for e in events if e["ph"] == "X"} == {"forward", "backward", "pull", "push"}

    # Second time: the cached profile, the same predictions (the simulator is deterministic).
    again = predict(res, cache, quiet())
    assert again["profile"]["cached"] is True
    for mode in STEPS:
        assert again["modes"][mode]["predicted_s"] == p["modes"][mode]["predicted_s"]
    assert again["timeline"]["modes"] == timeline["modes"] and "trace" not in again["timeline"]


def test_bad_config_and_bad_cache_are_named(tmp_path: Path) -> None:
    for field, value in (
        ("rate_bits", 0),
        ("batch_size", 0),
        ("input_shape", [16, 16]),
        ("model", "nope"),
        ("threads", 0),
    ):
        res = tiny()
        res["config"][field] = value
        with pytest.raises(PredictError, match=f"config.{field}"):
            predict(res, None, quiet())
    broken = tmp_path / "profiles.json"
    broken.write_text("{not json")
    with pytest.raises(PredictError, match=r"profile cache .*profiles\.json"):
        predict(tiny(), broken, quiet())


def test_geryon_is_simulated_as_the_hybrid_only_where_both_the_simulator_and_the_data_plane_have_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from geryon.demo.predict import sim_note
    from geryon.threshold import simulator

    res = result({"geryon": [0.1], "paper": [0.1], "endhost": [0.1]})
    config = {**res["config"], "ps": 2, "classes": 2}
    runs = {m: [r for r in res["runs"] if r["mode"] == m] for m in ("geryon", "paper", "endhost")}
    # The paper's Geryon (FIFO inside a class) is the simulator's network mode; endhost its end-host.
    assert sim_setting("paper", runs["paper"], [0.3], config)["mode"] == "network"
    assert sim_setting("endhost", runs["endhost"], [1.0], config)["mode"] == "end-host"
    assert sim_note("paper", runs["paper"]) is None and sim_note("endhost", runs["endhost"]) is None
    without = tuple(m for m in simulator.MODES if m != "hybrid")
    monkeypatch.setattr(simulator, "MODES", without)
    assert sim_setting("geryon", runs["geryon"], [0.3], config)["mode"] == "network"
    assert "no hybrid mode" in (sim_note("geryon", runs["geryon"]) or "")
    # The simulator has it (the simulator helper's work), but this run's data plane had no ordering.
    monkeypatch.setattr(simulator, "MODES", (*without, "hybrid"))
    runs["geryon"][0]["ordering_available"] = False
    assert sim_setting("geryon", runs["geryon"], [0.3], config)["mode"] == "network"
    assert "without urgency order" in (sim_note("geryon", runs["geryon"]) or "")
    runs["geryon"][0]["ordering_available"] = True
    assert sim_setting("geryon", runs["geryon"], [0.3], config)["mode"] == "hybrid"
    assert sim_note("geryon", runs["geryon"]) is None


def _in_cluster_like(cache: Path, res: dict, factor: float = 2.0, mode: str = "ps") -> dict:
    """A profile shaped like geryon.demo.capture's: the tiny model's layers from the cached alone
    profile, every layer `factor` times as slow (contention), its source an in-cluster one. The real
    capture (TF's profiler on worker 0 of a real demo cluster) is tested end to end in
    test_demo_quick.py."""
    import dataclasses

    from geryon.threshold.profile import Profile

    (entry,) = [
        v for k, v in json.loads(cache.read_text())["profiles"].items() if not k.startswith("cluster|")
    ]
    alone = Profile.from_dict(entry)
    layers = tuple(
        dataclasses.replace(la, forward_s=factor * la.forward_s, backward_s=factor * la.backward_s)
        for la in alone.layers
    )
    return Profile(
        alone.model,
        alone.batch_size,
        layers,
        alone.params,
        alone.urgency_function,
        f"incluster:{mode}:worker0",
        {},
    ).to_dict()


def test_the_in_cluster_profile_is_used_cached_per_cluster_shape_with_alone_as_fallback(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "profiles.json"
    alone = predict(tiny(), cache, quiet(), profile_source="alone")
    assert alone["profile"]["used"] == "alone" and "fallback" not in alone["profile"]

    res = tiny()
    res["incluster"] = {"mode": "ps", "profile": _in_cluster_like(cache, res), "error": None}
    p = predict(res, cache, quiet(), profile_source="cluster")
    prof = p["profile"]
    assert (prof["used"], prof["from"], prof["source"]) == (
        "cluster",
        "this run's ps mode",
        "incluster:ps:worker0",
    )
    assert prof["compute_s"] == pytest.approx(2 * alone["profile"]["compute_s"])
    # Slower compute, never a faster step. A network-bound mode's step stays the same, summed
    # in another order: equal up to float rounding (CI saw 0.12536458784530405 against ...041).
    for mode, m in p["modes"].items():
        assert m["predicted_s"] >= alone["modes"][mode]["predicted_s"] * (1 - 1e-12), mode
    keys = list(json.loads(cache.read_text())["profiles"])
    assert len(keys) == 2 and any(k.startswith("cluster|") and "|workers2|ps2|" in k for k in keys)

    # A later run whose capture failed: the cached in-cluster profile of the same cluster shape.
    failed = tiny()
    failed["incluster"] = {"mode": "ps", "profile": None, "error": "capture: no TRACED within 123 s"}
    again = predict(failed, cache, quiet())
    assert again["profile"]["used"] == "cluster" and again["profile"]["cached"] is True
    assert "no TRACED within 123 s" in again["profile"]["from"]
    assert again["modes"]["ps"]["predicted_s"] == p["modes"]["ps"]["predicted_s"]

    # Another shape (4 workers) is not served that profile: alone, saying why.
    other = tiny()
    other["config"]["workers"] = 4
    other["incluster"] = failed["incluster"]
    fallback = predict(other, cache, quiet())
    assert fallback["profile"]["used"] == "alone"
    assert (
        fallback["profile"]["fallback"] == "in-cluster profile unavailable: capture: no TRACED within 123 s"
    )

    # --profile-source alone ignores a capture; a bad source is named.
    assert predict(res, cache, quiet(), profile_source="alone")["profile"]["used"] == "alone"
    with pytest.raises(PredictError, match="profile_source: expected cluster or alone, got 'both'"):
        predict(res, cache, quiet(), profile_source="both")


def test_the_single_mode_uses_the_profile_traced_in_its_own_one_worker_cluster(tmp_path: Path) -> None:
    cache = tmp_path / "profiles.json"
    alone = predict(tiny(), cache, quiet(), profile_source="alone")
    res = tiny()
    res["incluster"] = {"mode": "ps", "profile": _in_cluster_like(cache, res, 3.0), "error": None}
    # Nothing traced in the single mode: it takes the other modes' profile and says why.
    before = predict(res, cache, quiet())
    single = before["modes"]["single"]["profile"]
    assert single["used"] == "other modes'" and "no in-cluster capture" in single["from"]
    assert single["source"] == "incluster:ps:worker0"

    # Its own capture (one worker: less contention than the ps mode's two): single only, cached per shape.
    res["incluster_single"] = {
        "mode": "single",
        "profile": _in_cluster_like(cache, res, 1.5, "single"),
        "error": None,
    }
    p = predict(res, cache, quiet())
    single = p["modes"]["single"]["profile"]
    assert (single["used"], single["from"], single["source"]) == (
        "cluster",
        "this run's single mode",
        "incluster:single:worker0",
    )
    assert single["compute_s"] == pytest.approx(1.5 * alone["profile"]["compute_s"])
    assert p["modes"]["single"]["compute_s"] == pytest.approx(single["compute_s"])
    assert p["modes"]["single"]["predicted_s"] < before["modes"]["single"]["predicted_s"]
    for mode in ("vanilla", "ps", "geryon", "endhost"):  # the other modes keep the ps mode's profile
        assert p["modes"][mode]["predicted_s"] == pytest.approx(
            before["modes"][mode]["predicted_s"], rel=1e-12
        )
        # (geryon and endhost: their own cluster's when it was traced, which it was not here)
        assert p["modes"][mode].get("profile", {"used": "other modes'"})["used"] == "other modes'"
    assert p["profile"]["source"] == "incluster:ps:worker0"
    keys = list(json.loads(cache.read_text())["profiles"])
    assert any("|workers1|" in k for k in keys) and any("|workers2|" in k for k in keys)

    # A later run whose single capture failed: the cached one-worker profile, saying why.
    failed = tiny()
    failed["incluster"] = res["incluster"]
    failed["incluster_single"] = {"mode": "single", "profile": None, "error": "capture: no TRACED within 9 s"}
    again = predict(failed, cache, quiet())
    single = again["modes"]["single"]["profile"]
    assert single["used"] == "cluster" and "no TRACED within 9 s" in single["from"]
    assert again["modes"]["single"]["predicted_s"] == p["modes"]["single"]["predicted_s"]

    # --profile-source alone: every mode, single too, from the profile measured alone.
    assert (
        predict(res, cache, quiet(), profile_source="alone")["modes"]["single"]["profile"]["used"] == "alone"
    )


def test_the_paired_modes_use_the_profile_traced_in_their_own_cluster(tmp_path: Path) -> None:
    cache = tmp_path / "profiles.json"
    predict(tiny(), cache, quiet(), profile_source="alone")  # the alone profile the helper scales
    res = tiny()
    res["incluster"] = {"mode": "ps", "profile": _in_cluster_like(cache, res, 1.0), "error": None}
    before = predict(res, cache, quiet())
    for mode in ("geryon", "endhost"):  # nothing traced in their cluster: the ps mode's, saying why
        own = before["modes"][mode]["profile"]
        assert own["used"] == "other modes'" and "no in-cluster capture" in own["from"], own

    # Traced over the rotation's rounds in the grpc+geryon cluster: geryon and endhost use it, the
    # grpc modes keep the ps mode's, and the report says it once for the group.
    traced = "geryon+paper+endhost"
    res["incluster_paired"] = {
        "mode": traced,
        "profile": _in_cluster_like(cache, res, 3.0, traced),
        "error": None,
    }
    p = predict(res, cache, quiet())
    for mode in ("geryon", "endhost"):
        own = p["modes"][mode]["profile"]
        assert (own["used"], own["from"], own["source"]) == (
            "cluster",
            f"this run's {traced} modes",
            f"incluster:{traced}:worker0",
        )
        assert p["modes"][mode]["compute_s"] == pytest.approx(3.0 * before["modes"][mode]["compute_s"])
        # Slower compute, never a faster step; a mode whose compute hides under its network
        # reads the same step, up to float rounding.
        assert p["modes"][mode]["predicted_s"] >= before["modes"][mode]["predicted_s"] * (1 - 1e-12), mode
    for mode in ("vanilla", "ps"):
        assert p["modes"][mode]["predicted_s"] == pytest.approx(
            before["modes"][mode]["predicted_s"], rel=1e-12
        )
        assert "profile" not in p["modes"][mode]
    notes = prediction_notes(p)
    assert (
        sum(n.startswith("paired's profile: cluster, this run's geryon+paper+endhost modes") for n in notes)
        == 1
    )
    keys = list(json.loads(cache.read_text())["profiles"])
    assert any(k.endswith("|incluster_paired") and "|workers2|" in k for k in keys), keys

    # A later run whose paired capture failed: the cached one, saying why.
    failed = tiny()
    failed["incluster"] = res["incluster"]
    failed["incluster_paired"] = {"mode": traced, "profile": None, "error": "capture: no TRACED within 9 s"}
    again = predict(failed, cache, quiet())
    own = again["modes"]["geryon"]["profile"]
    assert own["used"] == "cluster" and "no TRACED within 9 s" in own["from"]
    assert again["modes"]["geryon"]["predicted_s"] == pytest.approx(
        p["modes"]["geryon"]["predicted_s"], rel=1e-12
    )


def test_ps_costs_come_from_the_calibration_file_or_the_report_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.threshold.calibration import CalibrationError, knobs_document

    cache = tmp_path / "profiles.json"
    monkeypatch.chdir(tmp_path)  # the default out/bench/ps_costs.json is looked up from here
    free = predict(tiny(), cache, quiet())
    assert free["ps_costs"] == {
        "calibrated": False,
        "path": None,
        "knobs": None,
        "note": "PS costs: not calibrated — run bench/bench_ps_costs.py",
    }
    knobs = {
        "aggregate_s_per_byte": 1e-9,
        "update_s_per_byte": 2e-9,
        "per_message_s": 1e-3,
        "per_slice_s": 2e-3,
        "loopback_s_per_byte": 1e-10,
    }
    default = tmp_path / "out" / "bench" / "ps_costs.json"
    default.parent.mkdir(parents=True)
    default.write_text(json.dumps(knobs_document(knobs, {"runs": 1})))
    costed = predict(tiny(), cache, quiet())
    assert (
        costed["ps_costs"]["calibrated"] is True and costed["ps_costs"]["path"] == "out/bench/ps_costs.json"
    )
    assert costed["ps_costs"]["knobs"] == {k: v for k, v in knobs.items() if k != "loopback_s_per_byte"}
    for mode, m in costed["modes"].items():  # 1 ms per message at least: every step is slower
        assert m["predicted_s"] > free["modes"][mode]["predicted_s"], mode
    assert costed["ps_costs"]["step_fixed_s"] is None
    assert "per-step fixed cost not calibrated" in costed["ps_costs"]["note"]
    # bench/bench_step_cost.py's knob: added to every simulated step, which stays as it was.
    default.write_text(json.dumps(knobs_document({**knobs, "step_fixed_s": 0.015}, {"runs": 1})))
    fixed = predict(tiny(), cache, quiet())
    assert fixed["ps_costs"]["step_fixed_s"] == 0.015 and "15.0 ms added" in fixed["ps_costs"]["note"]
    for mode, m in fixed["modes"].items():
        assert m["simulated_s"] == pytest.approx(costed["modes"][mode]["predicted_s"]), mode
        assert m["predicted_s"] == pytest.approx(m["simulated_s"] + 0.015), mode
        assert m["error"] == pytest.approx(relative_error(m["measured_s"], m["predicted_s"])), mode
    # Measured per worker count: `single` (1 worker) takes its own value, the others the knob.
    default.write_text(
        json.dumps(knobs_document({**knobs, "step_fixed_s": 0.015}, {"step_fixed_by_workers": {"1": 0.005}}))
    )
    per = predict(tiny(), cache, quiet())
    assert "5.0 ms at 1 worker(s)" in per["ps_costs"]["note"]
    assert per["modes"]["single"]["step_fixed_s"] == 0.005
    assert per["modes"]["ps"]["step_fixed_s"] == 0.015  # 2 workers: not measured, the knob
    # An explicit file must load; a broken default one is reported and left out.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**knobs_document(knobs, {}), "knobs": {**knobs, "per_slice_s": -1}}))
    with pytest.raises(CalibrationError, match=r"knobs\.per_slice_s"):
        predict(tiny(), cache, quiet(), ps_costs_path=bad)
    default.write_text("{}")
    broken = predict(tiny(), cache, quiet())
    assert broken["ps_costs"]["calibrated"] is False and "format" in broken["ps_costs"]["note"]


def _incast_json(path: Path, fifo: tuple[float, float], priority: tuple[float, float]) -> None:
    """A bench/bench_incast.py result (what predict reads): (2 senders, 2x2) means per switch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    results = [
        {"switch": sw, "efficiency": {"2 senders": {"mean": a, "median": 0.5}, "2x2": {"mean": b}}}
        for sw, (a, b) in (("fifo", fifo), ("priority", priority))
    ]
    path.write_text(json.dumps({"bench": "incast", "results": results}))


def test_incast_comes_from_the_bench_file_by_switch_mode_or_the_report_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default out/bench/incast.json is looked up from here
    assert resolve_incast(None) == (
        {},
        {"measured": False, "path": None, "by_switch": None, "note": INCAST_UNMEASURED},
    )
    _incast_json(tmp_path / "out" / "bench" / "incast.json", fifo=(1.023, 0.734), priority=(1.0, 0.914))
    by, info = resolve_incast(None)
    # Above 1 is noise (a port delivers at most its rate): 1.
    assert by == {"fifo": Incast(1.0, 0.734), "priority": Incast(1.0, 0.914)}
    assert info["path"] == "out/bench/incast.json" and "fifo: alone 1.000, shared 0.734" in info["note"]
    config = one_link(workers=2, ps=2, background_bits=0)
    ps = sim_setting("ps", [], None, config, by)  # a gRPC mode on the fifo switch
    geryon = sim_setting("geryon", [], [0.75], config, by)  # the priority switch
    assert ps["incast"] == {"alone": 1.0, "shared": 0.734} and geryon["incast"]["shared"] == 0.914
    assert sim_args(ps)["incast"] == Incast(1.0, 0.734)
    plain = sim_setting("ps", [], None, config)
    assert "incast" not in plain and "incast" not in sim_args(plain)
    # Every worker pulls from both PSes and pushes to both: every port is "shared", so slower.
    profile = urgent_behind_bulk()
    assert simulate_setting(profile, ps)[0] > simulate_setting(profile, plain)[0]
    assert resolve_incast("none") == (
        {},
        {"measured": False, "path": None, "by_switch": None, "note": INCAST_OFF},
    )
    # An explicit file must load (the error names the field); a broken default one is reported.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bench": "incast", "results": [{"switch": "fifo", "efficiency": {}}]}))
    with pytest.raises(IncastError, match=r"results\[0\]\.efficiency\['2 senders'\]\.mean"):
        resolve_incast(bad)
    # predict() takes the default file: every 2-worker mode's setting and the timeline carry it.
    res = tiny()
    res["config"]["ps"] = 2
    pred = predict(res, tmp_path / "profiles.json", quiet())
    assert pred["incast"]["measured"] is True and pred["incast"]["path"] == "out/bench/incast.json"
    assert pred["modes"]["ps"]["simulated"]["incast"] == {"alone": 1.0, "shared": 0.734}
    assert pred["modes"]["geryon"]["simulated"]["incast"]["shared"] == 0.914
    assert pred["timeline"]["modes"]["ps"]["simulated"]["incast"]["shared"] == 0.734
    off = predict(res, tmp_path / "profiles.json", quiet(), incast_path="none")
    assert off["incast"]["note"] == INCAST_OFF and "incast" not in off["modes"]["ps"]["simulated"]
    assert pred["modes"]["ps"]["predicted_s"] > off["modes"]["ps"]["predicted_s"]
    (tmp_path / "out" / "bench" / "incast.json").write_text("{}")
    broken, info = resolve_incast(None)
    assert broken == {} and info["measured"] is False and "not a bench_incast.py result" in info["note"]


def test_per_class_modes_take_the_per_class_patterns_and_old_files_fall_back(tmp_path: Path) -> None:
    config = {"workers": 2, "ps": 2, "rate_bits": 8e6, "slice_bytes": None, "classes": 2}
    config["background_bits"] = 0
    old = tmp_path / "old.json"
    _incast_json(old, fifo=(1.0, 0.85), priority=(1.0, 0.92))
    # A file measured before the per-class patterns: every mode takes its switch's one-class value.
    by_old = load_incast(old)
    assert set(by_old) == {"fifo", "priority"}
    assert sim_setting("geryon", [], [0.5], config, by_old)["incast_from"] == "priority"
    new = tmp_path / "new.json"
    data = json.loads(old.read_text())
    for r, (alone, shared) in zip(data["results"], ((0.97, 0.8), (0.95, 0.7)), strict=True):
        r["efficiency"]["2 senders per class"] = {"mean": alone}
        r["efficiency"]["2x2 per class"] = {"mean": shared}
    new.write_text(json.dumps(data))
    by = load_incast(new)
    assert by["priority per-class"] == Incast(0.95, 0.7) and by["fifo per-class"] == Incast(0.97, 0.8)
    # geryon and paper (2 classes in use) push over one connection per class: the per-class value.
    runs = {"classes_used": 2, "switch": "priority", "protocol": "grpc+geryon"}
    for mode in ("geryon", "paper"):
        setting = sim_setting(mode, [runs], [0.5], config, by)
        assert setting["incast"] == {"alone": 0.95, "shared": 0.7}
        assert setting["incast_from"] == "priority per-class"
        assert sim_args(setting)["incast"] == Incast(0.95, 0.7) and "incast_from" not in sim_args(setting)
    # endhost runs one class, ps no geryon at all: the one-class values, as before.
    endhost = sim_setting("endhost", [{"classes_used": 1, "single_class": True}], [1.0], config, by)
    assert endhost["incast"] == {"alone": 1.0, "shared": 0.85} and endhost["incast_from"] == "fifo"
    assert sim_setting("ps", [], None, config, by)["incast_from"] == "fifo"
    # Half a per-class measurement is a broken file: the error names the missing pattern.
    del data["results"][1]["efficiency"]["2x2 per class"]
    new.write_text(json.dumps(data))
    with pytest.raises(IncastError, match=r"results\[1\]\.efficiency\['2x2 per class'\]\.mean"):
        load_incast(new)
