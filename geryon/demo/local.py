"""Single-worker training without a PS and without the network: `python -m geryon.demo.local SPEC_FILE`.

The paper's scaling efficiency (paper 002, Sec. V-A) is a mode's images/s per worker over single-GPU
training's: one device, its variables at hand, no parameter server and no network. The demo's `single`
mode is not that (one worker against the PSes over the testbed's links), so the runner also runs this:
the same model, batch, input shape and step as the chief's workers (random inputs made in the step,
plain SGD on each variable, geryon.demo.chief's custom step), in one process in worker 0's host with
a worker task's thread limits, `warmup` steps untimed, then `steps` timed one by one.

SPEC_FILE (JSON): model, input_shape, batch_size, num_classes (default 10), warmup, steps,
intra_threads, inter_threads. On stdout, prefixed by MARKER: "done" with every timed step's seconds,
or "error" with the message. Nothing else on stdout is parsed.
"""

from __future__ import annotations

import json
import queue
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from geryon.cluster.procs import REPO_ROOT, LineReader, base_env, stop
from geryon.cluster.protocol import MARKER, emit
from geryon.cluster.task import limit_threads
from geryon.demo.session import sgd_replica_step


def train(spec: dict[str, Any]) -> list[float]:
    """Step seconds of `steps` timed steps after `warmup` untimed ones (the first traces the step)."""
    intra, inter = int(spec.get("intra_threads", 1)), int(spec.get("inter_threads", 2))
    limit_threads(intra, inter)
    import keras
    import tensorflow as tf

    from geryon.cluster.models import build_model

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    keras.utils.set_random_seed(1)
    h, w, c = (int(d) for d in spec["input_shape"])
    shape = (h, w, c)
    batch, num_classes = int(spec["batch_size"]), int(spec.get("num_classes", 10))
    model = build_model(spec["model"], shape, num_classes)
    step = tf.function(sgd_replica_step(model, list(model.trainable_variables), batch, shape, num_classes))

    for _ in range(max(1, int(spec.get("warmup", 1)))):
        step().numpy()
    times = []
    for _ in range(int(spec["steps"])):
        start = time.perf_counter()
        step().numpy()  # .numpy() waits for the step, as the chief's join does
        times.append(time.perf_counter() - start)
    return times


# The runner's side: TF's import, the model and every step; nothing printed for this long fails the run.
LOCAL_TIMEOUT_S = 300.0


def spec_for(cfg: dict[str, Any]) -> dict[str, Any]:
    """This module's spec from the demo's config: what a worker task and the chief's step use."""
    return {
        "model": cfg["model"],
        "input_shape": cfg["input_shape"],
        "batch_size": cfg["batch_size"],
        "warmup": cfg["warmup"],
        "steps": cfg["steps"],
        "intra_threads": cfg["threads"],
        "inter_threads": 2,
    }


def run_local(tb: Any, cfg: dict[str, Any], log_dir: Path, label: str) -> dict[str, Any]:
    """Runs this module in worker 0's host (no task of a cluster beside it); a record with its step
    times, median and images/s, or `error` set. Never raises for a failed run."""
    record: dict[str, Any] = {
        "label": label,
        "error": None,
        "step_times": [],
        "median_step_s": None,
        "images_per_s": None,
    }
    started = time.monotonic()
    spec_path = log_dir / f"{label}.json"
    spec_path.write_text(json.dumps(spec_for(cfg), indent=1))
    log_path = log_dir / f"{label}.log"
    proc = None
    try:
        with log_path.open("w") as log:
            proc = tb.popen(
                "worker0",
                [sys.executable, "-m", "geryon.demo.local", str(spec_path)],
                env=base_env(),
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=str(REPO_ROOT),
                text=True,
            )
        event = _wait_done(LineReader(proc))
        times = [float(t) for t in event["step_times"]]
        median = statistics.median(times) if times else None
        record.update(
            step_times=times,
            median_step_s=median,
            images_per_s=cfg["batch_size"] / median if median else None,
        )
    except LocalError as e:
        record["error"] = str(e)  # the run's own message
    except Exception as e:  # it died, hung or never started: its log says why
        tail = log_path.read_text(errors="replace")[-800:] if log_path.exists() else ""
        record["error"] = f"{e}: {tail}" if tail else str(e)
    finally:
        if proc is not None:
            stop(proc)
        record["wall_s"] = round(time.monotonic() - started, 3)
    return record


class LocalError(RuntimeError):
    """The local run reported its own error."""


def _wait_done(reader: LineReader) -> dict[str, Any]:
    deadline = time.monotonic() + LOCAL_TIMEOUT_S
    while True:
        try:
            line = reader.get(deadline - time.monotonic())
        except queue.Empty:
            raise RuntimeError(f"the local run printed no result within {LOCAL_TIMEOUT_S:.0f} s") from None
        if line is None:
            raise RuntimeError("the local run exited without a result")
        if line.startswith(MARKER):
            event = json.loads(line[len(MARKER) :])
            if event.get("event") == "error":
                raise LocalError(f"local run: {event['error']}")
            if event.get("event") == "done":
                return event


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.demo.local SPEC_FILE", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            spec = json.load(f)
        emit({"event": "done", "step_times": train(spec)})
    except Exception as e:
        traceback.print_exc()
        emit({"event": "error", "error": f"{type(e).__name__}: {e}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
