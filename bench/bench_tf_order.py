"""In which order, and how overlapped, does TensorFlow's gRPC PS training really move its variables?

    .venv/bin/python bench/bench_tf_order.py [--runs 2] [--iterations 40] [--num-ps 3]
        [--out out/bench/tf_order.json]

Real TensorFlow PS training over gRPC on loopback: `--num-ps` PS task processes and one worker task
(`geryon.cluster.local`, the demo's own task processes), a TF1 graph with 8 dense layers
(16 trainable variables of 0.5 KiB to 8 MiB, `replica_device_setter` round-robin over the PSes),
momentum SGD, batch 32. Each of `--iterations` steps (after 5 untraced warm-up steps) runs with
FULL_TRACE; TensorFlow's own RecvTensor records in the step stats (`transfer_order.recvs`) give, per
pulled variable, when the worker requested it and when it had arrived. Each run is a fresh cluster.

Per run it prints (medians over iterations unless said):
  distinct    fraction of iterations whose arrival order of the 16 pulls is not seen in another
  tau_cons    Kendall tau of the arrival order against the consumption order (layer order)
  tau_size    per PS, Kendall tau of the arrival order against ascending size, averaged over PSes:
              near 1 means a fair share (small tensors finish first), near 0 one-at-a-time in an
              order unrelated to size
  in_flight   pulls requested and not yet arrived, time-averaged over the pull phase (of 16)
  per_ps      the same per PS connection (over that PS's own span), averaged over the PSes: how
              many pulls one gRPC channel has outstanding
  interleave  fraction of summed pull wire time (`transfer_order.wire_intervals`: per PS connection,
              from the later of request and the previous arrival, to arrival) during which another
              pull is also on the wire (`transfer_order.interleave`: 0 = one at a time, near 1 =
              always shared); the same over [request, arrival] spans is `outstanding_overlap` in JSON
  push_*      the same two overlap figures for the gradient pushes the PSes receive
Tracing costs the step some time (TicTac measured the same way, with RunMetadata); the order is what
the replay needs, and the tracer does not reorder RPCs. Writes JSON (default out/bench/tf_order.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.cluster.local import local_cluster
from geryon.progress import Progress
from geryon.threshold.transfer_order import interleave, kendall_tau, mean_in_flight, recvs, wire_intervals

WIDTHS = (512, 1024, 2048, 1024, 768, 1536, 512, 256, 128)  # 8 layers: 16 variables
BATCH = 32
WARMUP = 5


def run_once(num_ps: int, iterations: int, progress: Progress) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf1 = tf.compat.v1
    with local_cluster(num_ps) as lc:
        g = tf.Graph()
        with g.as_default():
            setter = tf1.train.replica_device_setter(
                ps_tasks=num_ps, worker_device="/job:worker/task:0", cluster=lc.cluster
            )
            with tf1.device(setter):
                h = tf1.random_normal([BATCH, WIDTHS[0]])
                for layer in range(len(WIDTHS) - 1):
                    w = tf1.get_variable(f"l{layer}/kernel", [WIDTHS[layer], WIDTHS[layer + 1]])
                    b = tf1.get_variable(
                        f"l{layer}/bias", [WIDTHS[layer + 1]], initializer=tf1.zeros_initializer()
                    )
                    h = tf.nn.relu(tf.matmul(h, w) + b)
                loss = tf.reduce_mean(h)
                train = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
                init = tf1.global_variables_initializer()
            variables = [v.op.name for v in tf1.trainable_variables()]
            sizes = {v.op.name: int(v.shape.num_elements()) * 4 for v in tf1.trainable_variables()}
            ps_of = {v.op.name: v.device for v in tf1.trainable_variables()}
        sess = tf1.Session(lc.worker_target, graph=g)
        sess.run(init)
        for _ in range(WARMUP):
            sess.run(train)
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        rows = []
        for it in range(iterations):
            md = tf1.RunMetadata()
            sess.run(train, options=options, run_metadata=md)
            pulls = []
            for r in recvs(md.step_stats, "/job:worker/"):
                try:
                    op = g.get_operation_by_name(r.node)
                except KeyError:
                    continue
                if op.type == "ReadVariableOp" and op.inputs[0].op.name in sizes:
                    pulls.append((op.inputs[0].op.name, r))
            pushes = [r for r in recvs(md.step_stats, "/job:ps/") if r.node.startswith("gradients/")]
            rows.append(_iteration(pulls, pushes, variables, sizes, ps_of))
            if (it + 1) % 10 == 0:
                progress.say(f"{it + 1}/{iterations} traced steps")
        sess.close()
    orders = Counter(tuple(r["order"]) for r in rows)
    return {
        "iterations": rows,
        "distinct": sum(1 for r in rows if orders[tuple(r["order"])] == 1) / len(rows),
        "unique_orders": len(orders),
        **{
            key: statistics.median(r[key] for r in rows if r[key] is not None)
            for key in (
                "tau_cons",
                "tau_size",
                "in_flight",
                "in_flight_per_ps",
                "interleave",
                "outstanding_overlap",
                "push_in_flight",
                "push_interleave",
            )
        },
        "pulls": len(variables),
    }


def _iteration(
    pulls: list[tuple[str, Any]],
    pushes: list[Any],
    variables: list[str],
    sizes: dict[str, int],
    ps_of: dict[str, str],
) -> dict[str, Any]:
    if sorted(name for name, _ in pulls) != sorted(variables):
        raise RuntimeError(f"expected one pull per variable, got {sorted(n for n, _ in pulls)}")
    order = [name for name, _ in pulls]  # by arrival
    by_ps: dict[str, list[str]] = defaultdict(list)
    for name in order:
        by_ps[ps_of[name]].append(name)
    size_taus = [
        kendall_tau(names, sorted(names, key=lambda n: (sizes[n], n)))
        for names in by_ps.values()
        if len(names) > 1
    ]
    spans = [(r.start_us, r.end_us) for _, r in pulls]
    per_ps = [
        mean_in_flight([(r.start_us, r.end_us) for name, r in pulls if ps_of[name] == ps]) for ps in by_ps
    ]
    wire = wire_intervals([r for _, r in pulls])
    push_spans = [(r.start_us, r.end_us) for r in pushes]
    push_wire = wire_intervals(pushes)
    return {
        "order": order,
        "tau_cons": kendall_tau(order, variables),
        "tau_size": statistics.fmean(size_taus) if size_taus else None,
        "in_flight": mean_in_flight(spans),
        "in_flight_per_ps": statistics.fmean(per_ps),
        "interleave": interleave(wire),
        "outstanding_overlap": interleave(spans),
        "push_in_flight": mean_in_flight(push_spans) if push_spans else None,
        "push_interleave": interleave(push_wire) if push_wire else None,
        "pull_span_us": max(e for _, e in spans) - min(s for s, _ in spans),
        "arrival_us": [r.end_us - min(s for s, _ in spans) for _, r in pulls],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--num-ps", type=int, default=3)
    ap.add_argument("--out", default="out/bench/tf_order.json")
    args = ap.parse_args()
    for name in ("runs", "iterations", "num_ps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    progress = Progress("bench_tf_order")
    runs = []
    for i in range(args.runs):
        progress.say(f"run {i + 1}/{args.runs}: {args.num_ps} PSes, {args.iterations} traced steps")
        runs.append(run_once(args.num_ps, args.iterations, progress))
    table = [{"run": i + 1, **{k: v for k, v in r.items() if k != "iterations"}} for i, r in enumerate(runs)]
    print(
        f"\nTF gRPC PS training, 16 variables on {args.num_ps} PSes, {args.iterations} traced steps per run"
    )
    print_table(
        table,
        [
            ("run", "run", "d"),
            ("distinct", "distinct", ".2f"),
            ("unique_orders", "orders", "d"),
            ("tau_cons", "tau_cons", ".3f"),
            ("tau_size", "tau_size", ".3f"),
            ("in_flight", "in_flight", ".2f"),
            ("in_flight_per_ps", "per_ps", ".2f"),
            ("interleave", "interleave", ".3f"),
            ("push_in_flight", "push_in_flight", ".2f"),
            ("push_interleave", "push_interleave", ".3f"),
        ],
    )
    write_json(
        args.out,
        {
            "bench": "tf_order",
            "num_ps": args.num_ps,
            "widths": list(WIDTHS),
            "batch": BATCH,
            "warmup": WARMUP,
            "runs": runs,
            "definitions": {
                "distinct": "fraction of iterations whose pull arrival order occurs once in the run",
                "tau_cons": "median Kendall tau-a, arrival order vs consumption (layer) order",
                "tau_size": "median of the mean over PSes of Kendall tau, arrival vs ascending size",
                "in_flight": "median of the time-average number of pulls requested and not arrived",
                "in_flight_per_ps": "the same per PS connection over its own span, mean over PSes",
                "interleave": "median fraction of summed pull wire time shared with another pull on the wire",
                "outstanding_overlap": "the same over [request, arrival] spans",
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
