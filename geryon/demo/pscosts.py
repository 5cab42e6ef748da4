"""The demo's PS costs when nobody calibrated them (issue 15): measure them once, then reuse the file.

A fresh checkout has no `out/bench/ps_costs.json`, so without this every new user's prediction left
the parameter servers' work out (aggregation, updates, per-message and per-slice costs). Before the
testbed comes up, `ensure` decides (`plan`):

    --ps-costs FILE          -> "given":   FILE (validated by the runner), nothing measured
    --ps-costs none          -> "none":    no PS costs in the prediction, nothing measured
    predict.DEFAULT_PS_COSTS exists -> "reuse": the prediction reads it
    --quick                  -> "quick":   not measured (CI's 1-2 minutes), the prediction says so
    otherwise                -> "measure": bench/bench_ps_costs.py's own measurement (`measure` and
                                `document`, imported from the bench, not copied) at BUDGET, written
                                to DEFAULT_PS_COSTS for the next run

A failed measurement (TensorFlow, the loopback cluster, a knob below the noise floor) never fails
the demo: a warning names why, and the prediction goes on without PS costs.

It runs in the process the user started, before `geryon demo` re-executes itself in a user
namespace: that namespace has its own network, where the bench's loopback cluster would not reach.
ENV tells the re-executed process that the decision was made, so it never measures twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from geryon.progress import Progress

# Runs x repeats of the demo's measurement (the bench's defaults are 3 x 21, about 25 s here). Chosen
# with bench_ps_costs.py --runs 6 at 7 and 14 repeats against its defaults: see bench/README.md,
# "where the demo's predictions fall short".
BUDGET = {"runs": 1, "repeats": 14}
NONE_WORDS = ("none", "off")
ENV = "GERYON_PS_COSTS_DECIDED"
BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_ps_costs.py"


def is_none(arg: str | None) -> bool:
    return arg is not None and arg.strip().lower() in NONE_WORDS


def plan(arg: str | None, default: Path, quick: bool = False, decided: bool = False) -> str:
    """What `ensure` does for `--ps-costs arg` (see the module docstring): given, none, reuse, quick,
    decided (the re-executed demo: the first process already did it) or measure."""
    if is_none(arg):
        return "none"
    if arg is not None:
        return "given"
    if decided:
        return "decided"
    if default.is_file():
        return "reuse"
    return "quick" if quick else "measure"


@dataclass
class Outcome:
    action: str
    path: str | None = None
    error: str | None = None
    wall_s: float | None = None
    knobs: dict[str, float] | None = None


def ensure(
    arg: str | None,
    progress: Progress,
    *,
    quick: bool = False,
    default: Path | None = None,
    measure: Callable[[Path, Progress], dict[str, Any]] | None = None,
) -> Outcome:
    """Decides (`plan`) and, for "measure", calibrates into `default` (predict.DEFAULT_PS_COSTS);
    `measure(path, progress)` writes the file and returns its document (default: `measure_with_bench`).
    Never raises for a failed calibration: the outcome's `error` says why."""
    if default is None:
        from geryon.demo.predict import DEFAULT_PS_COSTS

        default = DEFAULT_PS_COSTS
    action = plan(arg, default, quick, decided=bool(os.environ.get(ENV)))
    os.environ[ENV] = action  # inherited by the re-executed demo
    note = (
        f"PS costs: {default} absent, measuring them once (bench/bench_ps_costs.py, {BUDGET['runs']} "
        f"run x {BUDGET['repeats']} repeats; --ps-costs none skips this)"
    )

    def summary(doc: dict[str, Any]) -> tuple[str, dict[str, float]]:
        knobs = dict(doc["knobs"])
        return format_knobs(knobs), knobs

    return run_plan(PS_COSTS, action, arg, default, progress, measure or measure_with_bench, note, summary)


@dataclass(frozen=True)
class Calibration:
    """What a demo calibration says of itself (run_plan): `label` starts its lines, `flag` is its
    option, `failure` and `fallback` name a failed measurement and what the prediction does then."""

    label: str
    flag: str
    failure: str
    fallback: str


PS_COSTS = Calibration("PS costs", "--ps-costs", "PS-cost calibration", "predicting without PS costs")


def run_plan(
    cal: Calibration,
    action: str,
    arg: str | None,
    default: Path,
    progress: Progress,
    measure: Callable[[Path, Progress], dict[str, Any]],
    note: str,
    summary: Callable[[dict[str, Any]], tuple[str, dict[str, float] | None]],
) -> Outcome:
    """The skeleton both demo calibrations share (this module's and geryon.demo.incastcal's): act on
    `plan`'s `action`; for "measure", say `note`, run `measure(default, progress)` and report it with
    `summary(doc)` (its text and knobs). Never raises for a failed measurement, only for an
    interrupt: the outcome's `error` says why, and the demo goes on with `cal.fallback`."""
    if action == "quick":
        progress.say(f"{cal.label}: not measured with --quick ({default} absent; {cal.flag} FILE to use one)")
    if action != "measure":
        return Outcome(action, str(default) if action == "reuse" else arg)
    progress.say(note)
    started = time.monotonic()
    try:
        doc = measure(default, progress)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit from an import, TF's or the testbed's errors: the demo goes on
        why = f"{type(e).__name__}: {e}"
        progress.say(f"warning: {cal.failure} failed ({why}); {cal.fallback}")
        return Outcome("failed", None, why, round(time.monotonic() - started, 1))
    wall = round(time.monotonic() - started, 1)
    text, knobs = summary(doc)
    progress.say(f"{cal.label}: measured in {wall:.1f} s, written to {default}: {text}")
    return Outcome("measured", str(default), None, wall, knobs)


def write_atomic(path: Path, doc: dict[str, Any], check: Callable[[Path], object] | None = None) -> None:
    """`doc` as JSON at `path` through a temporary file renamed over it, so a crash leaves no half
    file; `check(tmp)` (the reader's own validation) raising removes the temporary file, leaving no
    file the prediction could not use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    if check is not None:
        try:
            check(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(path)


def format_knobs(knobs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in knobs.items())


def load_bench(path: Path = BENCH) -> ModuleType:
    """A bench as a module (bench/ lives beside the package, not in it): bench_ps_costs.py by default,
    bench_incast.py for geryon.demo.incastcal."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (the bench ships with the repository)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_with_bench(path: Path, progress: Progress) -> dict[str, Any]:
    """The bench's measurement at BUDGET, written to `path` (atomically: a crash leaves no half file);
    a knob below the noise floor is a CalibrationError from the bench's `document`."""
    bench = load_bench()
    final, runs = bench.measure(BUDGET["runs"], BUDGET["repeats"], 0, progress)
    doc: dict[str, Any] = bench.document(
        final, runs, BUDGET["repeats"], bench="geryon demo (bench/bench_ps_costs.py)"
    )
    write_atomic(path, doc)
    return doc
