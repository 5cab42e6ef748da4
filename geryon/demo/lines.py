"""The demo's progress lines: one per training round, one per finished run (geryon.demo.runner says them)."""

from __future__ import annotations

from typing import Any


def step_line(event: dict[str, Any]) -> str:
    if event.get("mode"):  # a paired round
        text = f"round {event['step']} {event['mode']} ({event.get('phase')}), {event['seconds']:.2f} s"
    else:
        text = f"step {event['step']}/{event['of']}, {event['seconds']:.2f} s/step"
    if event.get("warmup"):
        text += " (warm-up)"
    if event.get("thresholds") is not None:
        text += ", threshold " + ",".join(f"{t:.3g}" for t in event["thresholds"])
        if event.get("trial"):
            text += f" (search trial {event['trial']})"
    return text


def result_line(run: dict[str, Any]) -> str:
    if run["error"]:
        return f"FAILED after {run['wall_s']:.0f} s: {run['error']}"
    text = f"{run['median_step_s']:.3f} s/step median"
    if run.get("search") and run.get("median_all_s") is not None:
        text += f" after the search (whole run {run['median_all_s']:.3f})"
    text += f", {run['images_per_s']:.1f} images/s"
    if run.get("thresholds") is not None:
        text += ", threshold " + ",".join(f"{t:.3g}" for t in run["thresholds"])
        if run.get("search"):
            text += f" after {run['search']['live_iterations']} search iterations"
    return text + f", {run['wall_s']:.0f} s"
