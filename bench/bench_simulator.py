"""Simulator speed: wall time and events/second of the cluster replay on VGG-19, per network mode.

    .venv/bin/python bench/bench_simulator.py [--repeats 5] [--iterations 2] [--out FILE]

The profile is VGG-19 from the real Keras model (parameter shapes from the tagger, K40 compute times
from FLOPs, batch 32). Every setting (workers x PSes x slice size) runs in every mode `--repeats`
times, side by side in one process; the table shows medians. The issue's target is "VGG-19 with
slicing, 64 workers and 16 PSes in well under a second". Rows marked "every worker" simulate all
workers instead of one representative (the cross-check path), to show what the symmetry buys and
that both give the same iteration time. Rows marked "colocated" put PS i on worker i's host
(`colocate=True`, the paper's testbed); those workers are not identical, so every one is simulated,
and a second table sets their iteration time beside the separate-host cluster's. Writes JSON (default
out/bench/simulator.json).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from geryon.threshold.simulator import MODES, simulate

MiB = 1 << 20
# (workers, PSes, slice bytes, path): "representative", "every worker" or "colocated"
SETTINGS: list[tuple[int, int, int | None, str]] = [
    (8, 8, None, "representative"),
    (8, 8, 1 * MiB, "representative"),
    (64, 16, 4 * MiB, "representative"),
    (64, 16, 1 * MiB, "representative"),
    (128, 32, 1 * MiB, "representative"),
    (8, 8, 4 * MiB, "representative"),
    (8, 8, 4 * MiB, "every worker"),
    (64, 16, 4 * MiB, "every worker"),
    (8, 8, 4 * MiB, "colocated"),
    (16, 16, 4 * MiB, "representative"),
    (16, 16, 4 * MiB, "colocated"),
]


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    cells = [[format(r[k], spec) if r.get(k) is not None else "-" for k, _, spec in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h, _) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (_, h, _), w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)) for c in cells]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="runs per setting and mode (median reported)")
    ap.add_argument("--iterations", type=int, default=2, help="BSP iterations simulated per run")
    ap.add_argument("--bandwidth", type=float, default=10e9, help="link rate in bit/s (default 10e9)")
    ap.add_argument("--out", default="out/bench/simulator.json")
    args = ap.parse_args()
    if args.repeats < 1 or args.iterations < 1:
        ap.error("--repeats and --iterations must be >= 1")

    print("building the VGG-19 profile from the Keras model (TensorFlow) ...", file=sys.stderr, flush=True)
    from geryon.threshold.profiles import profile_from_model

    profile = profile_from_model("vgg19", batch_size=32, device="k40")
    print(
        f"VGG-19: {len(profile.params)} parameters, {profile.total_bytes / 1e6:.1f} MB, "
        f"{profile.num_layers} layers, C = {profile.compute_s * 1e3:.1f} ms (K40, batch 32)",
        file=sys.stderr,
    )

    rows: list[dict[str, Any]] = []
    for n, (workers, num_ps, slice_bytes, path) in enumerate(SETTINGS, 1):
        label = "none" if slice_bytes is None else f"{slice_bytes // MiB}MiB"
        print(
            f"[{n}/{len(SETTINGS)}] {workers} workers x {num_ps} PSes, slices {label}, {path}",
            file=sys.stderr,
            flush=True,
        )
        for mode in MODES:
            walls = []
            result = None
            for _ in range(args.repeats):
                result = simulate(
                    profile,
                    workers=workers,
                    num_ps=num_ps,
                    bandwidth_bps=args.bandwidth,
                    mode=mode,
                    slice_bytes=slice_bytes,
                    iterations=args.iterations,
                    symmetric=path == "representative",
                    colocate=path == "colocated",
                )
                walls.append(result.wall_s)
            assert result is not None
            wall = statistics.median(walls)
            rows.append(
                {
                    "workers": workers,
                    "ps": num_ps,
                    "slice": label,
                    "slice_bytes": slice_bytes,
                    "path": path,
                    "mode": mode,
                    "shards": result.shards,
                    "events": result.events,
                    "wall_ms": wall * 1e3,
                    "wall_s_all": walls,
                    "events_per_s": result.events / wall if wall > 0 else None,
                    "iteration_ms": result.iteration_s * 1e3,
                    "utilization": result.gpu_utilization,
                }
            )
    columns = [
        ("workers", "W", "d"),
        ("ps", "P", "d"),
        ("slice", "slice", "s"),
        ("path", "path", "s"),
        ("mode", "mode", "s"),
        ("shards", "shards", "d"),
        ("events", "events", "d"),
        ("wall_ms", "wall ms", ".1f"),
        ("events_per_s", "events/s", ",.0f"),
        ("iteration_ms", "iter ms", ".1f"),
        ("utilization", "GPU util", ".3f"),
    ]
    print(table(rows, columns))
    # The symmetry's price and proof, measured side by side: same cluster, both paths.
    pairs = []
    for row in rows:
        if row["path"] == "every worker":
            twin = next(
                r
                for r in rows
                if r["path"] == "representative"
                and (r["workers"], r["ps"], r["slice"], r["mode"])
                == (row["workers"], row["ps"], row["slice"], row["mode"])
            )
            pairs.append(
                {
                    "workers": row["workers"],
                    "ps": row["ps"],
                    "slice": row["slice"],
                    "mode": row["mode"],
                    "speedup": row["wall_ms"] / twin["wall_ms"],
                    "iteration_rel_diff": abs(row["iteration_ms"] - twin["iteration_ms"])
                    / twin["iteration_ms"],
                }
            )
    if pairs:
        print()
        print(
            table(
                pairs,
                [
                    ("workers", "W", "d"),
                    ("ps", "P", "d"),
                    ("slice", "slice", "s"),
                    ("mode", "mode", "s"),
                    ("speedup", "representative speedup", ".1f"),
                    ("iteration_rel_diff", "iter time rel diff", ".1e"),
                ],
            )
        )
    # Colocation's effect on the predicted iteration, side by side with separate PS hosts.
    colocated = []
    for row in rows:
        if row["path"] == "colocated":
            twin = next(
                r
                for r in rows
                if r["path"] == "representative"
                and (r["workers"], r["ps"], r["slice"], r["mode"])
                == (row["workers"], row["ps"], row["slice"], row["mode"])
            )
            colocated.append(
                {
                    "workers": row["workers"],
                    "ps": row["ps"],
                    "slice": row["slice"],
                    "mode": row["mode"],
                    "separate_ms": twin["iteration_ms"],
                    "colocated_ms": row["iteration_ms"],
                    "ratio": row["iteration_ms"] / twin["iteration_ms"],
                    "wall_ms": row["wall_ms"],
                }
            )
    if colocated:
        print()
        print(
            table(
                colocated,
                [
                    ("workers", "W", "d"),
                    ("ps", "P", "d"),
                    ("slice", "slice", "s"),
                    ("mode", "mode", "s"),
                    ("separate_ms", "separate iter ms", ".1f"),
                    ("colocated_ms", "colocated iter ms", ".1f"),
                    ("ratio", "colocated/separate", ".3f"),
                    ("wall_ms", "colocated wall ms", ".1f"),
                ],
            )
        )
    target = [
        r
        for r in rows
        if (r["workers"], r["ps"], r["slice"], r["path"]) == (64, 16, "4MiB", "representative")
    ]
    worst = max(r["wall_ms"] for r in target)
    print(f"\nVGG-19, 4 MiB slices, 64 x 16 PSes: slowest mode {worst:.1f} ms (median, {args.repeats} runs)")
    co8 = [r["wall_ms"] for r in rows if (r["workers"], r["slice"], r["path"]) == (8, "4MiB", "colocated")]
    worst_colocated = max(co8) if co8 else None
    if worst_colocated is not None:
        print(f"VGG-19, 4 MiB slices, 8 x 8 colocated: slowest mode {worst_colocated:.1f} ms (median)")
    payload = {
        "bench": "simulator",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "profile": {
            "model": profile.model,
            "source": profile.source,
            "bytes": profile.total_bytes,
            "compute_s": profile.compute_s,
        },
        "bandwidth_bps": args.bandwidth,
        "iterations": args.iterations,
        "repeats": args.repeats,
        "rows": rows,
        "representative_vs_every_worker": pairs,
        "colocated_vs_separate": colocated,
        "target_8x8_colocated_4MiB_slowest_mode_ms": worst_colocated,
        "target_64x16_4MiB_slowest_mode_ms": worst,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
