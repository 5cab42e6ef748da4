"""The simulator's prediction for a demo run: a real profile of a real (tiny) model measured here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demo_results import result

from geryon.demo.predict import PredictError, predict, profile_key, relative_error, sim_setting
from geryon.progress import Progress

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
    geryon = sim_setting("geryon", runs["geryon"], [0.3], config)
    assert (geryon["mode"], geryon["thresholds"], geryon["interleave"]) == ("network", (0.3,), False)
    endhost = sim_setting("endhost", runs["endhost"], [0.3], config)
    assert endhost["mode"] == "end-host"
    single = sim_setting("single", runs["single"], None, config)
    assert (single["workers"], single["mode"], single["partition"]) == (1, "fifo", True)
    for s in (vanilla, ps, geryon, endhost, single):
        assert s["colocate"] is False and s["barrier"] is True
        assert s["bandwidth_bps"] == 20e6 and s["num_ps"] == 2
    # What the run recorded wins over the mode's name: a ps run on Geryon's flows and priority switch.
    odd = sim_setting(
        "ps", [{"protocol": "grpc+geryon", "switch": "priority", "partitioned": True}], None, config
    )
    assert odd["mode"] == "network"
    # No run recorded: the mode's defaults, and the default thresholds for k classes.
    assert sim_setting("geryon", [], None, {**config, "classes": 4})["thresholds"] == (0.25, 0.5, 0.75)


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
    assert list(timeline["modes"]) == ["ps", "geryon"] and timeline["trace"] == str(trace)
    geryon = timeline["modes"]["geryon"]
    assert geryon["thresholds"] == [0.5] and geryon["simulated"]["mode"] == "network"
    assert geryon["iteration_s"] == pytest.approx(p["modes"]["geryon"]["predicted_s"])
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
