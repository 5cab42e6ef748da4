"""What a step costs on tf_keras' fit path against the custom loop, with the network out of the way.

    .venv/bin/python bench/bench_fit_step.py [--rounds 3] [--steps 12] [--spe 1,4] [--workers 1]

Issue 36's testbed bench found the fit path's steps 7-15% slower than the custom loop's in the same
run (bench/results/2026-12-03-e2e-fit-path.md), and Geryon's lead over end-host scheduling gone on it.
This bench asks whether the step itself costs more: a loopback cluster (geryon.cluster.local: the
demo's own PS and worker task processes, gRPC, no shaping, no background traffic), and the demo's
chief (`python -m geryon.demo.chief`, a vanilla run: no partitioning, no classes) started once per
variant and round, alternating A B C A B C: the custom loop (one Keras 3 step per scheduled
function) and tf_keras' train function with each `--spe` (steps_per_execution; the chief reports a
round's time / N, a step's). Per variant: the median step time of its rounds, the paired ratio to
the custom loop round by round (95% bootstrap interval of the median ratio), and the CPU seconds of
a worker per step it trains and of the PSes together per step any worker trains (from /proc, over
the chief's whole run, warm-up included).
Writes JSON (default out/bench/fit_step.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.cluster.local import REPO_ROOT, local_cluster
from geryon.demo.localchief import chief_env, chief_spec, step_times
from geryon.demo.paired import bootstrap_ci
from geryon.progress import Progress
from geryon.testbed.procs import cpu_seconds

WARMUP = 2  # rounds the chief leaves out of its step times (the first traces the function)


def variants(spes: list[int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"custom": {}}
    for spe in spes:
        out[f"fit spe {spe}"] = {"api": "fit", "steps_per_execution": spe}
    return out


def run_chief(cluster: dict[str, list[str]], extra: dict[str, Any], steps: int, workdir: Path) -> list[float]:
    """One chief process for `steps` measured rounds; its per-step seconds."""
    spec = chief_spec(cluster, "vggmini", (32, 32, 3), 64, steps=steps)
    spec.update(extra, warmup=WARMUP)
    spec_file, log = workdir / "chief.json", workdir / "chief.log"
    spec_file.write_text(json.dumps(spec))
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "geryon.demo.chief", str(spec_file)],
            cwd=REPO_ROOT,
            env=chief_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    times = step_times(log)
    if done.returncode != 0 or len(times) < steps:
        raise SystemExit(
            f"the chief ({extra or 'custom'}) failed (exit {done.returncode}): {log.read_text()[-3000:]}"
        )
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the variants (default 3)")
    ap.add_argument("--steps", type=int, default=12, help="measured rounds per chief (default 12)")
    ap.add_argument("--spe", default="1,4", help="tf_keras steps_per_execution values (default 1,4)")
    ap.add_argument("--workers", type=int, default=1, help="worker tasks (default 1; 2 PSes)")
    ap.add_argument("--out", default="out/bench/fit_step.json")
    args = ap.parse_args()
    for name in ("rounds", "steps", "workers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: {getattr(args, name)} must be at least 1")
    try:
        spes = [int(s) for s in args.spe.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--spe: {args.spe!r} is not a comma-separated list of integers")
    if not spes or min(spes) < 1:
        ap.error(f"--spe: {args.spe!r} needs integers of at least 1")
    chosen = variants(spes)
    progress = Progress("bench_fit_step")
    medians: dict[str, list[float]] = {name: [] for name in chosen}
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    with local_cluster(2, args.workers, chief=True) as lc, tempfile.TemporaryDirectory() as tmp:
        roles = [*(f"ps{i}" for i in range(2)), *(f"worker{i}" for i in range(args.workers))]
        pids = dict(zip(roles, lc.pids, strict=True))  # local_cluster starts the PSes, then the workers
        for r in range(args.rounds):
            for name, extra in chosen.items():
                progress.say(f"round {r + 1}/{args.rounds}: {name}")
                before = {role: cpu_seconds(pid) or 0.0 for role, pid in pids.items()}
                times = run_chief(lc.cluster, extra, args.steps, Path(tmp))
                after = {role: cpu_seconds(pid) or 0.0 for role, pid in pids.items()}
                # A round trains one function of N steps on every worker: a worker's CPU over its own
                # steps, the PSes' over all workers' steps (what they serve).
                per_worker = (args.steps + WARMUP) * int(extra.get("steps_per_execution", 1))
                medians[name].append(statistics.median(times))
                cpu[name].append(
                    {
                        role: (after[role] - before[role])
                        / (per_worker * (1 if role.startswith("worker") else args.workers))
                        for role in pids
                    }
                )
    rows = []
    for name in chosen:
        ratios = [m / c for m, c in zip(medians[name], medians["custom"], strict=True)]
        ci = bootstrap_ci(ratios)
        worker_cpu = [statistics.fmean(v for k, v in c.items() if k.startswith("worker")) for c in cpu[name]]
        ps_cpu = [sum(v for k, v in c.items() if k.startswith("ps")) for c in cpu[name]]
        rows.append(
            {
                "variant": name,
                "step_s": statistics.median(medians[name]),
                "ratio": statistics.median(ratios),
                "ci": f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-",
                "worker_cpu": statistics.median(worker_cpu),
                "ps_cpu": statistics.median(ps_cpu),
            }
        )
    print(f"\nvggmini batch 64, {args.workers} worker(s), 2 PSes, loopback gRPC; {args.rounds} rounds, A B C")
    print_table(
        rows,
        [
            ("variant", "variant", "s"),
            ("step_s", "step s (median)", ".4f"),
            ("ratio", "/ custom", ".3f"),
            ("ci", "95% interval", "s"),
            ("worker_cpu", "worker CPU s/step", ".3f"),
            ("ps_cpu", "PS CPU s/worker step", ".3f"),
        ],
    )
    write_json(
        args.out,
        {
            "rounds": args.rounds,
            "steps": args.steps,
            "workers": args.workers,
            "medians": medians,
            "cpu_per_step": cpu,
            "rows": rows,
            "loadavg": os.getloadavg(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
