"""How much of a real job's traffic Geryon classifies, on the training code users write (issue 36).

    .venv/bin/python bench/bench_classification.py [--cases NAME,...] [--no-grpc] [--out FILE]

For each case of tests/tf/test_control_flow.py (a Keras 3 custom loop with 1 and 10 steps per
scheduled function; tf_keras model.fit with steps_per_execution 1, 10 and 100; tf_keras.applications
ResNet50 and VGG16 under fit with steps_per_execution 10), a real cluster (2 PSes, 1 worker, chief;
grpc+geryon) trains it and the tasks' flow counters give the bytes they sent: in all, per class, and
those whose edge carries no parameter id (unresolved, on the default class). The issue's target:
unresolved at most 1% of the bytes. Unless --no-grpc, the same job on plain grpc gives the reference
losses: "losses equal" is relative 1e-6. One run per case (the counts are deterministic up to TF's
own control tensors). Prints a table, writes JSON (default out/bench/classification.json).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from geryon.progress import Progress

REPO_ROOT = Path(__file__).resolve().parents[1]
# The cases and their runner are the test's (tests/tf/test_control_flow.py), imported as pytest does.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO_ROOT), str(REPO_ROOT / "tests")]
from benchlib import print_table, write_json  # noqa: E402

COLUMNS = [
    ("case", "case", "s"),
    ("mb", "MB sent", ".1f"),
    ("class0_mb", "class 0 MB", ".2f"),
    ("unresolved_kb", "unresolved KB", ".1f"),
    ("unresolved_pct", "unresolved %", ".4f"),
    ("target", "<= 1%", "s"),
    ("losses_equal", "losses = grpc", "s"),
    ("seconds", "wall s", ".0f"),
]


def equal(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-7) for x, y in zip(a, b, strict=True)
    )


def measure(api: str, steps: int, model: str, name: str, grpc: bool) -> dict[str, Any]:
    from tf.test_control_flow import train

    started = time.perf_counter()
    result, sent = train("grpc+geryon", api=api, steps=steps, model=model)
    row: dict[str, Any] = {
        "case": name,
        "api": api,
        "steps_per_function": steps,
        "model": model,
        "sent": sent,
        "losses": result["losses"],
        "mb": sent["total"] / 1e6,
        "class0_mb": sent.get("class0", 0) / 1e6,
        "unresolved_kb": sent["unresolved"] / 1e3,
        "unresolved_pct": 100 * sent["unresolved"] / max(1, sent["total"]),
    }
    row["target"] = "met" if sent["unresolved"] <= 0.01 * sent["total"] else "NOT met"
    if grpc:
        plain, _ = train("grpc", api=api, steps=steps, model=model)
        row["grpc_losses"] = plain["losses"]
        row["losses_equal"] = "yes" if equal(result["losses"], plain["losses"]) else "NO"
    row["seconds"] = time.perf_counter() - started
    return row


def main(argv: list[str] | None = None) -> int:
    from tf.test_control_flow import CASE_TABLE

    names = [c[3] for c in CASE_TABLE]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(names), help=f"comma-separated, of {', '.join(names)}")
    parser.add_argument("--no-grpc", action="store_true", help="skip the plain-grpc reference runs")
    parser.add_argument("--out", default="out/bench/classification.json")
    args = parser.parse_args(argv)
    wanted = [c for c in args.cases.split(",") if c]
    unknown = [c for c in wanted if c not in names]
    if unknown or not wanted:
        parser.error(f"--cases: {unknown or args.cases!r} not among {', '.join(names)}")
    cases = [c for c in CASE_TABLE if c[3] in wanted]
    progress = Progress("bench_classification")
    rows = []
    for i, (api, steps, model, name) in enumerate(cases, 1):
        with progress.step(f"case {i}/{len(cases)} {name}"):
            rows.append(measure(api, steps, model, name, grpc=not args.no_grpc))
        progress.say(f"{name}: {rows[-1]['unresolved_pct']:.4f}% of {rows[-1]['mb']:.1f} MB unresolved")
    print_table(rows, COLUMNS)
    write_json(args.out, {"rows": rows})
    return 0 if all(r["target"] == "met" and r.get("losses_equal", "yes") == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
