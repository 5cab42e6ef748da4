"""Data-plane throughput and per-message cost: TF's `grpc` against `grpc+geryon`, side by side.

    .venv/bin/python bench/bench_rendezvous.py [--repeats 9] [--out out/bench/rendezvous.json]

Two real clusters on loopback (one PS and one worker process each, one per protocol) run at the
same time; one client process holds a TF1 session to each and alternates between them, so both
protocols see the same machine load. Rows (medians over repeats):
  pull N MB       one step whose worker receives an N MB float32 variable from the PS
                  (MB/s = N MB / step time; the step's fixed cost is included, as a user sees it)
  200 x 4 B       one step moving 200 tiny variables: step time / 200 = per-message cost
  1 x 4 B         one step moving one tiny variable: the fixed cost of a step
  class lookup    ns per ClassForEdge call (annotated and plain edge names), in-process
Target (issue 4): grpc+geryon at least as fast as grpc. Writes JSON (default out/bench/rendezvous.json).
With --device: tensors in accelerator memory vs host memory instead (see bench_device_tensors.py).
With --order: urgency vs arrival order inside one class (issue 14; see bench_rendezvous_order.py).
With --baseline-ref REF or --baseline-lib PATH: this checkout's build of the data plane against
another build, interleaved round by round (issue 16; see bench_rendezvous_libs.py).
With --floor: the per-tensor 4 KiB cost of this build, plain grpc, and the same step with the
variables on the worker's own task (TF's own cost; issue 16).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    PULL_SESSIONS,
    child_env,
    child_servers,
    print_table,
    ps_worker_clusters,
    run_client,
    write_json,
)

from geryon.progress import Progress
from geryon.tf.build import build

DATA_OFFSET = -7000
PROTOCOLS = ("grpc", "grpc+geryon")
SIZES_MB = (1, 16, 100)
SMALL = 200

_SERVER = r"""
import json, os, sys, time
import tensorflow as tf
spec = json.loads(os.environ["BENCH_SPEC"])
cluster = tf.train.ClusterSpec(spec["cluster"])
if spec["protocol"] == "grpc+geryon":
    import geryon.tf
    server = geryon.tf.server(cluster, spec["job"], 0)
else:
    server = tf.distribute.Server(cluster, job_name=spec["job"], task_index=0, protocol="grpc")
print("READY", flush=True)
while True:
    time.sleep(1)
"""

# After PULL_SESSIONS (one session per protocol): each row's repeats, alternating between the protocols.
_CLIENT = (
    PULL_SESSIONS
    + r"""
samples = {p: {name: [] for name in fetches} for p in sessions}
for name in fetches:
    repeats = spec["repeats"] * (3 if "B" in name and "MB" not in name else 1)
    for _ in range(repeats):
        for protocol, (sess, f) in sessions.items():  # alternate: same load for both
            start = time.perf_counter()
            sess.run(f[name])
            samples[protocol][name].append(time.perf_counter() - start)
    print(f"bench: {name} done", file=sys.stderr, flush=True)
print("RESULT " + json.dumps(samples), flush=True)
os._exit(0)
"""
)


# The clients' environment: the data plane's port offset the servers were started with.
DATA_PORT_ENV = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}


@contextmanager
def protocol_clusters(
    protocols: Sequence[str],
) -> Iterator[tuple[dict[str, dict[str, list[str]]], list[subprocess.Popen[str]]]]:
    """Per protocol, a loopback cluster of one PS and one worker server process (this checkout's build
    for grpc+geryon), each up before the block starts; yields (protocol -> cluster spec, the server
    processes, for run_client to watch), and kills the servers when the block ends. Shared with
    bench_rendezvous_libs.py's --floor."""
    clusters = ps_worker_clusters(protocols, DATA_OFFSET)
    envs = [
        child_env({"cluster": cluster, "job": job, "protocol": protocol}, **DATA_PORT_ENV)
        for protocol, cluster in clusters.items()
        for job in ("ps", "worker")
    ]
    with child_servers(_SERVER, envs) as servers:
        yield clusters, servers


def measure(repeats: int, progress: Progress) -> dict[str, dict[str, list[float]]]:
    with protocol_clusters(PROTOCOLS) as (clusters, servers):
        workers = {protocol: cluster["worker"][0] for protocol, cluster in clusters.items()}
        progress.say("4 servers up; measuring (the client alternates between the two clusters)")
        spec = {
            "workers": workers,
            "pulls_mb": list(SIZES_MB),
            "small": SMALL,
            "small_floats": 1,
            "small_label": "4 B",
            "warmups": 1,
            "repeats": repeats,
        }
        result: dict[str, dict[str, list[float]]] = run_client(
            _CLIENT, child_env(spec, **DATA_PORT_ENV), servers=servers
        )
        return result


def lookup_ns() -> dict[str, float]:
    import geryon.tf

    cdll = geryon.tf.load().cdll
    edges = {
        "annotated": b"edge_16_sequential/dense/Cast/ReadVariableOp#gp=12",
        "plain": b"edge_147_sgd/IdentityN",
    }
    return {name: cdll.geryon_bench_class_lookup_ns(edge, 2_000_000) for name, edge in edges.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=9, help="steps per row and protocol (small rows: 3x)")
    parser.add_argument("--out", default=None, help="default out/bench/rendezvous[_device].json")
    parser.add_argument(
        "--device",
        action="store_true",
        help="device tensors: pulls into / pushes from GERYONTEST memory vs host (bench_device_tensors.py)",
    )
    parser.add_argument(
        "--order",
        action="store_true",
        help="order inside a class: 64 mixed tensors, urgency vs arrival (bench_rendezvous_order.py)",
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="--order, --baseline-*: runs (fresh processes each)"
    )
    parser.add_argument(
        "--baseline-ref",
        default=None,
        help="compare with this git ref's native/rendezvous (built into its own cache entry), e.g. main",
    )
    parser.add_argument(
        "--baseline-lib", default=None, help="compare with this built libgeryon_rendezvous.so"
    )
    parser.add_argument(
        "--syscalls",
        type=int,
        default=0,
        metavar="STEPS",
        help="--baseline-*: also count syscalls (strace), mallocs (perf uprobe) per 4 KiB tensor over STEPS"
        " steps and per 100 MB pull over STEPS/10",
    )
    parser.add_argument(
        "--consumers", type=int, default=1, help="--order: workers pulling the same tensors at once"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="per-tensor 4 KiB cost: this build, plain grpc, variables local (bench_rendezvous_libs.py)",
    )
    parser.add_argument(
        "--variants",
        default="urgency",
        help="--order: comma-separated sender variants to interleave against arrival "
        "(bench_rendezvous_order.VARIANTS; default urgency)",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.syscalls < 0:
        parser.error("--syscalls must be >= 0")
    if args.baseline_ref and args.baseline_lib:
        parser.error("--baseline-ref and --baseline-lib: give one")
    if args.floor:
        from bench_rendezvous_libs import run_floor

        return run_floor(args.repeats, args.out or "out/bench/rendezvous_floor.json")
    if args.baseline_ref or args.baseline_lib:
        from bench_rendezvous_libs import run as run_libs

        out = args.out or "out/bench/rendezvous_libs.json"
        return run_libs(args.baseline_lib, args.baseline_ref, args.repeats, args.runs, out, args.syscalls)
    if args.order:
        from bench_rendezvous_order import check_variants
        from bench_rendezvous_order import run as run_order

        variants = [v for v in args.variants.split(",") if v]
        try:
            check_variants(variants)
        except ValueError as e:
            parser.error(str(e))  # exit 2, naming the flag
        if args.consumers < 1:
            parser.error("--consumers must be >= 1")
        out = args.out or "out/bench/rendezvous_order.json"
        return run_order(args.repeats, args.runs, out, variants, args.consumers)
    if args.device:
        from bench_device_tensors import run

        return run(args.repeats, args.out or "out/bench/rendezvous_device.json")
    args.out = args.out or "out/bench/rendezvous.json"
    progress = Progress("bench_rendezvous")
    build(progress=progress)
    samples = measure(args.repeats, progress)
    rows = []
    for name in samples["grpc"]:
        row: dict[str, Any] = {"what": name}
        for protocol in PROTOCOLS:
            times = sorted(samples[protocol][name])
            median = times[len(times) // 2]
            key = "geryon" if protocol == "grpc+geryon" else "grpc"
            row[f"{key}_ms"] = median * 1e3
            if name.startswith("pull"):
                row[f"{key}_mbps"] = int(name.split()[1]) / median
            elif name.startswith(f"{SMALL} x"):
                row[f"{key}_per_msg_us"] = median / SMALL * 1e6
        row["speedup"] = row["grpc_ms"] / row["geryon_ms"]
        rows.append(row)
    print_table(
        rows,
        [("what", "what", "s"), ("grpc_ms", "grpc ms", ".2f"), ("geryon_ms", "geryon ms", ".2f"),
         ("grpc_mbps", "grpc MB/s", ".0f"), ("geryon_mbps", "geryon MB/s", ".0f"),
         ("grpc_per_msg_us", "grpc us/msg", ".1f"), ("geryon_per_msg_us", "geryon us/msg", ".1f"),
         ("speedup", "grpc/geryon", ".2f")],
    )  # fmt: skip
    lookups = lookup_ns()
    print(
        f"class lookup: {lookups['annotated']:.1f} ns (annotated edge), "
        f"{lookups['plain']:.1f} ns (plain edge)"
    )
    write_json(
        args.out,
        {"rows": rows, "class_lookup_ns": lookups, "repeats": args.repeats, "samples_s": samples},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
