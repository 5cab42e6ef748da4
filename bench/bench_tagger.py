"""Tagger benchmark: how long tagging takes per model, how cheap a threshold change is, and how many
slices the partition plan makes (the paper's Table IV setting: VGG-19 on 8 PSes).

    .venv/bin/python bench/bench_tagger.py [--models vgg19 resnet50 ...] [--repeats 5] [--out FILE]

Prints a table and writes JSON (default out/bench/tagger.json). Times are medians over repeats,
measured side by side in one process; the machine is shared, so compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchlib import median_time

from geryon.tagger.map_table import MapTable
from geryon.tagger.partition import parse_size
from geryon.tfenv import import_tensorflow

DEFAULT_MODELS = ["alexnet", "vgg19", "resnet50", "inceptionv3", "mobilenetv2"]
SLICE_SIZES = ["256KiB", "512KiB", "1MiB", "2MiB", "4MiB"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--repeats", type=int, default=5, help="repeats per timing (median reported)")
    ap.add_argument("--num-ps", type=int, default=8, help="PSes for the slicing rows (paper: 8)")
    ap.add_argument("--out", default="out/bench/tagger.json")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    import_tensorflow()
    from geryon.tagger import tag_model
    from geryon.tagger.models import BUILTIN_MODELS, build_model

    unknown = [m for m in args.models if m not in BUILTIN_MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; allowed: {', '.join(sorted(BUILTIN_MODELS))}")

    rows = []
    for i, name in enumerate(args.models, 1):
        print(f"[{i}/{len(args.models)}] {name}: building and tagging ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        model = build_model(name)
        build_s = time.perf_counter() - start
        tag_s = {u: median_time(lambda u=u, m=model: tag_model(m, u), args.repeats) for u in ("layer", "tic")}
        tagging = tag_model(model)
        table = tagging.map_table([0.5])
        # A threshold change on the sliced job: one map_table entry per shard (1 MiB slices).
        plan = tagging.partition_plan(args.num_ps, parse_size("1MiB"))
        names, urgencies = [], []
        for urgency, shards in zip(tagging.urgency, plan.params, strict=True):
            for s in shards:
                names.append(s.name)
                urgencies.append(urgency)
        sliced = MapTable.build(names, urgencies, [0.5], "layer")
        rebuild_s = median_time(lambda t=table: t.with_thresholds([0.3]), max(args.repeats, 50))
        rebuild_sliced_s = median_time(lambda t=sliced: t.with_thresholds([0.3]), max(args.repeats, 50))
        summary = tagging.summary(table)
        slices = {
            size: tagging.partition_plan(args.num_ps, parse_size(size)).total_shards for size in SLICE_SIZES
        }
        rows.append(
            {
                "model": name,
                "parameters": summary["parameters"],
                "bytes": summary["total_bytes"],
                "dense_share": summary["dense_share"],
                "build_s": build_s,
                "tag_layer_s": tag_s["layer"],
                "tag_tic_s": tag_s["tic"],
                "rebuild_us": rebuild_s * 1e6,
                "sliced_entries": len(names),
                "rebuild_sliced_us": rebuild_sliced_s * 1e6,
                "rebuild_vs_tag": rebuild_sliced_s / tag_s["layer"],
                f"slices_{args.num_ps}ps": slices,
            }
        )

    header = (
        f"{'model':<12} {'params':>6} {'MiB':>7} {'FC %':>6} {'tag s':>6} {'tic s':>6} "
        f"{'rebuild us':>10} {'shards':>6} {'rebuild(sh) us':>14}  slices@{args.num_ps}PS "
        + "/".join(SLICE_SIZES)
    )
    print(header)
    for r in rows:
        print(
            f"{r['model']:<12} {r['parameters']:>6} {r['bytes'] / 2**20:>7.1f} "
            f"{r['dense_share'] * 100:>6.2f} "
            f"{r['tag_layer_s']:>6.2f} {r['tag_tic_s']:>6.2f} {r['rebuild_us']:>10.0f} "
            f"{r['sliced_entries']:>6} {r['rebuild_sliced_us']:>14.0f}  "
            + "/".join(str(r[f"slices_{args.num_ps}ps"][s]) for s in SLICE_SIZES)
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"repeats": args.repeats, "num_ps": args.num_ps, "rows": rows}, indent=1) + "\n"
    )
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
