"""The demo's PNG charts: throughput per mode, scaling efficiency per mode, the threshold search, and
the per-parameter arrival timeline; plus one chart across the results of a sweep (`geryon bench`).

    throughput.png  images/s per mode (median over repeats, bars: min-max), speedup over vanilla
    scaling.png     scaling efficiency per mode against single-worker training (geryon.demo.local)
    search.png      step time per trial threshold, and the search's progress
    timeline.png    when each parameter's pull finished arriving at worker 0 in one steady-state
                    iteration, P+S, the paper's Geryon and Geryon side by side (the simulator's,
                    from result["prediction"]["timeline"], see geryon.demo.predict), coloured by
                    Geryon's class, with the consuming layer's forward start marked and, per class,
                    a line through its parameters in arrival order with Kendall's tau against
                    consumption order in the panel's title (the order inside a class:
                    geryon.demo.timeline.class_order)
    <name>.png      (write_sweep_chart) images/s per mode for every setting of a sweep

matplotlib's Agg canvas on a bare `Figure` (no pyplot: no display, no global backend switch, nothing
left open). File names are fixed (after an optional prefix, which `geryon bench` uses to keep each
setting's charts apart), so a rerun into the same folder replaces every chart; a chart with nothing to
show (no single run, no search, no prediction) still gets written, saying why, rather than leaving an
older run's PNG behind. Failed modes appear on the axes, marked "failed", with no bar.

Redraw the charts of a saved result without running anything again:

    python -m geryon.demo.chart RESULT.json [--out DIR]

RESULT.json is a `geryon demo` result (demo.json, bench-N.json) or `geryon bench`'s bench.json (a list
of them: each one's charts, prefixed bench-N-, and the sweep chart bench.png). The charts go beside
the JSON unless --out says where; NAME.json's charts are prefixed NAME- except demo.json's. Exit 2 for
a missing file or one that is not such a result.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from geryon.demo.report import summarize
from geryon.demo.result_file import DemoResultError, check_result
from geryon.demo.timeline import class_order

CHARTS = ("throughput.png", "scaling.png", "search.png", "timeline.png")
_SIZE = (7.0, 4.2)  # inches; at 100 dpi a 700x420 PNG
TIMELINE_SIZE = (13.8, 5.6)  # three panels of parameter rows (P+S, paper, Geryon): 1380x560
SWEEP_SIZE = (9.0, 4.8)  # 900x480
_DPI = 100
_COLORS = {
    "vanilla": "#9e9e9e",
    "ps": "#5b8ec9",
    "geryon": "#d95f02",
    "paper": "#e6ab02",
    "endhost": "#7570b3",
    "single": "#1b9e77",
}


def chart_prefix(name: str) -> str:
    """The prefix of the charts (and trace) of result file NAME.json: none for demo.json, else NAME-, so
    the settings of a bench keep their own."""
    return "" if name == "demo" else f"{name}-"


def write_charts(result: Mapping[str, Any], out_dir: Path, prefix: str = "") -> list[Path]:
    """Writes CHARTS (each named `prefix` + name) into `out_dir` (created); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    title = _subtitle(result.get("config"))
    paths = []
    for name, draw in zip(CHARTS, (_throughput, _scaling, _search, _timeline), strict=True):
        fig = _figure(TIMELINE_SIZE if name == "timeline.png" else _SIZE)
        draw(fig, summary, result)
        if title:
            fig.suptitle(title, fontsize=8, color="#555555")
        path = out_dir / f"{prefix}{name}"
        fig.savefig(path, dpi=_DPI, format="png", metadata={"Software": None})
        paths.append(path)
    return paths


def _figure(size: tuple[float, float] = _SIZE) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _throughput(fig: Any, summary: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    ax = fig.add_subplot()
    modes = summary["modes"]
    names = list(modes)
    for i, mode in enumerate(names):
        m = modes[mode]
        if m["images_per_s"] is None:
            ax.text(i, 0, "failed", ha="center", va="bottom", color="#b00020", fontsize=9)
            continue
        ax.bar(i, m["images_per_s"], color=_COLORS.get(mode, "#666666"), width=0.6)
        runs = m["images_per_s_all"]
        if len(runs) > 1:
            ax.errorbar(
                i,
                m["images_per_s"],
                yerr=[[m["images_per_s"] - min(runs)], [max(runs) - m["images_per_s"]]],
                color="black",
                capsize=4,
            )
            ax.plot([i] * len(runs), runs, "k.", markersize=4)
        speedup = m["speedup_vs_vanilla"]
        label = f"{m['images_per_s']:.1f}" + (
            f"\n{speedup:.2f}x" if speedup is not None and mode != "vanilla" else ""
        )
        ax.text(i, max(runs), label, ha="center", va="bottom", fontsize=8)
    _mode_axis(ax, names)
    ax.set_ylabel("throughput (images/s, all workers)")
    ax.set_title("Training throughput per mode (median over repeats, bars: min-max)")
    ax.margins(y=0.2)


def _scaling(fig: Any, summary: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    ax = fig.add_subplot()
    modes = summary["modes"]
    names = list(modes)
    values = {m: modes[m]["scaling_efficiency"] for m in names}
    if all(v is None for v in values.values()):
        why = "no completed single-worker run (local or single mode): scaling efficiency needs one"
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=10)
    for i, mode in enumerate(names):
        v = values[mode]
        if v is None:
            failed = modes[mode]["images_per_s"] is None
            ax.text(
                i,
                0,
                "failed" if failed else "n/a",
                ha="center",
                va="bottom",
                fontsize=9,
                color="#b00020" if failed else "#555555",
            )
            continue
        ax.bar(i, v * 100, color=_COLORS.get(mode, "#666666"), width=0.6)
        ax.text(i, v * 100, f"{v * 100:.1f}%", ha="center", va="bottom", fontsize=8)
    ax.axhline(100, color="black", linestyle="--", linewidth=0.8)
    _mode_axis(ax, names)
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, max([110.0, *((v * 100 + 10) for v in values.values() if v is not None)]))
    basis = {
        "local": "single-worker images/s without PS or network",
        "single": "the single mode's images/s (with the PSes)",
    }.get(summary.get("scaling_basis") or "", "single-worker images/s")
    ax.set_title(f"Scaling efficiency = images/s / (workers x {basis})", fontsize=9)


def _search(fig: Any, summary: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    searched = [
        r
        for r in result.get("runs") or []
        if isinstance(r, Mapping) and isinstance(r.get("search"), Mapping) and _trials(r["search"])
    ]
    left, right = fig.subplots(1, 2)
    if not searched:
        for ax in (left, right):
            ax.text(
                0.5,
                0.5,
                "no threshold search in this result",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=9,
            )
    for run in searched:
        trials = _trials(run["search"])
        label = f"{run.get('mode', '?')} #{run.get('repeat', 0)}" + (" (failed)" if run.get("error") else "")
        one = all(len(t) == 1 for t, _, _ in trials)
        # Step time against the trial threshold (the first, with more than two classes).
        left.plot([t[0] for t, _, _ in trials], [s for _, s, _ in trials], "o", label=label, alpha=0.8)
        right.plot(range(1, len(trials) + 1), [s for _, s, _ in trials], "o-", label=label, markersize=4)
        final = run.get("thresholds")
        if isinstance(final, list) and final:
            left.axvline(final[0], color="#d95f02", linestyle="--", linewidth=0.8)
        if not one:
            left.set_xlabel("first threshold of the trial (k > 2 classes)")
    if not left.get_xlabel():
        left.set_xlabel("trial threshold (urgency cut)")
    left.set_ylabel("step time (s)")
    left.set_title("Step time per trial threshold\n(dashed: the chosen one)", fontsize=9)
    right.set_xlabel("trial (in the order tried)")
    right.set_ylabel("step time (s)")
    right.set_title("Search progress", fontsize=9)
    if searched:
        left.legend(fontsize=7)


# --- the arrival timeline -----------------------------------------------------------------------------
# Class colours, most urgent first (orange as Geryon's bars); beyond 8 classes (not allowed) grey.
_CLASS_COLORS = ("#d95f02", "#5b8ec9", "#1b9e77", "#7570b3", "#e6ab02", "#e7298a", "#66a61e", "#a6761d")
_MAX_LABELS = 30  # y tick labels per panel; more layers than that: every k-th


def _timeline(fig: Any, summary: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    why, panels = timeline_panels(result)
    if why:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.set_title("Per-parameter arrival at worker 0 (simulated)")
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=10, wrap=True)
        return
    # Every panel coloured by the class Geryon gives each parameter, so the same rows compare.
    geryon = panels.get("geryon") or next(iter(panels.values()))
    cls = {r["param"]: r["class"] for r in geryon["rows"]}
    k = len(geryon.get("thresholds") or ()) + 1
    axes = fig.subplots(1, len(panels), sharex=True, sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels.values(), strict=True):
        rows = panel["rows"]
        ys = list(range(len(rows)))
        colors = [_class_color(cls.get(r["param"])) for r in rows]
        moving = [
            (y, r, c) for y, r, c in zip(ys, rows, colors, strict=True) if r["first_byte_s"] is not None
        ]
        ax.hlines(
            [y for y, _, _ in moving],
            [r["first_byte_s"] for _, r, _ in moving],
            [r["arrival_s"] for _, r, _ in moving],
            colors=[c for _, _, c in moving],
            linewidth=3,
            alpha=0.35,
        )
        ax.scatter([r["arrival_s"] for r in rows], ys, c=colors, s=18, zorder=3)
        ax.scatter([r["forward_start_s"] for r in rows], ys, c="black", marker="|", s=60, zorder=4)
        # The order inside each class: a thin line through its parameters in the order they arrived.
        # Urgency order runs straight down (first consumed arrives first); arrival order zigzags.
        by_class = class_order([{**r, "class": cls.get(r["param"])} for r in rows])
        for c, o in by_class.items():
            path = o["arrival_order"]
            ax.plot(
                [rows[i]["arrival_s"] for i in path], path, color=_class_color(c), linewidth=0.8, zorder=2
            )
        title = f"{panel.get('label', '?')}: {panel['iteration_s'] * 1e3:.0f} ms/step"
        if panel.get("thresholds"):
            title += ", thr " + ",".join(f"{t:.3g}" for t in panel["thresholds"])
        taus = [f"class {c} {o['tau']:.2f}" for c, o in by_class.items() if o["tau"] is not None]
        if taus:
            title += "\norder in a class vs use, Kendall tau: " + ", ".join(taus)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds from the iteration's start (pulls released)")
        ax.grid(axis="x", alpha=0.3)
    ticks = [
        (y, r["layer_name"])
        for y, r in enumerate(geryon["rows"])
        if y == 0 or r["layer"] != geryon["rows"][y - 1]["layer"]
    ]
    step = -(-len(ticks) // _MAX_LABELS)
    ticks = ticks[::step]
    axes[0].set_yticks([y for y, _ in ticks], [name for _, name in ticks], fontsize=7)
    axes[0].set_ylim(len(geryon["rows"]) - 0.5, -0.5)  # first consumed on top
    axes[0].set_ylabel("parameter, in forward (consumption) order")
    from matplotlib.lines import Line2D

    names = ["urgent", "bulk"] if k == 2 else ["most urgent"] + [""] * (k - 2) + ["least urgent"]
    handles = [
        Line2D([], [], color=_class_color(c), marker="o", linestyle="",
               label=f"class {c}" + (f" ({names[c]})" if names[c] else "") + " arrived")
        for c in range(k)
    ]  # fmt: skip
    handles.append(Line2D([], [], color="black", marker="|", linestyle="", markersize=9,
                          label="forward start of the consuming layer"))  # fmt: skip
    handles.append(Line2D([], [], color="#888888", linewidth=3, alpha=0.35, label="pull in flight"))
    handles.append(Line2D([], [], color="#888888", linewidth=0.8, label="arrival order inside a class"))
    # Below the panels: inside, it would cover the late (bulk) rows.
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", ncols=len(handles))


def _class_color(cls: Any) -> str:
    if isinstance(cls, int) and not isinstance(cls, bool) and 0 <= cls < len(_CLASS_COLORS):
        return _CLASS_COLORS[cls]
    return "#888888"


def timeline_panels(result: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(why there is no timeline, "") or ("", the P+S and Geryon panels) from result["prediction"]."""
    prediction = result.get("prediction")
    if not isinstance(prediction, Mapping):
        return "no prediction in this result (it was skipped), so no simulated timeline", {}
    if prediction.get("error"):
        return f"no timeline: the prediction failed:\n{prediction['error']}", {}
    timeline = prediction.get("timeline")
    if not isinstance(timeline, Mapping):
        return "no timeline in this result's prediction (predicted by an older version)", {}
    if timeline.get("error"):
        return f"no timeline: simulating it failed:\n{timeline['error']}", {}
    panels = {}
    for mode, panel in (timeline.get("modes") or {}).items():
        if (
            isinstance(panel, Mapping)
            and isinstance(panel.get("iteration_s"), int | float)
            and isinstance(panel.get("rows"), list)
            and panel["rows"]
            and all(_row_ok(r) for r in panel["rows"])
        ):
            panels[mode] = panel
    if not panels:
        return "the timeline in this result has no well-formed rows", {}
    return "", panels


def _row_ok(row: Any) -> bool:
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    return (
        isinstance(row, Mapping)
        and isinstance(row.get("param"), str)
        and isinstance(row.get("layer_name"), str)
        and number(row.get("arrival_s"))
        and number(row.get("forward_start_s"))
        and (row.get("first_byte_s") is None or number(row.get("first_byte_s")))
    )


# --- a sweep ------------------------------------------------------------------------------------------
SWEEP_KNOBS = ("model", "batch_size", "workers", "ps", "rate_bits", "buffer_bytes", "slice_bytes", "classes")


def sweep_labels(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One x label per setting, naming only the knobs that differ between the settings."""
    varying = [k for k in SWEEP_KNOBS if len({json.dumps(c.get(k)) for c in configs}) > 1]
    if not varying:
        return [f"#{i}" for i in range(len(configs))]
    return [", ".join(_knob(k, c.get(k)) for k in varying) for c in configs]


def _knob(key: str, value: Any) -> str:
    from geryon.units import format_rate

    if value is None:
        return {"slice_bytes": "no slicing"}.get(key, f"{key} -")
    if key == "rate_bits":
        return format_rate(value)
    if key in ("buffer_bytes", "slice_bytes"):
        return f"{value / 1024:g} KiB " + ("buffer" if key == "buffer_bytes" else "slices")
    names = {
        "workers": f"{value} worker" + ("s" if value != 1 else ""),
        "ps": f"{value} PS",
        "classes": f"{value} classes",
        "batch_size": f"batch {value}",
    }
    return names.get(key, str(value))


def write_sweep_chart(results: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Images/s per mode (grouped bars) for each result of a sweep, x labelled by what changed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(SWEEP_SIZE)
    ax = fig.add_subplot()
    summaries = [summarize(r)["modes"] for r in results]
    modes = list(dict.fromkeys(m for s in summaries for m in s))
    width = 0.8 / max(len(modes), 1)
    for j, mode in enumerate(modes):
        for i, s in enumerate(summaries):
            if mode not in s:
                continue
            x = i - 0.4 + width * (j + 0.5)
            value = s[mode]["images_per_s"]
            if value is None:
                ax.text(x, 0, "failed", rotation=90, ha="center", va="bottom", color="#b00020", fontsize=7)
                continue
            ax.bar(x, value, width=width * 0.9, color=_COLORS.get(mode, "#666666"),
                   label=mode if not any(mode in t for t in summaries[:i]) else None)  # fmt: skip
            ax.text(x, value, f"{value:.0f}", ha="center", va="bottom", fontsize=6)
    if not results:
        ax.text(0.5, 0.5, "no results in this sweep", ha="center", va="center", transform=ax.transAxes)
    labels = sweep_labels([r.get("config") or {} for r in results])
    ax.set_xticks(range(len(results)), labels, fontsize=8, rotation=15 if len(results) > 4 else 0)
    ax.set_xlim(-0.6, max(len(results), 1) - 0.4)
    ax.set_ylabel("throughput (images/s, all workers)")
    ax.set_title(title or "Training throughput per mode for each setting (median over repeats)", fontsize=10)
    ax.margins(y=0.15)
    if modes and results:
        ax.legend(fontsize=7, ncols=len(modes))
    fig.savefig(path, dpi=_DPI, format="png", metadata={"Software": None})
    return path


def _trials(search: Mapping[str, Any]) -> list[tuple[list[float], float, Any]]:
    out = []
    for t in search.get("trials") or []:
        if not isinstance(t, Mapping):
            continue
        ths, step = t.get("thresholds"), t.get("step_s")
        if isinstance(ths, list) and ths and isinstance(step, int | float) and not isinstance(step, bool):
            out.append(([float(x) for x in ths], float(step), t.get("step")))
    return out


def _mode_axis(ax: Any, names: Sequence[str]) -> None:
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, max(len(names), 1) - 0.4)
    ax.set_xlabel("mode")


def _subtitle(config: Any) -> str:
    if not isinstance(config, Mapping):
        return ""
    from geryon.units import format_rate

    rate = config.get("rate_bits")
    return (
        f"{config.get('model', '?')}, batch {config.get('batch_size', '?')}/worker, "
        f"{config.get('workers', '?')} workers, {config.get('ps', '?')} PS"
        + (f", {format_rate(rate)}" if isinstance(rate, int | float) and rate > 0 else "")
    )


# --- redrawing from a saved result --------------------------------------------------------------------
class ChartInputError(ValueError):
    """The JSON is not a result the charts can be drawn from; the message names what is wrong."""


def redraw(data: Any, out_dir: Path, stem: str) -> list[Path]:
    """The charts of a loaded result file named `stem`.json (see the module docstring)."""
    out_dir = Path(out_dir)
    if isinstance(data, list):
        if not data:
            raise ChartInputError("an empty list: no results to chart")
        for i, item in enumerate(data):  # all checked before any chart is drawn
            _check_result(item, f"[{i}]")
        paths: list[Path] = []
        for i, item in enumerate(data):
            own = item.get("path")
            name = Path(own).stem if isinstance(own, str) and own.endswith(".json") else f"{stem}-{i}"
            paths += write_charts(item, out_dir, prefix=f"{name}-")
        paths.append(write_sweep_chart(data, out_dir / f"{stem}.png"))
        return paths
    _check_result(data, "")
    return write_charts(data, out_dir, prefix=chart_prefix(stem))


def _check_result(data: Any, where: str) -> None:
    if not where and not isinstance(data, Mapping):
        raise ChartInputError(
            "the JSON: expected a geryon demo result (an object) or a list of them (bench.json), "
            f"got {type(data).__name__}"
        )
    try:
        check_result(data, where)
    except DemoResultError as e:
        raise ChartInputError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m geryon.demo.chart",
        description="Redraws the PNG charts of a saved geryon demo/bench result (nothing runs again).",
    )
    ap.add_argument("result", metavar="RESULT.json", help="demo.json, bench-N.json or bench.json")
    ap.add_argument("--out", metavar="DIR", default=None, help="where the PNGs go (default: beside the JSON)")
    args = ap.parse_args(argv)
    path = Path(args.result)
    prog = "python -m geryon.demo.chart"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        print(f"{prog}: error: {path}: no such file", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as e:
        print(f"{prog}: error: {path}: cannot read it ({e})", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"{prog}: error: {path}: not valid JSON ({e})", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else path.parent
    try:
        paths = redraw(data, out, path.stem)
    except ChartInputError as e:
        print(f"{prog}: error: {path}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"{prog}: error: --out {out}: cannot write the charts there ({e.strerror or e})", file=sys.stderr
        )
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
