"""Geryon's Tables II/III with the cluster simulator: scaling efficiency of AlexNet, VGG-19 and
ResNet-50 with 8 workers and 8 PSes at 10 and 40 Gbit/s, side by side with the paper's numbers.

    .venv/bin/python bench/bench_paper_scaling.py [--models alexnet vgg19 resnet50] [--efficiency 1.0]
                                                  [--no-barrier] [--out FILE]

Columns (the paper's baselines, plus two the paper does not have):
- vanilla: fifo, every variable whole on one PS round-robin (TF without a partitioner);
- P+S: fifo with partition over the 8 PSes and 4 MiB slices (the paper's "1024K");
- P+S+Geryon: network mode (2 strict-priority classes) on the same plan, at the best threshold over
  every cut between distinct urgencies (what the adaptive search converges to). Geryon's data plane
  sends each class flow's tensors one after another on its own TCP connection (or RDMA queue pair,
  as the paper's RoCE implementation), so it is simulated with interleave=False; TF's gRPC baselines
  multiplex concurrent tensors as HTTP/2 streams on one channel (interleave=True).
  --geryon-interleave simulates Geryon with interleaved flows too;
- P+S+end-host (TicTac/P3-like) and P+S+ideal (a perfect global order), for reference.
Scaling efficiency = per-worker throughput / single-GPU throughput = C / T (the simulator's GPU
utilization). Compute is FLOPs-derived for a K40 (4.29 TFLOP/s x --efficiency), batch 512 for
AlexNet and 64 otherwise, as in the paper. By default the next iteration's pulls wait for the whole
iteration (--no-barrier lets each shard go as soon as it is aggregated).

As on the paper's testbed, PS i runs on worker i's host and shares its link (--separate puts the PSes
on hosts of their own). Known differences from the testbed, so compare trends, not digits: the
simulator's links deliver line rate with no protocol, serialization or aggregation overhead (the
paper ran TF over RoCEv1), and compute is peak FLOP/s x efficiency, not measured K40 kernels. Prints a
table and writes JSON (default out/bench/paper_scaling.json).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys

from benchlib import print_table, write_json

from geryon.threshold.profiles import profile_from_model
from geryon.threshold.simulator import simulate

PAPER = {  # scaling efficiency in %, (vanilla, P+S, P+S+Geryon), Tables II and III
    10: {"alexnet": (36.4, 80.2, 95.4), "vgg19": (26.9, 79.3, 94.6), "resnet50": (87.6, 90.0, 95.7)},
    40: {"alexnet": (79.4, 90.0, 95.1), "vgg19": (61.7, 85.3, 94.8), "resnet50": (94.1, 94.1, 96.1)},
}
BATCH = {"alexnet": 512}
SLICE = 4 << 20


def cut_points(profile) -> list[float]:
    """Thresholds halfway between consecutive distinct urgencies: every split that moves something."""
    levels = sorted({p.urgency for p in profile.params})
    return [(a + b) / 2 for a, b in itertools.pairwise(levels)] or [0.5]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["alexnet", "vgg19", "resnet50"])
    ap.add_argument("--bandwidths", nargs="+", type=int, default=[10, 40], help="Gbit/s")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--ps", type=int, default=8)
    ap.add_argument(
        "--device", default="k40", help="compute device (the paper's: k40; v100 shows faster GPUs)"
    )
    ap.add_argument("--efficiency", type=float, default=1.0, help="fraction of the device's peak FLOP/s")
    ap.add_argument("--no-barrier", action="store_true")
    ap.add_argument("--separate", action="store_true", help="PSes on hosts of their own, not co-hosted")
    ap.add_argument("--geryon-interleave", action="store_true", help="Geryon's flows interleave tensors")
    ap.add_argument("--out", default="out/bench/paper_scaling.json")
    args = ap.parse_args()

    rows = []
    sim_walls = []
    for model in args.models:
        print(f"building the {model} profile ...", file=sys.stderr, flush=True)
        profile = profile_from_model(
            model, batch_size=BATCH.get(model, 64), device=args.device, efficiency=args.efficiency
        )
        cuts = cut_points(profile)
        for gbit in args.bandwidths:
            common = {
                "workers": args.workers,
                "num_ps": args.ps,
                "bandwidth_bps": gbit * 1e9,
                "barrier": not args.no_barrier,
                "colocate": not args.separate,
            }

            def run(mode: str, profile=profile, common=common, **kw):
                r = simulate(profile, mode=mode, **common, **kw)
                sim_walls.append(r.wall_s)
                return r

            vanilla = run("fifo", partition=False)
            ps = run("fifo", slice_bytes=SLICE)
            print(f"  {model} @ {gbit} Gbit/s: trying {len(cuts)} thresholds", file=sys.stderr, flush=True)
            geryon = min(
                (run("network", slice_bytes=SLICE, thresholds=(t,)) for t in cuts),
                key=lambda r: r.iteration_s,
            )
            end_host = run("end-host", slice_bytes=SLICE)
            ideal = run("ideal", slice_bytes=SLICE)
            paper = PAPER.get(gbit, {}).get(model)
            rows.append(
                {
                    "model": model,
                    "gbit": gbit,
                    "batch": profile.batch_size,
                    "C_ms": profile.compute_s * 1e3,
                    "vanilla": vanilla.gpu_utilization * 100,
                    "ps": ps.gpu_utilization * 100,
                    "geryon": geryon.gpu_utilization * 100,
                    "threshold": geryon.thresholds[0],
                    "end_host": end_host.gpu_utilization * 100,
                    "ideal": ideal.gpu_utilization * 100,
                    "speedup_vs_vanilla": vanilla.iteration_s / geryon.iteration_s,
                    "speedup_vs_ps": ps.iteration_s / geryon.iteration_s,
                    "paper_vanilla": paper[0] if paper else None,
                    "paper_ps": paper[1] if paper else None,
                    "paper_geryon": paper[2] if paper else None,
                }
            )

    print_table(
        rows,
        [
            ("model", "model", "s"),
            ("gbit", "Gbit/s", "d"),
            ("C_ms", "C ms", ".0f"),
            ("vanilla", "vanilla %", ".1f"),
            ("paper_vanilla", "(paper)", ".1f"),
            ("ps", "P+S %", ".1f"),
            ("paper_ps", "(paper)", ".1f"),
            ("geryon", "P+S+Geryon %", ".1f"),
            ("paper_geryon", "(paper)", ".1f"),
            ("threshold", "threshold", ".3f"),
            ("end_host", "end-host %", ".1f"),
            ("ideal", "ideal %", ".1f"),
            ("speedup_vs_vanilla", "x vanilla", ".2f"),
            ("speedup_vs_ps", "x P+S", ".3f"),
        ],
    )
    print(f"\n{len(sim_walls)} simulations, median {statistics.median(sim_walls) * 1e3:.1f} ms each")
    write_json(
        args.out,
        {
            "workers": args.workers,
            "ps": args.ps,
            "device": args.device,
            "efficiency": args.efficiency,
            "barrier": not args.no_barrier,
            "geryon_interleave": args.geryon_interleave,
            "colocate": not args.separate,
            "slice_bytes": SLICE,
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
