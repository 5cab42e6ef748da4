"""The per-step fixed cost of the demo's training round on this machine: what is neither compute nor transfer.

    .venv/bin/python bench/bench_step_cost.py [--runs 3] [--batches 4 32] [--seconds 8]
        [--workers 2] [--ps 2] [--model tiny] [--calibration out/bench/ps_costs.json]

Why: on `geryon demo --quick` the tiny model computes 1-3 ms of a 16-29 ms round, and the simulator,
which models compute and transfer only, predicts the round 20-50% short. The rest is what a round
costs whatever the model does: the chief's ClusterCoordinator scheduling one closure per worker and
joining, the closure's remote function call on each worker, op launches and the pull/push RPCs'
fixed parts.

How (real TensorFlow, the demo's own processes): a loopback cluster of the demo's task processes
(`geryon.cluster.local`, `--workers` x `--ps`, 1 intra-op thread each as the demo runs
them), trained by the demo's own chief (`python -m geryon.demo.chief`, vanilla: whole variables over
gRPC) on `--model`. Per run, the chief trains at each batch of `--batches` in a fresh random order
for `--seconds` (after its warm-up rounds), and the median round R(b) is taken at each. Compute grows
with the batch and nothing else in a round does, so the round at batch 0 is the line through the two
points at b = 0:  R0 = R(b1) - b1 x (R(b2) - R(b1)) / (b2 - b1). What R0 still holds besides the fixed
cost is the transfer of the model's parameters (pull and push, per-message costs), which the
simulator models: it is simulated for the same cluster (the model with zero compute, loopback at the
calibration's `loopback_s_per_byte`, its PS costs) and subtracted:  step_fixed_s = R0 - T_sim.
Each run is a fresh cluster; the value written is the median over runs (the table shows each run).

Writes the result into the calibration file (`--calibration`, bench/bench_ps_costs.py's
`geryon.ps-costs` JSON, which must exist: its loopback rate and PS costs are needed above) as the
optional knob `step_fixed_s` with its runs in `meta.step_fixed` and the value per worker count in
`meta.step_fixed_by_workers` (run it once per worker count the demo runs: `--workers 1` for
`single`), and JSON of its own (--out, default
out/bench/step_cost.json). `geryon.demo.predict` adds the knob to every predicted step.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.cluster.local import local_cluster
from geryon.demo.localchief import step_times, training_chief
from geryon.progress import Progress
from geryon.threshold.calibration import CalibrationError, knobs_document, load_knobs
from geryon.threshold.simknobs import PS_COST_KEYS, PsCosts


def median_round(
    lc: Any, workdir: Path, model: str, shape: tuple[int, ...], batch: int, seconds: float
) -> float:
    with training_chief(lc, workdir, model=model, input_shape=shape, batch_size=batch) as log:
        time.sleep(seconds)
        rounds = step_times(log)
    if len(rounds) < 3:
        raise RuntimeError(f"batch {batch}: only {len(rounds)} measured rounds in {seconds} s")
    return statistics.median(rounds)


def simulated_transfer(
    model: str, shape: tuple[int, ...], workers: int, num_ps: int, knobs: dict[str, float]
) -> float:
    """One round of the same cluster with zero compute: the pulls and pushes the simulator models."""
    from geryon.cluster.models import build_model
    from geryon.threshold.profiles import profile_from_model
    from geryon.threshold.simulator import simulate

    # 1e30 FLOP/s: compute of 1e-24 s, i.e. none, with the model's real parameters.
    profile = profile_from_model(build_model(model, shape), batch_size=1, device=1e30)  # type: ignore[arg-type]
    sim = simulate(
        profile,
        workers=workers,
        num_ps=num_ps,
        bandwidth_bps=8 / knobs["loopback_s_per_byte"],
        mode="fifo",
        partition=False,
        interleave=True,
        barrier=True,
        colocate=False,
        iterations=4,
        ps_costs=PsCosts(**{k: knobs[k] for k in PS_COST_KEYS}),
    )
    return sim.iteration_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs=2, default=[4, 32], metavar=("B1", "B2"))
    ap.add_argument("--seconds", type=float, default=8.0, help="measured time per batch and run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibration", default="out/bench/ps_costs.json", help="geryon.ps-costs JSON to update")
    ap.add_argument("--out", default="out/bench/step_cost.json")
    args = ap.parse_args()
    b1, b2 = sorted(args.batches)
    if b1 < 1 or b1 == b2:
        ap.error(f"--batches: expected two different batch sizes >= 1, got {args.batches}")
    if args.runs < 1 or args.seconds <= 0:
        ap.error("--runs must be >= 1 and --seconds > 0")
    try:
        knobs = load_knobs(args.calibration)
    except CalibrationError as e:
        print(f"error: --calibration: {e} (run bench/bench_ps_costs.py first)", file=sys.stderr)
        return 2
    from geryon.cluster.models import ModelError, check_model

    try:
        shape = check_model(args.model, None)
    except ModelError as e:
        print(f"error: --model: {e}", file=sys.stderr)
        return 2
    progress = Progress("bench_step_cost")
    transfer = simulated_transfer(args.model, shape, args.workers, args.ps, knobs)
    rng = random.Random(args.seed)
    rows = []
    for run in range(args.runs):
        order = [b1, b2]
        rng.shuffle(order)
        with (
            progress.step(f"run {run + 1}/{args.runs}: cluster of {args.workers} workers x {args.ps} PSes"),
            tempfile.TemporaryDirectory(prefix="geryon-stepcost-") as tmp,
            local_cluster(args.ps, args.workers, chief=True) as lc,
        ):
            r = {}
            for b in order:
                workdir = Path(tmp) / f"b{b}"
                workdir.mkdir()
                r[b] = median_round(lc, workdir, args.model, shape, b, args.seconds)
        r0 = r[b1] - b1 * (r[b2] - r[b1]) / (b2 - b1)
        rows.append(
            {
                "run": run + 1,
                "order": "/".join(map(str, order)),
                "r1_ms": r[b1] * 1e3,
                "r2_ms": r[b2] * 1e3,
                "r0_ms": r0 * 1e3,
                "transfer_ms": transfer * 1e3,
                "fixed_ms": (r0 - transfer) * 1e3,
            }
        )
    fixed = statistics.median(row["fixed_ms"] for row in rows) / 1e3
    print(
        f"\n{args.model}, {args.workers} workers x {args.ps} PSes on loopback, {args.seconds:g} s per batch:"
    )
    print_table(
        rows,
        [
            ("run", "run", "d"),
            ("order", "batches run", "s"),
            ("r1_ms", f"round @{b1} ms", ".2f"),
            ("r2_ms", f"round @{b2} ms", ".2f"),
            ("r0_ms", "round @0 ms", ".2f"),
            ("transfer_ms", "sim transfer ms", ".3f"),
            ("fixed_ms", "fixed ms", ".2f"),
        ],
    )
    spread = [row["fixed_ms"] for row in rows]
    print(
        f"step_fixed_s = {fixed:.4g} s (median of {len(rows)} runs; {min(spread):.2f}-{max(spread):.2f} ms)"
    )
    if fixed < 0:
        print("error: the fixed cost came out negative: rounds too noisy; not written", file=sys.stderr)
        return 1
    meta_step = {
        "bench": "bench/bench_step_cost.py",
        "model": args.model,
        "batches": [b1, b2],
        "workers": args.workers,
        "ps": args.ps,
        "seconds_per_batch": args.seconds,
        "runs": rows,
        "host": socket.gethostname(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    doc = json.loads(Path(args.calibration).read_text())
    base = {k: knobs[k] for k in knobs if k != "step_fixed_s"}
    meta = dict(doc.get("meta", {}))
    # One value per worker count (a round schedules one closure per worker: 1 worker costs less);
    # the knob is the latest, for worker counts not measured.
    by_workers = {**meta.get("step_fixed_by_workers", {}), str(args.workers): fixed}
    meta.update(step_fixed=meta_step, step_fixed_by_workers=by_workers)
    updated = knobs_document({**base, "step_fixed_s": fixed}, meta)
    Path(args.calibration).write_text(json.dumps(updated, indent=1) + "\n")
    print(f"calibration: {args.calibration} (knobs.step_fixed_s)")
    write_json(args.out, {"step_fixed_s": fixed, **meta_step, "calibration": args.calibration})
    return 0


if __name__ == "__main__":
    sys.exit(main())
