"""What a parameter server's work costs on this machine: the five knobs of `geryon.threshold.calibration`.

    .venv/bin/python bench/bench_ps_costs.py [--runs 3] [--repeats 21] [--out out/bench/ps_costs.json]

Real TensorFlow over gRPC on loopback: one PS and one worker task process
(`geryon.cluster.local`: the demo's task processes, 1 intra-op and 2 inter-op threads each,
as the demo runs them), and a TF1 session from this process to the worker. Every knob is a paired
difference of two graphs that differ only in the thing measured, so the step's fixed cost (session
run, the fetch back to this client) cancels:

  aggregate_s_per_byte  on the PS, `acc.assign_add(grad)` of float32 tensors of 16 MiB minus 1 MiB,
                        per byte of the difference (what summing one more worker's gradient costs)
  update_s_per_byte     on the PS, ResourceApplyMomentum (variable, accumulator, gradient) of 16 MiB
                        minus 1 MiB, per variable byte
  per_message_s         the worker reads 17 minus 1 4-byte variables that live on the PS, divided by
                        16: what one more small RecvTensor costs in a step (they run concurrently,
                        as a step's pulls do). The cost of a step touching the PS at all (4-byte
                        variable on the PS minus on the worker: one more RunGraph and one round
                        trip) is reported beside it as step_remote_s, not a knob
  per_slice_s           the worker pulls 4 MiB as 16 slices (16 variables, concatenated, as TF reads a
                        partitioned variable) minus as one variable, divided by 15: INCLUDES the extra
                        messages' per-message cost and the concat
  loopback_s_per_byte   the worker pulls a 16 MiB minus a 1 MiB variable, per byte

Per repeat, every graph runs once, in a fresh random order (interleaved, so machine load hits all
alike); a knob is the median over `--repeats` of its per-repeat paired difference; each run is a
fresh cluster, and the knob written is the median over `--runs` (the table shows each run and the
spread). Writes the `geryon.ps-costs` JSON `calibration.load_knobs` reads (default
out/bench/ps_costs.json), with every per-run value in its meta.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.cluster.local import local_cluster
from geryon.progress import Progress
from geryon.threshold.calibration import KNOBS, knobs_document

MIB = 1 << 20
SMALL, LARGE = 1 * MIB, 16 * MIB
SLICED, SLICES = 4 * MIB, 16
MESSAGES = 16
WARMUP = 3
PS, WORKER = "/job:ps/task:0", "/job:worker/task:0"


def build(tf: Any) -> tuple[Any, dict[str, Any]]:
    """The graph and one fetch per variant (each fetch returns a scalar or nothing)."""
    tf1 = tf.compat.v1
    g = tf.Graph()
    fetches: dict[str, Any] = {}

    def var(name: str, nbytes: int) -> Any:
        return tf1.get_variable(name, [nbytes // 4], initializer=tf1.ones_initializer(), use_resource=True)

    with g.as_default():
        with tf1.device(PS):
            for label, size in (("small", SMALL), ("large", LARGE)):
                acc, grad = var(f"acc_{label}", size), var(f"grad_{label}", size)
                fetches[f"agg_{label}"] = acc.assign_add(grad.read_value(), read_value=False)
                v, m, gr = var(f"v_{label}", size), var(f"m_{label}", size), var(f"g_{label}", size)
                fetches[f"upd_{label}"] = tf.raw_ops.ResourceApplyMomentum(
                    var=v.handle,
                    accum=m.handle,
                    lr=tf.constant(1e-9),
                    grad=gr.read_value(),
                    momentum=tf.constant(0.9),
                )
            tiny_ps = [var(f"tiny_ps{i}", 4) for i in range(MESSAGES + 1)]
            pull_small, pull_large = var("pull_small", SMALL), var("pull_large", LARGE)
            whole = var("whole", SLICED)
            pieces = [var(f"piece{i}", SLICED // SLICES) for i in range(SLICES)]
        with tf1.device(WORKER):
            tiny_local = var("tiny_local", 4)
            # Read on the worker and keep one element: the whole tensor must arrive, little is computed.
            fetches["msg_remote"] = tiny_ps[0].read_value()[0] + 1.0
            fetches["msg_n"] = tf.add_n([t.read_value()[0] for t in tiny_ps])
            fetches["msg_local"] = tiny_local.read_value()[0] + 1.0
            fetches["pull_small"] = pull_small.read_value()[0] + 1.0
            fetches["pull_large"] = pull_large.read_value()[0] + 1.0
            fetches["slice_1"] = whole.read_value()[0] + 1.0
            fetches["slice_n"] = tf.concat([p.read_value() for p in pieces], axis=0)[0] + 1.0
        init = tf1.global_variables_initializer()
    fetches["_init"] = init
    return g, fetches


PAIRS = {
    "aggregate_s_per_byte": ("agg_large", "agg_small", LARGE - SMALL),
    "update_s_per_byte": ("upd_large", "upd_small", LARGE - SMALL),
    "per_message_s": ("msg_n", "msg_remote", MESSAGES),
    "per_slice_s": ("slice_n", "slice_1", SLICES - 1),
    "loopback_s_per_byte": ("pull_large", "pull_small", LARGE - SMALL),
}


def run_once(repeats: int, seed: int, progress: Progress) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    rng = random.Random(seed)
    with local_cluster(1) as lc:
        g, fetches = build(tf)
        sess = tf.compat.v1.Session(lc.worker_target, graph=g)
        sess.run(fetches.pop("_init"))
        names = sorted(fetches)
        for _ in range(WARMUP):
            for name in names:
                sess.run(fetches[name])
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(repeats):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                start = time.perf_counter()
                sess.run(fetches[name])
                samples[name].append(time.perf_counter() - start)
            if (r + 1) % 7 == 0:
                progress.say(f"{r + 1}/{repeats} repeats")
        sess.close()
    knobs = {}
    for knob, (a, b, per) in PAIRS.items():
        diffs = [(x - y) / per for x, y in zip(samples[a], samples[b], strict=True)]
        knobs[knob] = statistics.median(diffs)
    remote = [x - y for x, y in zip(samples["msg_remote"], samples["msg_local"], strict=True)]
    return {
        "knobs": knobs,
        "step_remote_s": statistics.median(remote),
        "medians_s": {n: statistics.median(s) for n, s in samples.items()},
    }


def measure(
    runs: int, repeats: int, seed: int, progress: Progress
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """`runs` fresh clusters of `repeats` interleaved repeats each: the knobs (median over runs) and
    every run's record. The demo calls this too (geryon.demo.pscosts), with a smaller budget."""
    if runs < 1 or repeats < 1:
        raise ValueError(f"runs and repeats must be >= 1, got {runs} and {repeats}")
    records = []
    for i in range(runs):
        progress.say(f"run {i + 1}/{runs}: {repeats} interleaved repeats")
        records.append(run_once(repeats, seed + i, progress))
    final = {k: statistics.median(r["knobs"][k] for r in records) for k in KNOBS}
    return final, records


def document(
    final: dict[str, float], runs: list[dict[str, Any]], repeats: int, bench: str = ""
) -> dict[str, Any]:
    """The `geryon.ps-costs` JSON of a measurement; a CalibrationError (naming the knob) when a knob
    is negative: the noise was larger than the effect, so there is nothing to write."""
    meta = {
        "host": socket.gethostname(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "runs": len(runs),
        "repeats": repeats,
        "statistic": "median over runs of the median over repeats of paired differences",
        "per_run": runs,
        "sizes_bytes": {"small": SMALL, "large": LARGE, "sliced": SLICED, "slices": SLICES},
        "threads": {"intra": 1, "inter": 2},
        "per_slice_includes_per_message": True,
        "bench": bench or "bench/bench_ps_costs.py",
    }
    return knobs_document(final, meta)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/bench/ps_costs.json")
    args = ap.parse_args()
    if args.runs < 1 or args.repeats < 1:
        ap.error("--runs and --repeats must be >= 1")
    progress = Progress("bench_ps_costs")
    final, runs = measure(args.runs, args.repeats, args.seed, progress)
    rows = []
    for k in KNOBS:
        per_run = [r["knobs"][k] for r in runs]
        rows.append({"knob": k, "value": final[k], "min": min(per_run), "max": max(per_run)})
        for i, v in enumerate(per_run):
            rows[-1][f"run{i + 1}"] = v
    print(f"\nPS costs on {socket.gethostname()}: medians of paired differences over {args.repeats} repeats,")
    print(f"median over {args.runs} runs (fresh cluster each); negative = below the noise floor")
    print_table(
        rows,
        [("knob", "knob", "s"), ("value", "value", ".3g"), ("min", "min", ".3g"), ("max", "max", ".3g")]
        + [(f"run{i + 1}", f"run{i + 1}", ".3g") for i in range(args.runs)],
    )
    remote = [r["step_remote_s"] for r in runs]
    print(
        f"step_remote_s (not a knob): {statistics.median(remote):.3g} "
        f"(runs {min(remote):.3g}-{max(remote):.3g})"
    )
    if any(v < 0 for v in final.values()):
        bad = ", ".join(k for k, v in final.items() if v < 0)
        print(f"error: {bad} came out negative (noise larger than the effect); not writing {args.out}")
        return 1
    write_json(args.out, document(final, runs, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
