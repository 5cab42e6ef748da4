"""Synthetic `geryon.demo` results (the runner's JSON schema) for the report, chart and predict tests."""

from __future__ import annotations

from typing import Any

MODES = ("vanilla", "ps", "geryon", "paper", "endhost", "single")
# mode -> (protocol, switch, partitioned), as the runner records them.
SETTINGS = {
    "vanilla": ("grpc", "fifo", False),
    "ps": ("grpc", "fifo", True),
    "geryon": ("grpc+geryon", "priority", True),
    "paper": ("grpc+geryon", "priority", True),
    "endhost": ("grpc+geryon", "fifo", True),
    "single": ("grpc", "fifo", True),
}


def run(mode: str, repeat: int, step_s: float, *, workers: int = 2, batch: int = 32, **extra: Any) -> dict:
    protocol, switch, partitioned = SETTINGS[mode]
    searched = mode == "geryon"
    record = {
        "mode": mode,
        "repeat": repeat,
        "workers": workers,
        "protocol": protocol,
        "switch": switch,
        "partitioned": partitioned,
        "step_times": [step_s * f for f in (0.98, 1.0, 1.02)],
        "median_step_s": step_s,
        "images_per_s": batch * workers / step_s,
        "thresholds": [0.5] if mode in ("geryon", "paper") else ([1.0] if mode == "endhost" else None),
        "order": {"geryon": "urgency", "paper": "arrival", "endhost": "urgency"}.get(mode),
        "single_class": mode == "endhost",
        "search": {
            "strategy": "sweep",
            "live_iterations": 9,
            "converged_step": 14,
            "trials": [
                {"step": 6 + i, "thresholds": [t], "step_s": step_s + (t - 0.5) ** 2}
                for i, t in enumerate((0.1, 0.3, 0.5, 0.7, 0.9))
            ],
        }
        if searched
        else None,
        "switch_counters": {},
        "wall_s": 10.0,
        "error": None,
    }
    record.update(extra)
    return record


def result(
    step_s: dict[str, list[float]],
    *,
    ps: int = 2,
    batch: int = 32,
    model: str = "vggmini",
    input_shape: tuple[int, int, int] = (32, 32, 3),
    rate_bits: float = 100e6,
    prediction: dict | None = None,
) -> dict:
    """A result whose mode m has one run per entry of step_s[m] (seconds per step; None: failed)."""
    runs = []
    for mode, steps in step_s.items():
        for i, s in enumerate(steps):
            workers = 1 if mode == "single" else 2
            if s is None:
                runs.append(
                    run(
                        mode,
                        i,
                        1.0,
                        workers=workers,
                        batch=batch,
                        error="RuntimeError: worker1 died\nTraceback (most recent call last): ...",
                        step_times=[],
                        median_step_s=None,
                        images_per_s=None,
                    )
                )
            else:
                runs.append(run(mode, i, s, workers=workers, batch=batch))
    return {
        "format": "geryon.demo",
        "version": 1,
        "config": {
            "model": model,
            "input_shape": list(input_shape),
            "batch_size": batch,
            "workers": 2,
            "ps": ps,
            "rate_bits": rate_bits,
            "buffer_bytes": 262144,
            "slice_bytes": 1048576,
            "classes": 2,
            "steps": 40,
            "warmup": 5,
            "repeats": max(len(v) for v in step_s.values()),
            "search": "sweep",
            "modes": list(step_s),
        },
        "params": [],
        "runs": runs,
        "summary": {},
        "prediction": prediction,
    }
