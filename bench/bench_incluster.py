"""Compute in the running cluster against compute profiled alone, and against the measured step.

    .venv/bin/python bench/bench_incluster.py [--runs 3] [--model vggmini] [--batch-size 32]
        [--workers 2] [--ps 2] [--duration-ms 3000] [--out out/bench/incluster.json]

Per run: a loopback cluster of the demo's task processes (`--ps` PSes, `--workers` workers, worker 0
with TF's profiler server), trained by the demo's own chief (vanilla: whole variables, gRPC); worker
0 is traced for `--duration-ms` and the trace becomes a profile (`geryon.threshold.incluster`). Then,
with the cluster gone, the same model is profiled layer by layer alone on this CPU
(`geryon.threshold.profiler.measure_profile`, 1 intra-op thread like the tasks, 5 timed runs per
layer). Runs alternate the two, so machine load drifts hit both.

Columns: C in cluster (forward + backward per step, from the trace), C alone (the per-layer
profiler), their ratio, what the trace saw outside layers (loss, update multiplies, sends), the
median round the chief measured over the capture window, and (C in cluster + outside) / step: how
much of a round the in-cluster compute explains (the rest is waiting for pulls and pushes). Two
caveats on that last figure: the ClusterCoordinator hands a round's closures to whichever worker is
free, so worker 0 may run more or fewer than one per round (`steps traced` counts its executions),
and with 2 inter-op threads two ops can overlap, so summed op time can exceed wall time. Writes
JSON (default out/bench/incluster.json). Medians over runs with min-max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.cluster.local import local_cluster
from geryon.cluster.task import limit_threads
from geryon.demo.localchief import step_times, training_chief
from geryon.progress import Progress


def in_cluster(args: argparse.Namespace, shape: tuple[int, int, int], workdir: Path) -> dict[str, Any]:
    from geryon.cluster.models import build_model
    from geryon.threshold.incluster import capture, profile_from_ops, read_trace

    with (
        local_cluster(args.ps, args.workers, chief=True, profile_workers=True) as lc,
        training_chief(lc, workdir, model=args.model, input_shape=shape, batch_size=args.batch_size) as log,
    ):
        before = len(step_times(log))
        service = f"grpc://127.0.0.1:{lc.profiler_ports['worker:0']}"
        xplane = capture(service, workdir / "trace", args.duration_ms)
        steps = step_times(log)[before:]
    ops, overlap = read_trace(xplane)
    profile = profile_from_ops(
        ops,
        build_model(args.model, shape),
        batch_size=args.batch_size,
        source=f"incluster:{service}",
        overlap=overlap,
    )
    return {
        "c_cluster_s": profile.compute_s,
        "outside_s": profile.meta["unattributed_s_per_step"],
        "overlap": overlap,
        "steps_traced": profile.meta["steps"],
        "step_s": statistics.median(steps) if steps else None,
        "chief_steps": len(steps),
        "layers": {layer.name: [layer.forward_s, layer.backward_s] for layer in profile.layers},
    }


def alone(args: argparse.Namespace, shape: tuple[int, int, int]) -> dict[str, Any]:
    from geryon.cluster.models import build_model
    from geryon.threshold.profiler import measure_profile

    profile = measure_profile(
        build_model(args.model, shape), batch_size=args.batch_size, iterations=5, progress=Progress("", False)
    )
    return {
        "c_alone_s": profile.compute_s,
        "layers": {layer.name: [layer.forward_s, layer.backward_s] for layer in profile.layers},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="vggmini")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--duration-ms", type=int, default=3000)
    ap.add_argument("--out", default="out/bench/incluster.json")
    args = ap.parse_args()
    for name in ("runs", "batch_size", "workers", "ps", "duration_ms"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    from geryon.cluster.models import ModelError, check_model

    try:
        shape = check_model(args.model)
    except ModelError as error:
        ap.error(str(error))
    # As the demo's tasks run: one thread inside an op, two ops at once (set before TF starts).
    limit_threads(1, 2)
    progress = Progress("bench_incluster")
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="geryon-bench-incluster-") as tmp:
            progress.say(
                f"run {i + 1}/{args.runs}: cluster of {args.workers} workers x {args.ps} PSes, trace"
            )
            c = in_cluster(args, shape, Path(tmp))
        progress.say(f"run {i + 1}/{args.runs}: per-layer profile alone")
        a = alone(args, shape)
        row = {
            "run": i + 1,
            **c,
            **{k: v for k, v in a.items() if k != "layers"},
            "layers_alone": a["layers"],
        }
        row["ratio"] = c["c_cluster_s"] / a["c_alone_s"] if a["c_alone_s"] > 0 else None
        row["explained"] = (c["c_cluster_s"] + c["outside_s"]) / c["step_s"] if c["step_s"] else None
        runs.append(row)
    summary: dict[str, Any] = {"run": "median"}
    for key in ("c_cluster_s", "c_alone_s", "ratio", "outside_s", "step_s", "explained"):
        values = [r[key] for r in runs if r[key] is not None]
        summary[key] = statistics.median(values) if values else None
        summary[f"{key}_range"] = [min(values), max(values)] if values else None
    print(
        f"\n{args.model} batch {args.batch_size}, {args.workers} workers x {args.ps} PSes on loopback, "
        f"{args.runs} runs, {args.duration_ms} ms traced per run"
    )
    ms = [
        ("c_cluster_s", "C cluster ms"),
        ("c_alone_s", "C alone ms"),
        ("outside_s", "outside ms"),
        ("step_s", "step ms"),
    ]
    table = [
        {**r, **{k: (r[k] * 1e3 if r[k] is not None else None) for k, _ in ms}} for r in [*runs, summary]
    ]
    print_table(
        table,
        [("run", "run", "")]
        + [(k, h, ".2f") for k, h in ms[:2]]
        + [("ratio", "cluster/alone", ".2f")]
        + [(k, h, ".2f") for k, h in ms[2:]]
        + [("explained", "(C+outside)/step", ".2f"), ("steps_traced", "steps traced", "")],
    )
    write_json(args.out, {"bench": "incluster", "config": vars(args), "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
