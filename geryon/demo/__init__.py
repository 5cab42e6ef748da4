"""`geryon demo`: the README's main job.

Until the emulated cluster lands, the demo runs the tagger on a real model: which parameters the
forward pass needs first, their classes, and the partition plan a 2-PS job would use. It writes the
full result as JSON beside the printed table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tagger import cli as tagger_cli
from geryon.tagger.models import BUILTIN_MODELS


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="the main job: tag a real model and plan its partitions")
    p.add_argument("--model", default="vgg19", choices=sorted(BUILTIN_MODELS), help="model (default vgg19)")
    p.add_argument("--num-ps", type=int, default=2, metavar="N", help="parameter servers (default 2)")
    p.add_argument("--slice-size", default="1MiB", metavar="BYTES", help="slice size in bytes (default 1MiB)")
    p.add_argument("--out", default="out/demo", metavar="DIR", help="where the JSON goes (default out/demo)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    slice_bytes = tagger_cli.parse_plan_args(args.num_ps, args.slice_size)
    progress = Progress("geryon demo")
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {args.out!r}: {e.strerror}") from None
    model = tagger_cli.load_model(args.model, None, progress)
    with progress.step("tagging with the 'layer' urgency"):
        tagging = tagger_cli.tag_loaded(args.model, model, "layer", None)
    # The other urgency reuses the traced graph's consumption: no second trace.
    with progress.step("tagging with the 'tic' urgency"):
        tic = tagging.with_urgency("tic")
    results = {
        name: tagger_cli.describe(args.model, t, (0.5,), args.num_ps, slice_bytes)
        for name, t in (("layer", tagging), ("tic", tic))
    }
    print(tagger_cli.format_text(results["layer"]))
    layer_rows = {r["name"]: r for r in results["layer"]["rows"]}
    moved = [r for r in results["tic"]["rows"] if r["class"] != layer_rows[r["name"]]["class"]]
    print(
        f"With threshold 0.5, the 'tic' urgency puts {len(moved)} of {len(layer_rows)} parameters "
        f"({tagger_cli.format_bytes(sum(r['bytes'] for r in moved))}) in another class than 'layer'."
    )
    path = out_dir / f"tag-{args.model}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"full result: {path}")
    return 0
