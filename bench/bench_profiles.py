"""Layer profiles: how long building them takes, how fast the iteration-time model runs on them, and
each model's communication/computation balance (N/C) at a few link bandwidths.

    .venv/bin/python bench/bench_profiles.py [--models vgg19 resnet50 ...] [--batch-size 32]
        [--device k40] [--measure alexnet ...] [--measure-batch 4] [--out FILE]

Per model: parameters (MiB) and forward FLOPs per image; the time to build + tag + count FLOPs (first
call) and from the per-process cache (second call); one evaluation of the iteration-time model (in
order, median of many); C (forward + backward compute per iteration at --batch-size on --device);
N = 2 x bytes x 8 / B (every pull and push) and N/C at 10, 40 and 100 Gbit/s. With --measure, the
per-layer profiler also runs on this CPU and its C is reported beside the FLOPs-derived C at the
throughput this CPU reached. Prints tables and writes JSON (default out/bench/profiles.json).
"""

from __future__ import annotations

import argparse
import sys
import time

from benchlib import median_time, print_table, write_json

from geryon.threshold.model import in_order, iteration_time
from geryon.threshold.profiles import DEVICES, profile_from_model, retime

DEFAULT_MODELS = ["alexnet", "vgg19", "resnet50", "inceptionv3", "mobilenetv2"]
BANDWIDTHS_GBIT = [10, 40, 100]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="k40", help=f"one of {', '.join(DEVICES)}")
    ap.add_argument("--measure", nargs="*", default=[], metavar="MODEL", help="also measure on this CPU")
    ap.add_argument("--measure-batch", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=3, help="timed runs per layer when measuring")
    ap.add_argument("--out", default="out/bench/profiles.json")
    args = ap.parse_args()
    if args.batch_size < 1 or args.measure_batch < 1:
        ap.error("--batch-size and --measure-batch must be >= 1")
    if args.device not in DEVICES:
        ap.error(f"--device {args.device!r}: allowed: {', '.join(DEVICES)}")

    from geryon.tfenv import import_tensorflow

    import_tensorflow()
    rows = []
    for i, name in enumerate(args.models, 1):
        print(
            f"[{i}/{len(args.models)}] {name}: building, tagging, counting FLOPs ...",
            file=sys.stderr,
            flush=True,
        )
        start = time.perf_counter()
        profile = profile_from_model(name, batch_size=args.batch_size, device=args.device)
        first_s = time.perf_counter() - start
        cached_s = median_time(lambda n=name: profile_from_model(n, batch_size=args.batch_size), 5)
        order = in_order(profile)
        model_us = median_time(lambda p=profile, o=order: iteration_time(p, o, 10e9), 200) * 1e6
        c = profile.compute_s
        row = {
            "model": name,
            "layers": profile.num_layers,
            "params_mib": profile.total_bytes / 2**20,
            "gflops_per_image": profile.meta["flops_per_sample"] / 1e9,
            "build_s": first_s,
            "cached_ms": cached_s * 1e3,
            "model_us": model_us,
            "compute_s": c,
        }
        for gbit in BANDWIDTHS_GBIT:
            n = 2 * profile.total_bytes * 8 / (gbit * 1e9)
            row[f"n_{gbit}g_s"] = n
            row[f"n_over_c_{gbit}g"] = n / c
            row[f"t_{gbit}g_s"] = iteration_time(profile, order, gbit * 1e9).iteration_s
        rows.append(row)

    print(
        f"\nFLOPs-derived profiles, batch {args.batch_size}, "
        f"{args.device} ({DEVICES[args.device]:.3g} FLOP/s)"
    )
    columns = [
        ("model", "model", ""),
        ("layers", "layers", "d"),
        ("params_mib", "MiB", ".1f"),
        ("gflops_per_image", "GFLOP/img", ".2f"),
        ("build_s", "build s", ".2f"),
        ("cached_ms", "cached ms", ".2f"),
        ("model_us", "model us", ".0f"),
        ("compute_s", "C s", ".3f"),
    ]
    for gbit in BANDWIDTHS_GBIT:
        columns += [(f"n_over_c_{gbit}g", f"N/C@{gbit}G", ".2f"), (f"t_{gbit}g_s", f"T@{gbit}G s", ".3f")]
    print_table(rows, columns)

    measured = []
    for i, name in enumerate(args.measure, 1):
        from geryon.threshold.profiler import measure_profile

        print(f"[{i}/{len(args.measure)}] {name}: measuring per-layer times ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        m = measure_profile(name, batch_size=args.measure_batch, iterations=args.iterations, warmup=1)
        took = time.perf_counter() - start
        achieved = m.meta["achieved_flops_per_s"]
        derived = retime(m, device=achieved)
        measured.append(
            {
                "model": name,
                "batch": args.measure_batch,
                "measure_s": took,
                "measured_c_s": m.compute_s,
                "achieved_gflops": achieved / 1e9,
                "flops_c_s": derived.compute_s,
                "measured_over_flops": m.compute_s / derived.compute_s,
                "backward_over_forward": m.meta["backward_over_forward"],
            }
        )
    if measured:
        print("\nMeasured on this CPU vs FLOPs at the forward throughput this CPU reached")
        print_table(
            measured,
            [
                ("model", "model", ""),
                ("batch", "batch", "d"),
                ("measure_s", "measure s", ".1f"),
                ("achieved_gflops", "fwd GFLOP/s", ".1f"),
                ("measured_c_s", "C measured s", ".3f"),
                ("flops_c_s", "C flops s", ".3f"),
                ("measured_over_flops", "ratio", ".2f"),
                ("backward_over_forward", "bwd/fwd", ".2f"),
            ],
        )
    write_json(
        args.out,
        {
            "batch_size": args.batch_size,
            "device": args.device,
            "peak_flops_per_s": DEVICES[args.device],
            "rows": rows,
            "measured": measured,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
