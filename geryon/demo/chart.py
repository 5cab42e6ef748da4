"""The demo's PNG charts: throughput per mode, scaling efficiency per mode, the threshold search.

matplotlib's Agg canvas on a bare `Figure` (no pyplot: no display, no global backend switch, nothing
left open). File names are fixed, so a rerun into the same folder replaces every chart; a chart with
nothing to show (no single run, no search) still gets written, saying why, rather than leaving an
older run's PNG behind. Failed modes appear on the axes, marked "failed", with no bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from geryon.demo.report import summarize

CHARTS = ("throughput.png", "scaling.png", "search.png")
_SIZE = (7.0, 4.2)  # inches; at 100 dpi a 700x420 PNG
_DPI = 100
_COLORS = {
    "vanilla": "#9e9e9e",
    "ps": "#5b8ec9",
    "geryon": "#d95f02",
    "endhost": "#7570b3",
    "single": "#1b9e77",
}


def write_charts(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Writes throughput.png, scaling.png and search.png into `out_dir` (created); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    title = _subtitle(result.get("config"))
    paths = []
    for name, draw in zip(CHARTS, (_throughput, _scaling, _search), strict=True):
        fig = _figure()
        draw(fig, summary, result)
        if title:
            fig.suptitle(title, fontsize=8, color="#555555")
        path = out_dir / name
        fig.savefig(path, dpi=_DPI, format="png", metadata={"Software": None})
        paths.append(path)
    return paths


def _figure() -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=_SIZE, dpi=_DPI, layout="constrained")
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
        single = modes.get("single")
        why = (
            "no single-worker run: scaling efficiency needs one"
            if single is None
            else "the single-worker run failed: scaling efficiency needs it"
        )
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
    ax.set_title("Scaling efficiency = images/s / (workers x single-worker images/s)")


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
