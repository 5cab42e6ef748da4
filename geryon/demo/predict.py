"""The simulator's iteration time for each mode of a demo run, beside the measured one.

The layer profile is, by default (`profile_source="cluster"`), the one the runner traced on worker 0
during the ps mode's run (`result["incluster"]`, geryon.demo.capture): compute as the cluster runs
it, contention included. It is cached under `cluster_profile_key` (the profile key below plus
workers, PSes and link rate), so a run whose capture failed uses the last one of the same cluster
shape; without either (or with `profile_source="alone"`) the profile is measured alone, as follows.
`prediction["profile"]` says which was used (`used`, `from`, and `fallback` with the reason).
Modes whose cluster is not the ps mode's (OWN_PROFILES: single, one worker; geryon, paper and
endhost, whose tasks run Geryon's data plane) use the profile traced in their own cluster
(`result["incluster_single"]`, `result["incluster_paired"]`), else one cached for it, else the ps
mode's; `prediction["modes"][mode]["profile"]` says which.
PS costs (`simknobs.PsCosts`) come from a bench/bench_ps_costs.py calibration (`ps_costs_path`,
default `out/bench/ps_costs.json` when it exists, which `geryon demo` measures first when it is
absent: geryon.demo.pscosts; "none" for none); `prediction["ps_costs"]` says which, or notes that
none is calibrated. The same file's optional `step_fixed_s` (bench/bench_step_cost.py) is added to
every predicted step (see "Per-step fixed costs" below).

For the setting of `result["config"]` (the same model, input shape and batch), the alone profile is
measured on this machine with `geryon.threshold.profiler.measure_profile`, in a child process whose
TensorFlow uses the worker tasks' intra-op thread count (`config["threads"]`, else the runner's
default), so the caller's TensorFlow (if any) is untouched. Profiles are cached in one JSON file
(`profile_path`), keyed by model, input shape, batch, threads and host. Each mode then runs through
`geryon.threshold.simulator.simulate` with the testbed's shape: every task on its own host behind one
switch (`colocate=False`), host NICs and switch ports at `rate_bits` times `PAYLOAD_FRACTION` (the
simulator moves tensor bytes; the testbed's HTB shapes whole frames, see below), `slice_bytes` from
the config.
How a run maps onto the simulator comes from what the run records (protocol, switch, partitioned,
workers), with the mode name as the fallback:

    grpc,        not partitioned -> fifo, whole variables round-robin over the PSes (vanilla)
    grpc,        partitioned     -> fifo, the tagger's partition + slicing plan (ps, single)
    grpc+geryon, priority switch, arrival order -> network (strict priority at NICs and switch,
                                   FIFO inside a class: the paper's Geryon) at the run's thresholds (paper)
    grpc+geryon, priority switch, urgency order -> hybrid (strict priority between classes, urgency
                                   order inside one) when the simulator has that mode and the run's data
                                   plane applied the order; else network, with a note saying why (geryon)
    grpc+geryon, fifo switch     -> end-host (each sender most-urgent-first; fair switch) (endhost)

gRPC multiplexes a channel's tensors as HTTP/2 streams (`interleave=True`); Geryon's data plane sends
a flow's tensors one after another on its class's TCP connection (`interleave=False`), most urgent
first under urgency order (hybrid, end-host). Under arrival order (network: the paper's mode) it sends
them in the order the worker's requests came, which TF's executor issues as randomly as gRPC's pulls
(`bench_rendezvous.py --order`: arrival order's Kendall tau against urgency -0.23 to 0.37), so network
is simulated like the gRPC modes: one transfer at a time per connection in a random order. The gRPC
modes are simulated with one transfer at a time per connection in a random order each iteration
(`inflight=GRPC_INFLIGHT`, 1), the mean over `ORDER_SEEDS` seeds: the in-cluster trace shows it
(`geryon.demo.stepdecomp`, `bench/bench_predict_terms.py`): in the demo's ps mode a step's first
layer op started 0.28-0.45 s into the step, at 60-100% of its pull phase (0.33-0.50 s; 5 steps of
3 runs), and a 64-byte part of conv1_1's bias came among the last 6 of 38 pulls. Fair interleaving
(`inflight=None`, before) lets small tensors finish first, so the simulated forward started at 3 ms;
once a response's bytes are in the socket buffer and the switch queue they leave in FIFO order,
behind the FC kernels. With it the simulated forward starts at 0.39 s. TF starts a
step's parameter reads when the step starts, after the previous step returned, so the next
iteration's pulls wait for the whole iteration (`barrier=True`).

The error is (measured - predicted) / measured of the median step time (medians over repeats).

The prediction also carries `timeline`: the per-parameter arrival rows (`geryon.demo.timeline`) at
worker 0 in the last simulated iteration for P+S (the `ps` setting: one class, fair sharing) and
Geryon (the `geryon` setting at the run's chosen thresholds), whatever modes the result ran, so the
timeline chart can be drawn (and redrawn from the JSON) without simulating again. With `trace_path`,
the Geryon setting's whole simulated run is written there as Chrome trace JSON (chrome://tracing,
https://ui.perfetto.dev). A timeline that cannot be made leaves `timeline: {"error": ...}` and the
per-mode prediction stands.

What the simulator models: link serialization at the configured rate on every NIC and switch port,
max-min sharing among connections, strict priority classes, partitioning/slicing, overlap of
communication with per-layer compute, and BSP dependencies (a layer waits for its parameters).
What it does not model, so where to look when the error is large:
- CPU contention (alone profile only; the in-cluster profile has worker 0's share of it, though not
  the unattributed ops outside layers, `meta.unattributed_s_per_step`, nor the PSes' own CPU unless
  PS costs are calibrated): the alone profile is each layer on an idle machine; the demo runs 2
  PSes, 2 workers and a chief (plus the kernel's veth/HTB shaping and softirqs) on 2 cores, so workers compute
  concurrently, PSes spend CPU serving and aggregating, and the emulated network itself costs CPU.
  This makes measured steps slower than predicted (positive error), most for the modes that move the
  most bytes.
- Per-step fixed costs: ClusterCoordinator dispatch, function launch, the chief's RPCs, per-tensor
  gRPC/rendezvous overheads and serialization copies; the optimizer's update ops on the PSes. These
  are not simulated: when the calibration has `step_fixed_s` (bench/bench_step_cost.py, measured on a
  loopback cluster of the demo's processes), it is added to every mode's simulated step
  (`predicted_s` = `simulated_s` + `step_fixed_s`), the value measured for the mode's worker count
  (`meta.step_fixed_by_workers`) where there is one.
- Head-of-line blocking: a gRPC channel interleaves tensors as HTTP/2 frames, but once bytes sit in
  the kernel's socket buffer (megabytes with autotuning) and the switch queue, they leave in FIFO
  order, so a small urgent tensor can wait behind bulk more than fair interleaving (what is simulated
  for grpc) predicts; the truth lies between `interleave=True` and `interleave=False`.
- TCP: slow start after idle gaps, loss and retransmits at the switch buffers (HTB drops are real
  loss), ACK clocking, RTT; the simulator's flows get their fair share instantly and lose nothing.
  Measured (bench/bench_predict_terms.py, 3 demo runs): after the last layer op a ps step still
  takes 0.18-0.19 s (simulated 0.08-0.11 s), one PS's updates done 0.11-0.19 s after the other's
  (simulated 0.03 s), with drops on both PS ports where two workers' pushes meet. Part of it is
  taken in: with `out/bench/incast.json` (bench/bench_incast.py; `incast_path`, "none" for none) a
  switch port that >= 2 hosts send to delivers the measured share of its rate (simknobs.Incast, by
  the run's switch mode; `prediction["incast"]` says which): two workers pushing to one PS lose
  nothing there (efficiency 0.96-1.01), but the demo's pattern, every worker to both PSes and every
  PS to both workers, delivers 0.82-0.87 (the flows do not settle at their fair shares; one lags and
  its port idles at the end). With it the simulated ps tail is 0.12-0.16 s. geryon and paper open
  one connection per class per worker-PS pair (twice the flows, in the switch's strict-priority
  queues): they take the bench's per-class patterns' value (`incast_key`), where the file has them.
  Measured, that pattern gets at least the one-class share (2x2 mean 0.89-0.92 vs 0.82-0.89), so it
  does not explain why paper runs slower than predicted (bench/README.md, "Incast per class"),
  although the saved demos' PS ports dropped 1.5-2x more per GB under it and geryon than under ps.
  (In the 5 fresh demos of stops 26-27, geryon's error was -0.7% to +9.7%, paper's +8.9% to +17.3%.
  Since paper takes the worker's random request order, its error on the two newest is +3.9% and +12.1%.)
- The priority switch is strict, as simulated: measured on the demo's own switch config
  (bench/bench_switch_priority.py, bench/README.md "Switch priority", 4 runs of 10 repeats), bulk
  DSCP 46 against backlogged DSCP 26 into one port keeps 99.5-100% of it, and takes >= 90% of it
  within a median 3-8 ms of starting, with one class per worker or both from each worker. So HTB's
  priority is not why geryon and paper run slower than predicted, and the simulator has no knob for
  it. What it does not model is TCP's ACKs: with reflected DSCPs a class-1 transfer whose ACKs
  cross a port class 0 fills fell to 0.5-6% of its rate (fifo switch: 96%); the simulator's BSP
  schedule never has that overlap (a worker's pulls end before its pushes start).
- HTB and FIFO queue behaviour: a FIFO switch port shares by arrival, not max-min; the end-host mode
  here is Geryon's per-class flows with priority host queues and a FIFO switch, which the simulator's
  end-host mode (one most-urgent-first connection per pair) approximates.
- Rounds: the chief times a round (one step scheduled per worker, then join), which is BSP as
  simulated, but ClusterCoordinator may hand two steps of a round to one worker, and the round's time
  includes scheduling and join latency on top of the slowest worker.
- The threshold search: the measured geryon median covers the search's trial steps unless the runner
  leaves them out; the prediction is at the final threshold only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geryon.demo.modes import MODES
from geryon.demo.modes import mode as demo_mode
from geryon.demo.report import summarize
from geryon.demo.timeline import arrivals
from geryon.progress import Progress
from geryon.tagger.map_table import default_thresholds
from geryon.threshold.profile import Profile
from geryon.threshold.simknobs import PS_COST_KEYS, Background, Incast, PsCosts
from geryon.threshold.simulator import simulate
from geryon.threshold.trace import write_chrome_trace

CACHE_FORMAT = "geryon.demo.profiles"
ITERATIONS = 4  # simulated iterations: the steady state is the mean of the last three
# The TCP payload of a 1514-byte Ethernet frame (MSS 1448 with timestamps): the testbed's links are
# shaped in frames, tensors are payload. Measured on this machine, geryon/testbed/README.md
# (bench/bench_testbed.py): one flow's goodput 191.5 of 200 Mbit/s, 95.8 of 100, 47.9 of 50 (95.6%).
PAYLOAD_FRACTION = 1448 / 1514
# gRPC modes: one transfer at a time per connection, random order per iteration (module docstring).
GRPC_INFLIGHT = 1.0
ORDER_SEEDS = 5  # random orders averaged (each over ITERATIONS - 1 steady iterations)
PROFILE_ITERATIONS = 5
PROFILE_WARMUP = 2

# Mode name -> (protocol, switch, partitioned) when a run does not say.
_MODE_DEFAULTS: dict[str, tuple[str, str, bool]] = {
    "vanilla": ("grpc", "fifo", False),
    "ps": ("grpc", "fifo", True),
    "geryon": ("grpc+geryon", "priority", True),
    "paper": ("grpc+geryon", "priority", True),
    "endhost": ("grpc+geryon", "fifo", True),
    "single": ("grpc", "fifo", True),
}


class PredictError(ValueError):
    """The result cannot be simulated (a config field missing or out of range); names the field."""


def predict(
    result: Mapping[str, Any],
    profile_path: Path | None = None,
    progress: Progress | None = None,
    trace_path: Path | None = None,
    profile_source: str = "cluster",
    ps_costs_path: str | Path | None = None,
    incast_path: str | Path | None = None,
) -> dict:
    """Predicted vs measured iteration time per mode of `result`, and the arrival timeline of P+S and
    Geryon (Geryon's Chrome trace to `trace_path` when given); see the module docstring.

    `profile_source` "cluster" uses the result's in-cluster profile (`result["incluster"]`), else one
    cached for the same cluster shape, else falls back to the profile measured alone; "alone" measures
    alone. `ps_costs_path`: a bench/bench_ps_costs.py JSON; None: DEFAULT_PS_COSTS if it exists.
    `incast_path`: a bench/bench_incast.py JSON; None: DEFAULT_INCAST if it exists (see resolve_incast)."""
    progress = progress if progress is not None else Progress("geryon predict")
    config = _config(result)
    profile, cached, chosen = choose_profile(result, config, profile_path, progress, profile_source)
    ps_costs, ps_info = resolve_ps_costs(ps_costs_path)
    by_workers: dict[int, float] = ps_info.get("step_fixed_by_workers") or {}
    incast, incast_info = resolve_incast(incast_path)
    progress.say(f"profile: {chosen['used']} ({profile.source}); {ps_info['note']}; {incast_info['note']}")
    summary = summarize(result)
    runs = [r for r in result.get("runs") or [] if isinstance(r, Mapping)]
    modes: dict[str, Any] = {}
    # Modes traced in a cluster of their own (OWN_PROFILES): that cluster's profile, said per group.
    own: dict[str, tuple[Profile, dict[str, Any]]] = {}
    for group, (field, members, workers) in OWN_PROFILES.items():
        present = [m for m in summary["modes"] if m in members]
        if not present:
            continue
        if profile_source == "cluster":
            found = choose_own_profile(result, config, profile_path, profile, field, workers)
            progress.say(f"{group}'s profile: {found[1]['used']} ({found[0].source}), {found[1]['from']}")
        else:
            found = profile, {"used": chosen["used"], "from": "the other modes' profile"}
        for mode in present:
            own[mode] = found[0], {**found[1], "group": group}  # the report's note, once per group
    for mode, m in summary["modes"].items():
        setting = sim_setting(
            mode, [r for r in runs if r.get("mode") == mode], m["thresholds"], config, incast
        )
        mode_profile, mode_chosen = own.get(mode, (profile, None))
        iteration_s, sim, seeds = simulate_setting(mode_profile, setting, ps_costs)
        measured = m["median_step_s"]
        step_fixed = by_workers.get(setting["workers"], ps_info.get("step_fixed_s") or 0.0)
        predicted = iteration_s + step_fixed
        modes[mode] = {
            "predicted_s": predicted,
            "simulated_s": iteration_s,
            "order_seeds": seeds,
            "step_fixed_s": step_fixed,
            "measured_s": measured,
            "error": relative_error(measured, predicted),
            "compute_s": sim.compute_s,
            "comm_s": sim.comm_s,
            # No schedule beats it on this mode's cluster: compute as profiled, or the busiest port
            # busy at its rate for the whole step (geryon.threshold.sim_bound); the fixed step cost
            # is left out, so it bounds the measured step too.
            "bound_s": sim.bound.seconds if sim.bound is not None else None,
            "bound_by": sim.bound.by if sim.bound is not None else None,
            "simulated": {
                k: (list(v) if isinstance(v, tuple) else v)
                for k, v in setting.items()
                if k != "bandwidth_bps"
            },
            "note": sim_note(mode, [r for r in runs if r.get("mode") == mode]),
        }
        if mode_chosen is not None:
            modes[mode]["profile"] = {
                "source": mode_profile.source,
                "compute_s": mode_profile.compute_s,
                **mode_chosen,
            }
        progress.say(
            f"{mode}: predicted {predicted:.3f} s/step"
            + (f", measured {measured:.3f} s ({modes[mode]['error']:+.1%})" if measured else ", not measured")
        )
    try:
        timeline = arrival_timeline(profile, config, runs, summary["modes"], trace_path, ps_costs, incast)
    except Exception as e:  # the per-mode prediction stands; the chart says why there is no timeline
        timeline = {"error": f"{type(e).__name__}: {e}"}
    return {
        "modes": modes,
        "timeline": timeline,
        "profile": {
            "model": config["model"],
            "input_shape": list(config["input_shape"]),
            "batch_size": config["batch_size"],
            "threads": config["threads"],
            "source": profile.source,
            "compute_s": profile.compute_s,
            "forward_s": sum(la.forward_s for la in profile.layers),
            "layers": profile.num_layers,
            "params": len(profile.params),
            "bytes": profile.total_bytes,
            "cache": str(profile_path) if profile_path is not None else None,
            "cached": cached,
            **chosen,
        },
        "ps_costs": ps_info,
        "incast": incast_info,
        "bandwidth_bps": config["rate_bits"],
        "payload_fraction": PAYLOAD_FRACTION,
    }


def simulate_setting(
    profile: Profile, setting: Mapping[str, Any], ps_costs: PsCosts | None = None
) -> tuple[float, Any, int]:
    """(iteration time, the first SimResult, how many random orders were averaged) for one setting:
    with a random transfer order (`inflight`) the mean over ORDER_SEEDS seeds, else one run."""
    args = sim_args(setting)
    seeds = ORDER_SEEDS if args.get("inflight") is not None else 1
    sims = [simulate(profile, iterations=ITERATIONS, ps_costs=ps_costs, seed=k, **args) for k in range(seeds)]
    return sum(x.iteration_s for x in sims) / seeds, sims[0], seeds


def relative_error(measured: float | None, predicted: float) -> float | None:
    """(measured - predicted) / measured: positive when the run was slower than predicted."""
    if measured is None or measured <= 0:
        return None
    return (measured - predicted) / measured


def sim_setting(
    mode: str,
    runs: list[Mapping[str, Any]],
    thresholds: list[float] | None,
    config: Mapping[str, Any],
    incast: Mapping[str, Incast] | None = None,
) -> dict[str, Any]:
    """The simulate() keyword arguments for one mode, from what its runs recorded; `incast` by the
    switch's queue mode ("fifo", "priority"; resolve_incast), none where the mode's is missing."""
    protocol, switch, partitioned = _MODE_DEFAULTS.get(mode, ("grpc", "fifo", True))
    first = runs[0] if runs else {}
    if isinstance(first.get("protocol"), str):
        protocol = first["protocol"]
    if isinstance(first.get("switch"), str):
        switch = first["switch"]
    if isinstance(first.get("partitioned"), bool):
        partitioned = first["partitioned"]
    workers = first.get("workers")
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        workers = 1 if mode == "single" else config["workers"]
    geryon = protocol.startswith("grpc+geryon")
    sim_mode = ("network" if switch == "priority" else "end-host") if geryon else "fifo"
    if sim_mode == "network" and _wants_hybrid(mode, first) and _hybrid_usable(first):
        sim_mode = HYBRID
    classes = config["classes"]
    found = incast_key(switch, per_class_flows(mode, first, config, geryon), incast)
    # Which connections take their transfers one at a time in a random order: gRPC's (module
    # docstring), and Geryon's flows in arrival order (network: the paper's mode, or a data plane
    # without ordering), which send a class's responses in the order the worker's requests came, and
    # TF's executor issues those as randomly as gRPC's (bench_rendezvous.py --order: arrival order's
    # Kendall tau against urgency is -0.23 to 0.37). Urgency order (hybrid) and end-host reorder them.
    random_order = not geryon or sim_mode == "network"
    return {
        "workers": workers,
        "num_ps": config["ps"],
        "bandwidth_bps": float(config["rate_bits"]) * PAYLOAD_FRACTION,
        "mode": sim_mode,
        "thresholds": tuple(thresholds) if thresholds else default_thresholds(classes),
        "slice_bytes": config["slice_bytes"] if partitioned else None,
        "partition": partitioned,
        "interleave": random_order,
        "inflight": GRPC_INFLIGHT if random_order else None,
        "barrier": True,
        "colocate": False,
        # The run's background stream toward every worker's port (runner.background), in bits/s.
        "background_bps": float(config.get("background_bits") or 0),
        # The switch port's share of its rate under incast, measured (bench/bench_incast.py); absent: all.
        # geryon and paper take the per-class patterns' value (one connection per class), when measured.
        **({"incast": incast[found].to_dict(), "incast_from": found} if incast and found else {}),
    }


def per_class_flows(mode: str, first: Mapping[str, Any], config: Mapping[str, Any], geryon: bool) -> bool:
    """Whether the mode's data plane opens one connection per class per worker-PS pair (grpc+geryon
    with >= 2 classes in use: geryon and paper; endhost runs one class)."""
    if not geryon:
        return False
    used = first.get("classes_used")
    if isinstance(used, int) and not isinstance(used, bool):
        return used >= 2
    if first.get("single_class") is True:
        return False
    return mode in ("geryon", "paper") and int(config["classes"]) >= 2


def incast_key(switch: str, per_class: bool, incast: Mapping[str, Incast] | None) -> str | None:
    """The resolve_incast key a mode uses: its switch's per-class value for per-class flows, else (and
    for a file measured before the per-class patterns) its switch's one-class value; None: none."""
    if not incast:
        return None
    if per_class and f"{switch}{PER_CLASS_KEY}" in incast:
        return f"{switch}{PER_CLASS_KEY}"
    return switch if switch in incast else None


def sim_args(setting: Mapping[str, Any]) -> dict[str, Any]:
    """simulate()'s keyword arguments from a sim_setting (which stays JSON: background as bits/s)."""
    args = {k: v for k, v in setting.items() if k not in ("background_bps", "incast", "incast_from")}
    bps = setting.get("background_bps") or 0
    # The testbed's background DSCP (runner.BACKGROUND_DSCP) is in no class of the demo's intent, so
    # the priority switch queues it with the least urgent class (geryon.fabric.intent's unmatched
    # class; measured: bench/bench_switch_priority.py), not below it.
    args["background"] = (Background(bps, "workers", "in", queue="lowest"),) if bps > 0 else ()
    if setting.get("incast"):
        args["incast"] = Incast(**setting["incast"])
    return args


HYBRID = "hybrid"  # the simulator's mode for issue 14's Geryon (added beside fifo/end-host/network)


def _wants_hybrid(mode: str, first: Mapping[str, Any]) -> bool:
    order = first.get("order")
    return order == "urgency" if isinstance(order, str) else mode == "geryon"


def _hybrid_usable(first: Mapping[str, Any]) -> bool:
    from geryon.threshold import simulator

    # Only a run that recorded the order in force counts: results from before the field existed ran
    # without it, as does every run of a data plane without per-connection ordering.
    return HYBRID in simulator.MODES and first.get("ordering_available") is True


def sim_note(mode: str, runs: list[Mapping[str, Any]]) -> str | None:
    """Why a mode that asks for urgency order inside a class is simulated as `network`, if it is."""
    from geryon.threshold import simulator

    first = runs[0] if runs else {}
    if first.get("switch", _MODE_DEFAULTS.get(mode, ("", "fifo"))[1]) != "priority":
        return None
    if not _wants_hybrid(mode, first):
        return None
    if HYBRID not in simulator.MODES:
        return "simulated as network: the simulator has no hybrid mode yet"
    if first.get("ordering_available") is not True:
        return "simulated as network: the data plane ran without urgency order (issue 14 item 1)"
    return None


# P+S, then the paper's Geryon beside Geryon: the same classes, so the panels differ in the order
# inside a class (arrival against urgency; issue 14).
TIMELINE_MODES = {
    "ps": "P+S (fair sharing)",
    "paper": "paper's Geryon (FIFO in a class)",
    "geryon": "Geryon (urgency in a class)",
}


def arrival_timeline(
    profile: Profile,
    config: Mapping[str, Any],
    runs: list[Mapping[str, Any]],
    summary_modes: Mapping[str, Any],
    trace_path: Path | None = None,
    ps_costs: PsCosts | None = None,
    incast: Mapping[str, Incast] | None = None,
) -> dict[str, Any]:
    """Arrival rows at worker 0 in the last simulated iteration for the ps and geryon settings.

    Geryon runs at the thresholds its runs settled on (else those paper reused, else the defaults);
    each setting comes from its runs when the result has them, else from the mode's defaults."""
    thresholds = next(
        (
            summary_modes[m]["thresholds"]
            for m in ("geryon", "paper")
            if (summary_modes.get(m) or {}).get("thresholds")
        ),
        None,
    )
    out: dict[str, Any] = {"iteration": ITERATIONS - 1, "worker": 0, "modes": {}}
    for mode, label in TIMELINE_MODES.items():
        mode_runs = [r for r in runs if r.get("mode") == mode]
        setting = sim_setting(
            mode, mode_runs, thresholds if mode in ("geryon", "paper") else None, config, incast
        )
        sim = simulate(profile, iterations=ITERATIONS, trace=True, ps_costs=ps_costs, **sim_args(setting))
        assert sim.spans is not None
        out["modes"][mode] = {
            "label": label,
            "iteration_s": sim.iteration_s,
            "thresholds": (list(setting["thresholds"]) if setting["mode"] in ("network", HYBRID) else None),
            "simulated": {k: (list(v) if isinstance(v, tuple) else v) for k, v in setting.items()},
            "rows": arrivals(sim.spans, profile, iteration=ITERATIONS - 1, worker=0),
        }
        if mode == "geryon" and trace_path is not None:
            write_chrome_trace(trace_path, sim.chrome_trace())
            out["trace"] = str(trace_path)
    return out


# --- PS costs --------------------------------------------------------------------------------------
DEFAULT_PS_COSTS = Path("out/bench/ps_costs.json")  # bench/bench_ps_costs.py's default --out
UNCALIBRATED = "PS costs: not calibrated — run bench/bench_ps_costs.py"
TURNED_OFF = "PS costs: none (--ps-costs none)"
NO_STEP_COST = "per-step fixed cost not calibrated — run bench/bench_step_cost.py"


def resolve_ps_costs(path: str | Path | None) -> tuple[PsCosts | None, dict[str, Any]]:
    """The PS costs for simulate() and what the report says of them. An explicit `path` must load (a
    CalibrationError names the key); the default one, when present but unreadable, is reported and
    left out rather than failing the whole prediction. "none" (or "off"): no PS costs."""
    from geryon.threshold.calibration import CalibrationError, load_knobs, step_fixed_by_workers

    if isinstance(path, str) and path.strip().lower() in ("none", "off"):
        return None, {"calibrated": False, "path": None, "knobs": None, "note": TURNED_OFF}
    explicit = path is not None
    where = Path(path) if path is not None else DEFAULT_PS_COSTS
    if not explicit and not where.is_file():
        return None, {"calibrated": False, "path": None, "knobs": None, "note": UNCALIBRATED}
    try:
        knobs = load_knobs(where)
        by_workers = step_fixed_by_workers(where)
    except CalibrationError as e:
        if explicit:
            raise
        return None, {"calibrated": False, "path": str(where), "knobs": None, "note": f"{UNCALIBRATED} ({e})"}
    costs = PsCosts(**{k: knobs[k] for k in PS_COST_KEYS})
    step_fixed = knobs.get("step_fixed_s")
    return costs, {
        "calibrated": True,
        "path": str(where),
        "knobs": costs.to_dict(),
        "step_fixed_s": step_fixed,
        "step_fixed_by_workers": by_workers,
        "note": f"PS costs: {where}; " + step_note(step_fixed, by_workers),
    }


def step_note(step_fixed: float | None, by_workers: Mapping[int, float]) -> str:
    if step_fixed is None:
        return NO_STEP_COST
    per = ", ".join(f"{v * 1e3:.1f} ms at {w} worker(s)" for w, v in sorted(by_workers.items()))
    return f"per-step fixed cost {per or f'{step_fixed * 1e3:.1f} ms'} added"


# --- incast ----------------------------------------------------------------------------------------
DEFAULT_INCAST = Path("out/bench/incast.json")  # bench/bench_incast.py's default --out
INCAST_UNMEASURED = "incast: not measured (ports at their full rate) — run bench/bench_incast.py"
INCAST_OFF = "incast: none (--incast none)"


class IncastError(ValueError):
    """A bench_incast.py JSON that cannot be used; names the file and the field."""


def resolve_incast(path: str | Path | None) -> tuple[dict[str, Incast], dict[str, Any]]:
    """The measured port efficiency per switch queue mode (`simknobs.Incast`: "alone" from the bench's
    "2 senders" pattern, "shared" from its "2x2"), and what the report says of them. A measured value
    above 1 (the port cannot deliver more than its rate; run-to-run noise) counts as 1. An explicit
    `path` must load (IncastError names the field); the default one, when unreadable, is reported and
    left out. "none" (or "off"): no incast, the fluid model."""
    if isinstance(path, str) and path.strip().lower() in ("none", "off"):
        return {}, {"measured": False, "path": None, "by_switch": None, "note": INCAST_OFF}
    explicit = path is not None
    where = Path(path) if path is not None else DEFAULT_INCAST
    if not explicit and not where.is_file():
        return {}, {"measured": False, "path": None, "by_switch": None, "note": INCAST_UNMEASURED}
    try:
        by_switch = load_incast(where)
    except IncastError as e:
        if explicit:
            raise
        return {}, {
            "measured": False,
            "path": str(where),
            "by_switch": None,
            "note": f"{INCAST_UNMEASURED} ({e})",
        }
    shown = "; ".join(
        f"{sw}: alone {i.alone:.3f}, shared {i.shared:.3f}" for sw, i in sorted(by_switch.items())
    )
    return by_switch, {
        "measured": True,
        "path": str(where),
        "by_switch": {sw: i.to_dict() for sw, i in by_switch.items()},
        "note": f"incast: {where} ({shown})",
    }


# The bench's patterns that give each Incast field: one connection per worker-PS pair, and (keyed
# "<switch> per-class") one per class per pair, as geryon and paper push. A file without the per-class
# patterns (measured before them) still loads: every mode then takes its switch's one-class value.
INCAST_PATTERNS = {"alone": "2 senders", "shared": "2x2"}
INCAST_PER_CLASS_PATTERNS = {"alone": "2 senders per class", "shared": "2x2 per class"}
PER_CLASS_KEY = " per-class"


def load_incast(path: Path) -> dict[str, Incast]:
    """{switch mode: Incast} from a bench/bench_incast.py JSON: the mean efficiencies, since the 2x2
    pattern's times are bimodal and their median swings between runs (bench_incast's docstring), and a
    simulated step stands for the mean over its iterations."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise IncastError(f"{path}: cannot read it as JSON ({e})") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and data.get("bench") == "incast" and isinstance(results, list)):
        raise IncastError(
            f"{path}: not a bench_incast.py result (expected bench 'incast' and a results list)"
        )
    out: dict[str, Incast] = {}
    for i, r in enumerate(results):
        where = f"{path}: results[{i}]"
        switch = r.get("switch") if isinstance(r, dict) else None
        if switch not in ("fifo", "priority"):
            raise IncastError(f"{where}.switch: expected fifo or priority, got {switch!r}")
        efficiency = r.get("efficiency") or {}
        out[switch] = _incast_of(efficiency, INCAST_PATTERNS, where)
        if any(p in efficiency for p in INCAST_PER_CLASS_PATTERNS.values()):
            # Both or neither: half a per-class measurement is a broken file, not an old one.
            out[f"{switch}{PER_CLASS_KEY}"] = _incast_of(efficiency, INCAST_PER_CLASS_PATTERNS, where)
    return out


def _incast_of(efficiency: Mapping[str, Any], patterns: Mapping[str, str], where: str) -> Incast:
    values = {}
    for field, pattern in patterns.items():
        entry = efficiency.get(pattern)
        v = entry.get("mean") if isinstance(entry, dict) else None
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise IncastError(f"{where}.efficiency[{pattern!r}].mean: expected a number above 0, got {v!r}")
        values[field] = min(1.0, float(v))
    return Incast(**values)


# --- the profile -----------------------------------------------------------------------------------
def cluster_profile_key(config: Mapping[str, Any]) -> str:
    """The in-cluster profile's cache key: contention depends on the cluster's shape and links too."""
    return (
        f"cluster|{profile_key(config)}|workers{config['workers']}|ps{config['ps']}"
        f"|rate{int(config['rate_bits'])}"
    )


def choose_profile(
    result: Mapping[str, Any],
    config: Mapping[str, Any],
    profile_path: Path | None,
    progress: Progress,
    source: str,
) -> tuple[Profile, bool, dict[str, Any]]:
    """(profile, cached, what was used and why) for `source` "cluster" or "alone" (see predict)."""
    if source not in ("cluster", "alone"):
        raise PredictError(f"profile_source: expected cluster or alone, got {source!r}")
    fallback = None
    if source == "cluster":
        found, why = captured_or_cached(result, "incluster", cluster_profile_key(config), profile_path)
        if found is not None:
            return found[0], found[1], {"used": "cluster", "from": why}
        fallback = why
    profile, cached = load_or_measure_profile(config, profile_path, progress)
    chosen: dict[str, Any] = {"used": "alone", "from": "measured alone on this machine"}
    if fallback is not None:
        chosen["fallback"] = f"in-cluster profile unavailable: {fallback}"
    return profile, cached, chosen


# Modes whose cluster differs from the one `result["incluster"]` was traced in, each group traced in
# its own (geryon.demo.runner): group -> (the result's capture field, its modes, its workers: None for
# the config's). single: one worker computes on the machine's cores, not two; paired: the tasks run
# Geryon's data plane instead of gRPC.
OWN_PROFILES: dict[str, tuple[str, tuple[str, ...], int | None]] = {
    "single": ("incluster_single", tuple(n for n in MODES if demo_mode(n).single_worker), 1),
    "paired": ("incluster_paired", tuple(n for n in MODES if demo_mode(n).paired), None),
}


def choose_own_profile(
    result: Mapping[str, Any],
    config: Mapping[str, Any],
    profile_path: Path | None,
    other: Profile,
    field: str,
    workers: int | None,
) -> tuple[Profile, dict[str, Any]]:
    """A mode group's compute (OWN_PROFILES): its own cluster's in-cluster profile (`result[field]`),
    else one cached for that cluster (`workers` workers, the capture field in the key), else `other`
    (the ps mode's profile), each with what was used and why."""
    # Its own worker count keys a cluster apart; one with the config's shape (the ps mode's) needs
    # the capture field too.
    if workers is not None:
        key = cluster_profile_key({**config, "workers": workers})
    else:
        key = cluster_profile_key(config) + f"|{field}"
    found, why = captured_or_cached(result, field, key, profile_path)
    if found is not None:
        return found[0], {"used": "cluster", "from": why}
    return other, {"used": "other modes'", "from": f"the other modes' profile ({why})"}


def captured_or_cached(
    result: Mapping[str, Any], field: str, key: str, profile_path: Path | None
) -> tuple[tuple[Profile, bool] | None, str]:
    """((profile, cached) or None, why) for an in-cluster capture record `result[field]`: its profile
    (then cached under `key`, for a later run whose capture fails), else the one cached under `key`,
    else None; `why` says which ("this run's ps mode", "cache (this run: <its error>)") or, with
    None, why there is none."""
    rec = result.get(field)
    rec = rec if isinstance(rec, Mapping) else {}
    data = rec.get("profile")
    if isinstance(data, Mapping):
        profile = Profile.from_dict(dict(data), where=f"{field}.profile")
        if profile_path is not None:
            cache = _read_cache(profile_path)
            cache[key] = profile.to_dict()
            _write_cache(profile_path, cache)
        traced = str(rec.get("mode"))
        return (profile, False), f"this run's {traced} mode{'s' if '+' in traced else ''}"
    why = str(rec.get("error") or "this result has no in-cluster capture")
    cache = _read_cache(profile_path) if profile_path is not None else {}
    if key in cache:
        return (
            Profile.from_dict(cache[key], where=f"{profile_path}: {key}"),
            True,
        ), f"cache (this run: {why})"
    return None, why


def profile_key(config: Mapping[str, Any]) -> str:
    shape = "x".join(str(d) for d in config["input_shape"])
    threads = config["threads"] if config["threads"] is not None else "default"
    return f"{config['model']}|{shape}|batch{config['batch_size']}|threads{threads}|{socket.gethostname()}"


def load_or_measure_profile(
    config: Mapping[str, Any], profile_path: Path | None, progress: Progress
) -> tuple[Profile, bool]:
    """The cached profile for this setting, or a fresh measurement (then cached); and whether cached."""
    key = profile_key(config)
    cache = _read_cache(profile_path) if profile_path is not None else {}
    if key in cache:
        return Profile.from_dict(cache[key], where=f"{profile_path}: {key}"), True
    with progress.step(
        f"measuring the {config['model']} profile on this machine (batch {config['batch_size']})"
    ):
        profile = _measure_in_child(config, progress)
    if profile_path is not None:
        cache[key] = profile.to_dict()
        _write_cache(profile_path, cache)
    return profile, False


def _measure_in_child(config: Mapping[str, Any], progress: Progress) -> Profile:
    with tempfile.TemporaryDirectory(prefix="geryon-predict-") as tmp:
        out = Path(tmp) / "profile.json"
        argv = [
            sys.executable,
            "-m",
            "geryon.demo.predict",
            "--model",
            config["model"],
            "--input-shape",
            ",".join(str(d) for d in config["input_shape"]),
            "--batch-size",
            str(config["batch_size"]),
            "--out",
            str(out),
        ]
        if config["threads"] is not None:
            argv += ["--threads", str(config["threads"])]
        # The child's progress lines go on to ours as they come; the last ones explain a failure.
        tail: list[str] = []
        with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
                tail = [*tail[-2:], line.strip()]
                if progress.enabled:
                    progress.stream.write(line)
                    progress.stream.flush()
        if proc.returncode != 0:
            raise RuntimeError(
                f"measuring the {config['model']} profile failed (exit {proc.returncode}): {' | '.join(tail)}"
            )
        return Profile.load(out)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise PredictError(
            f"profile cache {path}: cannot read it ({e}); delete it to measure again"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("format") != CACHE_FORMAT
        or not isinstance(data.get("profiles"), dict)
    ):
        raise PredictError(f"profile cache {path}: not a {CACHE_FORMAT} file; delete it to measure again")
    return dict(data["profiles"])


def _write_cache(path: Path, profiles: Mapping[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: a concurrent reader (or a kill) never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump({"format": CACHE_FORMAT, "version": 1, "profiles": dict(profiles)}, f)
    os.replace(tmp, path)


def _config(result: Mapping[str, Any]) -> dict[str, Any]:
    config = result.get("config")
    if not isinstance(config, Mapping):
        raise PredictError("config: the result has no config object")

    def count(name: str) -> int:
        value = config.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PredictError(f"config.{name}: expected an integer >= 1, got {value!r}")
        return value

    shape = config.get("input_shape")
    if not (
        isinstance(shape, list | tuple)
        and len(shape) == 3
        and all(isinstance(d, int) and d >= 1 for d in shape)
    ):
        raise PredictError(f"config.input_shape: expected [H, W, C] positive integers, got {shape!r}")
    from geryon.cluster.models import MODELS

    if config.get("model") not in MODELS:
        raise PredictError(f"config.model: expected one of {', '.join(MODELS)}, got {config.get('model')!r}")
    rate = config.get("rate_bits")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        raise PredictError(f"config.rate_bits: expected bits/s above 0, got {rate!r}")
    slice_bytes = config.get("slice_bytes")
    if slice_bytes is not None:
        slice_bytes = count("slice_bytes")
    if config.get("threads") is not None:
        threads: int | None = count("threads")
    else:
        # Not in the result: the runner's default, which is what its tasks ran with.
        from geryon.demo.defaults import DEFAULTS

        threads = DEFAULTS.get("threads")
    return {
        "model": config["model"],
        "input_shape": tuple(shape),
        "batch_size": count("batch_size"),
        "workers": count("workers"),
        "ps": count("ps"),
        "rate_bits": float(rate),
        "slice_bytes": slice_bytes,
        "classes": count("classes") if config.get("classes") is not None else 2,
        "threads": threads
        if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1
        else None,
        "background_bits": _background_bits(config.get("background_bits")),
    }


def _background_bits(value: Any) -> float:
    """The result's background rate (absent or None in results from before it existed: none)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise PredictError(f"config.background_bits: expected bits/s >= 0, got {value!r}")
    return float(value)


# --- the child process -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Measures one profile (run by load_or_measure_profile in a child process) and saves it as JSON."""
    ap = argparse.ArgumentParser(prog="python -m geryon.demo.predict")
    ap.add_argument("--model", required=True)
    ap.add_argument("--input-shape", required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=PROFILE_ITERATIONS)
    ap.add_argument("--warmup", type=int, default=PROFILE_WARMUP)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from geryon.cluster.models import build_model
    from geryon.tfenv import import_tensorflow

    tf = import_tensorflow()
    if args.threads is not None:
        # As the worker tasks run (geryon.cluster.task): this many threads inside each op.
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    shape = tuple(int(d) for d in args.input_shape.split(","))
    model = build_model(args.model, shape)  # type: ignore[arg-type]
    from geryon.threshold.profiler import measure_profile

    profile = measure_profile(
        model,
        batch_size=args.batch_size,
        iterations=args.iterations,
        warmup=args.warmup,
        progress=Progress("geryon predict"),
    )
    meta = {**profile.meta, "threads": args.threads, "demo_model": args.model}
    Profile(
        profile.model,
        profile.batch_size,
        profile.layers,
        profile.params,
        profile.urgency_function,
        profile.source,
        meta,
    ).save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
