"""The demo's numbers: per-mode medians over repeats, the paper-like table and the issue's targets.

Pure functions over the result JSON (`geryon.demo`, version 1; see `geryon.demo.runner`), so the
table can be rebuilt from a saved result. A run with `error` set, or without a positive throughput,
counts as failed: its mode shows as failed (with the first line of the error) and every number that
needs it reads "n/a". Nothing here raises on a partial result.

Definitions (the paper's, section V-A):
- throughput: images per second over all workers, the median over the repeats that completed;
- speedup: a mode's throughput over vanilla's;
- scaling efficiency: images/s per worker over single-worker training's images/s, i.e.
  images/s / (workers x the baseline's images/s). The baseline is the paper's: one worker without a PS
  and without the network (`result["local"]`, geryon.demo.local, the median over its repeats); a
  result without a completed local run (older files) falls back to the `single` mode (one worker
  against the PSes) and says so; "n/a" without either.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from geryon.tagger.cli import format_bytes
from geryon.units import format_rate

MODE_ORDER = ("vanilla", "ps", "geryon", "paper", "endhost", "single")

# The targets: Geryon's throughput over partition+slicing and over vanilla, network over
# end-host priority (with 2 or more PSes), Geryon at least the paper's design, and the simulator's
# prediction error.
GERYON_OVER_PS = 1.15
GERYON_OVER_PAPER = 1.0
GERYON_OVER_VANILLA = 1.5
PREDICTION_ERROR = 0.10


def summarize(result: Mapping[str, Any]) -> dict[str, Any]:
    """Per mode (medians over repeats): images/s, speedup over vanilla, scaling efficiency,
    thresholds and search iterations; the geryon ratios; the targets with met / not met."""
    config = _mapping(result.get("config"))
    runs = [r for r in _sequence(result.get("runs")) if isinstance(r, Mapping)]
    modes: dict[str, dict[str, Any]] = {}
    for mode in _mode_order(config, runs):
        modes[mode] = _mode_summary(mode, [r for r in runs if r.get("mode") == mode], config)

    def ips(mode: str) -> float | None:
        return modes[mode]["images_per_s"] if mode in modes else None

    vanilla = ips("vanilla")
    local = local_baseline(result)
    baseline, basis = (local, "local") if local is not None else (ips("single"), "single")
    for m in modes.values():
        m["speedup_vs_vanilla"] = _ratio(m["images_per_s"], vanilla)
        m["scaling_efficiency"] = (
            _ratio(m["images_per_s"], m["workers"] * baseline) if baseline and m["workers"] else None
        )
    ratios = {
        "geryon/ps": _ratio(ips("geryon"), ips("ps")),
        "geryon/vanilla": _ratio(ips("geryon"), vanilla),
        "geryon/endhost": _ratio(ips("geryon"), ips("endhost")),
        "geryon/paper": _ratio(ips("geryon"), ips("paper")),
    }
    from geryon.demo.paired import compare_result

    pairs = compare_result(result)
    return {
        "modes": modes,
        "scaling_basis": basis if baseline else None,
        "local_images_per_s": local,
        "ratios": ratios,
        "paired": pairs,
        "ordering": _ordering_note(runs),
        "targets": _targets(modes, ratios, config, result.get("prediction"), pairs),
    }


def local_baseline(result: Mapping[str, Any]) -> float | None:
    """The median images/s of the completed local runs (geryon.demo.local), or None."""
    values = [
        v
        for r in _sequence(result.get("local"))
        if isinstance(r, Mapping) and not r.get("error")
        for v in [_number(r.get("images_per_s"))]
        if v is not None and v > 0
    ]
    return statistics.median(values) if values else None


def _ordering_note(runs: Sequence[Mapping[str, Any]]) -> str | None:
    """Says so when a mode asked for urgency order inside a class and the data plane could not."""
    wanted = sorted({str(r.get("mode")) for r in runs if r.get("order") == "urgency"})
    missing = sorted(
        {
            str(r.get("mode"))
            for r in runs
            if r.get("order") == "urgency" and r.get("ordering_available") is False
        }
    )
    if not missing:
        return None
    return (
        f"urgency order inside a class ({', '.join(wanted)}) is not in the data plane yet (issue 14 item 1): "
        f"{', '.join(missing)} ran with arrival order, so geryon ran the paper's design"
    )


def prediction_notes(prediction: Mapping[str, Any]) -> list[str]:
    """Which compute profile, PS costs and incast efficiency the prediction used (issue 15: say which)."""
    out = []
    profile = _mapping(prediction.get("profile"))
    if profile.get("used"):
        text = f"prediction profile: {profile['used']}, {profile.get('from')}"
        if profile.get("fallback"):
            text += f" ({profile['fallback']})"
        out.append(text)
    # Modes predicted from a profile of their own cluster (predict.OWN_PROFILES): one note per group
    # (the paired modes share theirs).
    said = set()
    for mode, entry in _mapping(prediction.get("modes")).items():
        own = _mapping(_mapping(entry).get("profile"))
        group = own.get("group") or mode  # results saved before groups: single's, named by its mode
        if own.get("used") and group not in said:
            said.add(group)
            compute = own.get("compute_s")
            c = f" (C = {compute:.3f} s)" if isinstance(compute, int | float) else ""
            out.append(f"{group}'s profile: {own['used']}, {own.get('from')}{c}")
    ps_costs = _mapping(prediction.get("ps_costs"))
    if ps_costs.get("note"):
        out.append(str(ps_costs["note"]))
    incast = _mapping(prediction.get("incast"))
    if incast.get("note"):
        out.append(str(incast["note"]))
    return out


def format_table(result: Mapping[str, Any]) -> str:
    """The paper-like table, then the targets (each with its measured number and met / NOT met)."""
    summary = summarize(result)
    config = _mapping(result.get("config"))
    prediction = _mapping(result.get("prediction"))
    predicted = _mapping(prediction.get("modes"))
    header = [
        "mode",
        "protocol",
        "switch",
        "classes",
        "order",
        "P+S",
        "step s",
        "images/s",
        "min-max",
        "x vanilla",
        "scaling",
        "threshold",
        "search its",
    ]
    if predicted:
        header += ["predicted s", "error", "x bound"]
    right = set(range(6, len(header)))
    rows: list[list[str]] = []
    notes: list[str] = []
    for mode, m in summary["modes"].items():
        cells = [
            mode,
            m["protocol"] or "-",
            m["switch"] or "-",
            _classes_cell(m, config),
            _order_cell(m),
            _yes_no(m["partitioned"]),
        ]
        if m["images_per_s"] is None:
            cells.append(
                f"FAILED ({m['failed']}/{m['repeats']} runs): {m['errors'][0] if m['errors'] else '?'}"
            )
            rows.append(cells)
            continue
        spread = m["images_per_s_all"]
        cells += [
            f"{m['median_step_s']:.3f}" if m["median_step_s"] is not None else "n/a",
            f"{m['images_per_s']:.1f}",
            f"{min(spread):.1f}-{max(spread):.1f}" if len(spread) > 1 else "-",
            _times(m["speedup_vs_vanilla"]),
            _percent(m["scaling_efficiency"]),
            ",".join(f"{t:.3g}" for t in m["thresholds"]) if m["thresholds"] else "-",
            f"{m['search_iterations']:g}" if m["search_iterations"] is not None else "-",
        ]
        if predicted:
            p = _mapping(predicted.get(mode))
            cells += [
                _seconds(p.get("predicted_s")),
                _signed_percent(p.get("error")),
                _times(_ratio(_number(m["median_step_s"]), _number(p.get("bound_s")))),
            ]
        rows.append(cells)
        if m["failed"]:
            notes.append(
                f"{mode}: {m['failed']} of {m['repeats']} runs failed "
                f"({m['errors'][0]}); medians over the {m['ok']} that completed"
            )
    out = [_title(config)]
    if isinstance(result.get("shape_note"), str):
        out.append(result["shape_note"])
    out += _aligned([header, *rows], right)
    if prediction.get("error"):
        notes.append(f"prediction: failed: {_first_line(prediction['error'])}")
    notes += prediction_notes(prediction)
    if summary["ordering"]:
        notes.append(summary["ordering"])
    out += [f"  note: {n}" for n in notes]
    if summary["scaling_basis"] == "local":
        basis = (
            f"single-worker training without PS or network, {summary['local_images_per_s']:.1f} images/s, "
            "the paper's baseline"
        )
        single = _mapping(summary["modes"].get("single")).get("scaling_efficiency")
        if isinstance(single, float) and single < 0.5:
            # The emulated cluster's tasks share this machine's cores: say it, or the column misleads.
            out.append(
                f"  note: one worker with its PSes (single) trains at {single:.0%} of one worker alone: the "
                "cluster's processes share this machine's cores, so scaling here measures the CPU as much "
                "as the network"
            )
    elif summary["scaling_basis"] == "single":
        basis = "single's images/s: no local run in this result, so against one worker WITH the PSes"
    else:
        basis = "a baseline: none completed"
    out.append(f"images/s over all workers; scaling = images/s / (workers x {basis}); min-max over repeats")
    if any(_number(_mapping(p).get("bound_s")) for p in predicted.values()):
        out.append(
            "x bound = step / the simulator's lower bound for the mode's cluster: compute as profiled, or "
            "the busiest link busy at its rate all step (no schedule is faster; 1.00x is the floor)"
        )
    if config.get("api") == "fit":
        out.append(fit_note(config))
    if summary["paired"]:
        from geryon.demo.paired import RESAMPLES, format_rows

        out += [
            "",
            f"Paired (A's throughput over B's: median of pair ratios, bootstrap 95% interval, {RESAMPLES} "
            "resamples; round pairs alternate in one cluster, run pairs within a repeat):",
            *format_rows(summary["paired"]),
        ]
    if summary["targets"]:
        repeats = max((m["repeats"] for m in summary["modes"].values()), default=0)
        out += [
            "",
            f"Targets (ratios: paired where 2+ pairs, else medians over {repeats} repeat"
            f"{'s' if repeats != 1 else ''}):",
        ]
        out += _aligned(
            [
                [
                    f"  {t['target']}",
                    t["measured_text"],
                    "met" if t["met"] else ("NOT met" if t["met"] is False else "n/a"),
                    t["note"],
                ]
                for t in summary["targets"]
            ],
            {1},
        )
    return "\n".join(out) + "\n"


# --- per mode ------------------------------------------------------------------------------------
def _mode_summary(mode: str, runs: list[Mapping[str, Any]], config: Mapping[str, Any]) -> dict[str, Any]:
    ok: list[tuple[Mapping[str, Any], float]] = []
    errors: list[str] = []
    for r in runs:
        value = run_images_per_s(r, config)
        if r.get("error") or value is None:
            errors.append(_first_line(r.get("error") or "no step times recorded"))
        else:
            ok.append((r, value))
    first = runs[0] if runs else {}
    workers = _positive_int(first.get("workers")) or (
        1 if mode == "single" else _positive_int(config.get("workers"))
    )
    step_medians = [s for s in (_run_step_s(r) for r, _ in ok) if s is not None]
    thresholds = [tuple(r["thresholds"]) for r, _ in ok if _number_list(r.get("thresholds"))]
    searches = [_mapping(r.get("search")) for r, _ in ok if isinstance(r.get("search"), Mapping)]
    iterations = [s["live_iterations"] for s in searches if _is_number(s.get("live_iterations"))]
    converged = [s["converged_step"] for s in searches if _is_number(s.get("converged_step"))]
    return {
        "repeats": len(runs),
        "ok": len(ok),
        "failed": len(runs) - len(ok),
        "errors": errors,
        "workers": workers,
        "protocol": first.get("protocol"),
        "switch": first.get("switch"),
        "order": first.get("order"),
        "single_class": bool(first.get("single_class")),
        "ordering_available": first.get("ordering_available"),
        "partitioned": first.get("partitioned"),
        "images_per_s": statistics.median(v for _, v in ok) if ok else None,
        "images_per_s_all": [v for _, v in ok],
        "median_step_s": statistics.median(step_medians) if step_medians else None,
        # The most common final thresholds over the repeats (the search may settle differently).
        "thresholds": list(Counter(thresholds).most_common(1)[0][0]) if thresholds else None,
        "thresholds_per_repeat": [list(t) for t in thresholds],
        "search_iterations": statistics.median(iterations) if iterations else None,
        "converged_step": statistics.median(converged) if converged else None,
    }


def run_images_per_s(run: Mapping[str, Any], config: Mapping[str, Any]) -> float | None:
    """A run's images/s: its own number, else the global batch over its median step time."""
    value = _number(run.get("images_per_s"))
    if value is not None and value > 0:
        return value
    step = _run_step_s(run)
    batch = _positive_int(config.get("batch_size"))
    workers = _positive_int(run.get("workers")) or _positive_int(config.get("workers"))
    if step is None or batch is None or workers is None:
        return None
    return batch * workers / step


def _run_step_s(run: Mapping[str, Any]) -> float | None:
    value = _number(run.get("median_step_s"))
    if value is not None and value > 0:
        return value
    times = _number_list(run.get("step_times"))
    times = [t for t in times if t > 0]
    return statistics.median(times) if times else None


# --- targets -------------------------------------------------------------------------------------
def _targets(
    modes: Mapping[str, Mapping[str, Any]],
    ratios: Mapping[str, float | None],
    config: Mapping[str, Any],
    prediction: Any,
    pairs: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    by_pair = {(p["a"], p["b"]): p for p in pairs}

    def paired_note(other: str) -> str:
        p = by_pair.get(("geryon", other))
        if not p or p["ratio"] is None:
            return ""
        ci = f" [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" if p["ci"] else ""
        return f"paired {p['ratio']:.3f}x{ci} ({p['pairs']} {p['unit']} pairs): {p['verdict']}"

    def add(name: str, target: str, measured: float | None, met: bool | None, text: str, note: str) -> None:
        targets.append(
            {
                "name": name,
                "target": target,
                "measured": measured,
                "met": met,
                "measured_text": text,
                "note": note,
            }
        )

    def ratio_target(other: str, goal: float, strict: bool, extra_note: str = "") -> None:
        if "geryon" not in modes or other not in modes:
            return
        r = ratios[f"geryon/{other}"]
        target = f"geryon {'>' if strict else '>='} {'' if strict else f'{goal:g}x '}{other}"
        if r is None:
            failed = [m for m in ("geryon", other) if modes[m]["images_per_s"] is None]
            add(f"geryon/{other}", target, None, None, "n/a", f"not measured: {', '.join(failed)} failed")
            return
        # Paired ratios where there are 2 or more pairs (noise shared within each pair), else the
        # ratio of the medians over repeats.
        pair = by_pair.get(("geryon", other))
        if pair and pair["ratio"] is not None and pair["pairs"] >= 2:
            r = pair["ratio"]
        met = r > goal if strict else r >= goal
        # "geryon > other" is a claim that geryon is faster: with a paired interval it holds only when
        # the whole interval clears the goal (a ratio above it whose interval spans it is noise).
        if strict and met and pair and pair["ratio"] is not None and pair["pairs"] >= 2 and pair.get("ci"):
            met = pair["ci"][0] > goal
        note = "; ".join(n for n in (extra_note, paired_note(other)) if n)
        add(f"geryon/{other}", target, r, met, f"{r:.2f}x", note)

    ratio_target("ps", GERYON_OVER_PS, False)
    ratio_target("vanilla", GERYON_OVER_VANILLA, False)
    ratio_target("paper", GERYON_OVER_PAPER, False)
    ps = _positive_int(config.get("ps"))
    if ps is not None and ps < 2 and "geryon" in modes and "endhost" in modes:
        r = ratios["geryon/endhost"]
        add(
            "geryon/endhost",
            "geryon > endhost",
            r,
            None,
            f"{r:.2f}x" if r is not None else "n/a",
            f"the target needs >= 2 PSes; this run has {ps}",
        )
    else:
        ratio_target("endhost", 1.0, True, f"{ps} PSes" if ps else "")

    pred = _mapping(prediction)
    pred_modes = _mapping(pred.get("modes"))
    if prediction is not None and pred.get("error") and not pred_modes:
        add(
            "prediction",
            f"prediction error <= {PREDICTION_ERROR:.0%}",
            None,
            None,
            "n/a",
            f"prediction failed: {_first_line(pred['error'])}",
        )
    for mode, p in pred_modes.items():
        p = _mapping(p)
        err = _number(p.get("error"))
        target = f"prediction error {mode} <= {PREDICTION_ERROR:.0%}"
        if err is None:
            add(f"prediction/{mode}", target, None, None, "n/a", "no measured or predicted time")
            continue
        add(
            f"prediction/{mode}",
            target,
            err,
            abs(err) <= PREDICTION_ERROR,
            _signed_percent(err),
            f"measured {_seconds(p.get('measured_s'))}, predicted {_seconds(p.get('predicted_s'))}",
        )
    return targets


# --- formatting ----------------------------------------------------------------------------------
def fit_note(config: Mapping[str, Any]) -> str:
    """What a step is on the fit path (geryon.demo.fit), for the table's footer."""
    n = config.get("steps_per_execution", 1)
    return (
        f"fit path: tf_keras model.fit's own train function, steps_per_execution {n}; each of the "
        f"{config.get('steps', '?')} measured rounds trains {n} steps per worker and step s = the round's "
        f"time / {n}, so it compares with the custom loop's one-step rounds"
    )


def _title(config: Mapping[str, Any]) -> str:
    parts = [f"model {config.get('model', '?')}"]
    shape = _number_list(config.get("input_shape"))
    if shape:
        parts.append("x".join(f"{int(d)}" for d in shape))
    if config.get("batch_size") is not None:
        parts.append(f"batch {config['batch_size']}/worker")
    if config.get("workers") is not None:
        parts.append(f"{config['workers']} workers")
    if config.get("ps") is not None:
        parts.append(f"{config['ps']} PS")
    if _is_number(config.get("rate_bits")) and config["rate_bits"] > 0:
        parts.append(format_rate(config["rate_bits"]))
    if _is_number(config.get("buffer_bytes")):
        parts.append(f"buffer {format_bytes(config['buffer_bytes'])}")
    if _is_number(config.get("slice_bytes")):
        parts.append(f"slices {format_bytes(config['slice_bytes'])}")
    if config.get("classes") is not None:
        parts.append(f"{config['classes']} classes")
    if config.get("api") == "fit":
        parts.append(f"api fit (steps_per_execution {config.get('steps_per_execution', 1)})")
    if config.get("steps") is not None:
        parts.append(f"{config['steps']} steps ({config.get('warmup', '?')} warm-up)")
    if config.get("repeats") is not None:
        parts.append(f"{config['repeats']} repeat(s)")
    if _is_number(config.get("background_bits")) and config["background_bits"] > 0:
        parts.append(f"background {format_rate(config['background_bits'])} per worker port")
    if isinstance(config.get("second_job"), str):
        parts.append(f"second job {config['second_job']} (model:batch)")
    return ", ".join(parts)


def _aligned(table: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Columns padded to their widest cell; the last cell of a row shorter than the widest (a failed
    mode's message) runs on instead of widening its column."""
    n = max(len(r) for r in table)
    widths = [0] * n
    for row in table:
        for i, c in enumerate(row):
            if len(row) == n or i < len(row) - 1:
                widths[i] = max(widths[i], len(c))
    lines = []
    for row in table:
        cells = [
            c
            if len(row) < n and i == len(row) - 1
            else (c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
            for i, c in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _classes_cell(m: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    if not str(m.get("protocol") or "").startswith("grpc+geryon"):
        return "-"
    return "1" if m.get("single_class") else str(config.get("classes", "?"))


def _order_cell(m: Mapping[str, Any]) -> str:
    order = m.get("order")
    if not order:
        return "-"
    return f"{order} (n/a)" if order == "urgency" and m.get("ordering_available") is False else order


def _times(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "n/a"


def _percent(x: float | None) -> str:
    return f"{x * 100:.1f}%" if x is not None else "n/a"


def _signed_percent(x: Any) -> str:
    return f"{x * 100:+.1f}%" if _is_number(x) else "n/a"


def _seconds(x: Any) -> str:
    return f"{x:.3f}" if _is_number(x) else "n/a"


def _yes_no(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "no")


def _first_line(text: Any) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "?"


# --- tolerant access -----------------------------------------------------------------------------
def _mode_order(config: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for m in [*_sequence(config.get("modes")), *(r.get("mode") for r in runs)]:
        if isinstance(m, str):
            seen[m] = None
    rank = {m: i for i, m in enumerate(MODE_ORDER)}
    return sorted(seen, key=lambda m: (rank.get(m, len(rank)), list(seen).index(m)))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _number(x: Any) -> float | None:
    return float(x) if _is_number(x) else None


def _positive_int(x: Any) -> int | None:
    return int(x) if _is_number(x) and x >= 1 else None


def _number_list(x: Any) -> list[float]:
    if not isinstance(x, list | tuple) or not all(_is_number(v) for v in x):
        return []
    return [float(v) for v in x]


def _mapping(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _sequence(x: Any) -> Sequence[Any]:
    return x if isinstance(x, list | tuple) else ()
