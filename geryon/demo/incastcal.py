"""The demo's incast efficiency when nobody measured it (issue 15): measure it once, then reuse the file.

The prediction gives a switch port that several hosts send to the share of its rate that
bench/bench_incast.py measured on the demo's own testbed shape (geryon.demo.predict.resolve_incast).
A fresh checkout has no `out/bench/incast.json`, so without this every new user's prediction used
the fluid model's full rate there. `ensure` decides as geryon.demo.pscosts.plan does:

    --incast FILE      -> "given":   FILE (validated by the runner), nothing measured
    --incast none      -> "none":    the fluid model, nothing measured
    the default exists -> "reuse":   the prediction reads it
    --quick            -> "quick":   not measured (CI's 1-2 minutes), the prediction says so
    otherwise          -> "measure": the bench's own `measure` (imported from the bench, not copied)
                          at REPEATS per switch mode, written to the default for the next run

It runs where the demo runs (as root, or inside the user namespace the demo re-executes itself in),
because the bench builds testbeds of its own, one per switch mode, each taken down before the demo's
comes up. A failed measurement never fails the demo: a warning names why, and the prediction goes on
with the full rate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from geryon.demo import pscosts
from geryon.demo.pscosts import Calibration, Outcome, plan, run_plan, write_atomic
from geryon.progress import Progress

# Repeats of every pattern per switch mode: about 1.5 minutes per mode here (5 patterns; 15 repeats of
# both modes took 4.4-4.5 min). bench/README.md ("Incast"):
# the 2x2 pattern's mean held at 0.81-0.89 over runs of 15-30 repeats; 10 keeps the demo's start short.
REPEATS = 10
BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_incast.py"


def load_bench(path: Path = BENCH) -> ModuleType:
    """bench/bench_incast.py as a module (pscosts.load_bench)."""
    return pscosts.load_bench(path)


def measure_with_bench(path: Path, progress: Progress) -> dict[str, Any]:
    """The bench's measurement at REPEATS, validated as the prediction will read it, then written to
    `path` atomically (pscosts.write_atomic: a crash or an unusable result leaves no file behind)."""
    from geryon.demo.predict import load_incast

    doc: dict[str, Any] = load_bench().measure(REPEATS)
    write_atomic(path, doc, check=load_incast)
    return doc


INCAST = Calibration("incast", "--incast", "incast measurement", "predicting with the ports' full rate")


def ensure(
    arg: str | None,
    progress: Progress,
    *,
    quick: bool = False,
    default: Path | None = None,
    measure: Callable[[Path, Progress], dict[str, Any]] | None = None,
) -> Outcome:
    """Decides (pscosts.plan) and, for "measure", measures into `default` (predict.DEFAULT_INCAST);
    `measure(path, progress)` writes the file and returns its document (default: measure_with_bench).
    Never raises for a failed measurement: the outcome's `error` says why (pscosts.run_plan)."""
    if default is None:
        from geryon.demo.predict import DEFAULT_INCAST

        default = DEFAULT_INCAST
    note = (
        f"incast: {default} absent, measuring it once (bench/bench_incast.py, {REPEATS} repeats per "
        "switch mode, about 3 minutes; --incast none skips this)"
    )

    def summary(doc: dict[str, Any]) -> tuple[str, None]:
        shown = []
        for r in doc.get("results", []):
            eff = r["efficiency"]
            per_class = eff.get("2x2 per class")
            shown.append(
                f"{r['switch']} 2x2 mean {eff['2x2']['mean']:.3f}"
                + (f", per class {per_class['mean']:.3f}" if per_class else "")
            )
        return "; ".join(shown), None

    action = plan(arg, default, quick)
    return run_plan(INCAST, action, arg, default, progress, measure or measure_with_bench, note, summary)
