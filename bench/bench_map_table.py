"""Cost of a map_table change: writing, parsing and installing a version, and reaching every task.

    .venv/bin/python bench/bench_map_table.py [--repeats 9] [--out out/bench/map_table.json]

Rows (medians over repeats, side by side in one run):
  install N params   Python writes the native text (to_native) and this process installs it through
                     GeryonSetMapTable (parse, validate, atomic swap; the install column also holds
                     one GeryonMapTable read, for the next version number); N = 680 is the paper's
                     VGG-19 slice count, 1M an extreme
  ClassForEdge       ns per lookup (the rendezvous' per-tensor cost) for a TF2 annotated edge, a
                     TF1 edge resolved through a producer binding, and an edge with no parameter
  set_thresholds     a new version installed on a real cluster (coordinator, 1 PS and 2 worker
                     processes on grpc+geryon, one eager op per task), beside one training step of
                     the small model the cluster trains, to show what a change costs next to a step
Writes JSON (default out/bench/map_table.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from geryon.tf.ports import free_port_pairs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import GERYON_SERVER, child_env, child_servers, median_time, print_table, write_json

from geryon.progress import Progress

SIZES = (680, 10_000, 1_000_000)
DATA_OFFSET = -7000


def bench_install(repeats: int) -> list[dict[str, Any]]:
    from geryon.tagger.map_table import MapTable
    from geryon.tf.map_table_native import to_native
    from geryon.tf.strategy import native_ops

    ops = native_ops()
    rows = []
    for n in SIZES:
        table = MapTable.build(
            [f"layer{i}/kernel" for i in range(n)], [i / n for i in range(n)], [0.5], "layer"
        )
        write_s = median_time(lambda t=table: to_native(t), repeats)

        def install(t: MapTable = table) -> None:
            version = int(ops.geryon_map_table()[0]) + 1  # each install must be a newer version
            ops.geryon_set_map_table(to_native(MapTable(version, t.thresholds, "layer", t.entries)))

        total_s = median_time(install, repeats)
        rows.append(
            {
                "row": f"install {n} params",
                "bytes": len(to_native(table)),
                "write_ms": write_s * 1e3,
                "install_ms": (total_s - write_s) * 1e3,
                "total_ms": total_s * 1e3,
            }
        )
    return rows


def bench_lookup(repeats: int) -> list[dict[str, Any]]:
    """ns per ClassForEdge, by how the edge resolves, with a VGG-19-sized table (680 parameters)."""
    from geryon.tagger.map_table import MapTable
    from geryon.tf import load
    from geryon.tf.map_table_native import to_native
    from geryon.tf.strategy import native_ops

    n = 680
    ops = native_ops()
    cdll = load().cdll  # geryon_bench_class_lookup_ns: a tight loop in C++, no Python per call
    version = int(ops.geryon_map_table()[0]) + 1
    table = MapTable.build(
        [f"layer{i}/kernel" for i in range(n)], [i / n for i in range(n)], [0.5], "layer", version
    )
    bindings = {f"layer{i}/kernel/Read/ReadVariableOp": i for i in range(n)}
    bindings.update({f"gradients/layer{i}/MatMul_grad/tuple/control_dependency_1": i for i in range(n)})
    ops.geryon_set_map_table(to_native(table, bindings))
    edges = {
        "TF2 annotated (#gp=<id>)": "edge_1316_sequential_1/layer340/Cast/ReadVariableOp#gp=340",
        "TF1 producer binding": "edge_1316_gradients/layer340/MatMul_grad/tuple/control_dependency_1",
        "no parameter (default)": "edge_17_Add",
    }
    rows = []
    for what, edge in edges.items():
        samples = [cdll.geryon_bench_class_lookup_ns(edge.encode(), 200_000) for _ in range(repeats)]
        rows.append({"row": what, "ns": statistics.median(samples)})
    return rows


def bench_cluster(cluster: dict[str, list[str]], repeats: int, progress: Progress) -> dict[str, Any]:
    """Times a step and a threshold change as the coordinator of `cluster`, whose servers run."""
    import keras
    import tensorflow as tf

    from geryon.tf import PROTOCOL
    from geryon.tf.strategy import strategy

    os.environ["GERYON_DATA_PORT_OFFSET"] = str(DATA_OFFSET)
    progress.say("cluster up: 1 PS, 2 workers")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), rpc_layer=PROTOCOL
    )

    def make_model() -> Any:
        keras.utils.set_random_seed(0)
        return keras.Sequential(
            [keras.Input((32,)), *(keras.layers.Dense(64, name=f"d{i}") for i in range(6))]
        )

    g = strategy(resolver, make_model, thresholds=[0.5])
    coordinator = tf.distribute.coordinator.ClusterCoordinator(g.tf_strategy)
    with g.scope():
        optimizer = keras.optimizers.SGD(0.001)

    @tf.function
    def step(x: Any) -> Any:
        def replica(x: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(g.model(x) ** 2)
            grads = tape.gradient(loss, g.model.trainable_variables)
            optimizer.apply_gradients(zip(grads, g.model.trainable_variables, strict=True))
            return loss

        return g.tf_strategy.run(replica, args=(x,))

    x = tf.ones([16, 32])
    coordinator.schedule(step, args=(x,)).fetch()  # trace and warm up
    step_s, change_s = [], []
    for i in range(repeats):
        start = time.perf_counter()
        coordinator.schedule(step, args=(x,)).fetch()
        step_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        g.set_thresholds([0.3] if i % 2 == 0 else [0.7])
        change_s.append(time.perf_counter() - start)
        progress.say(f"repeat {i + 1}/{repeats}")
    return {
        "tasks": len(g.devices),
        "step_ms": statistics.median(step_s) * 1e3,
        "set_thresholds_ms": statistics.median(change_s) * 1e3,
        "ratio": statistics.median(change_s) / statistics.median(step_s),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9, help="repeats per timing (median reported)")
    ap.add_argument("--out", default="out/bench/map_table.json")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    from geryon.tfenv import import_tensorflow

    import_tensorflow()
    progress = Progress("bench_map_table")
    progress.say("installing tables of 680, 10k and 1M parameters")
    install = bench_install(args.repeats)
    progress.say("timing class lookups")
    lookup = bench_lookup(args.repeats)
    progress.say("starting a grpc+geryon cluster")
    ports = free_port_pairs(4, DATA_OFFSET)
    cluster_spec = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
        "ps": [f"127.0.0.1:{ports[3]}"],
    }
    offset = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    tasks = (("ps", 0), ("worker", 0), ("worker", 1))
    envs = [child_env({"cluster": cluster_spec, "job": job, "index": i}, **offset) for job, i in tasks]
    # The servers are killed (by PID) after reporting: the coordinator logs errors once they are gone.
    with child_servers(GERYON_SERVER, envs):
        cluster = bench_cluster(cluster_spec, args.repeats, progress)
        report(install, lookup, cluster, args)
    return 0


def report(
    install: list[dict[str, Any]],
    lookup: list[dict[str, Any]],
    cluster: dict[str, Any],
    args: argparse.Namespace,
) -> None:
    print_table(
        install,
        [
            ("row", "row", "s"),
            ("bytes", "text bytes", "d"),
            ("write_ms", "to_native ms", ".3f"),
            ("install_ms", "native install ms", ".3f"),
            ("total_ms", "total ms", ".3f"),
        ],
    )
    print()
    print_table(lookup, [("row", "ClassForEdge, 680-parameter table", "s"), ("ns", "ns per lookup", ".1f")])
    print()
    print_table(
        [cluster],
        [
            ("tasks", "tasks", "d"),
            ("step_ms", "one step ms", ".2f"),
            ("set_thresholds_ms", "set_thresholds ms", ".2f"),
            ("ratio", "change / step", ".2f"),
        ],
    )
    write_json(args.out, {"repeats": args.repeats, "install": install, "lookup": lookup, "cluster": cluster})


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter shutdown: the coordinator's eager context would try to reach the servers
    # this script has already killed and log connection errors.
    os._exit(code)
