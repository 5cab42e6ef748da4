"""Captures worker 0's in-cluster profile during one demo mode: `python -m geryon.demo.capture SPEC_JSON`.

The runner starts this in worker 0's host (network namespace), beside the worker task it traces, when
the mode's tasks start; the worker task runs TensorFlow's profiler server (`"profiler_port"` in its
spec, geryon.cluster.task). SPEC_JSON:
    {"service": "grpc://127.0.0.1:6009", "duration_ms": 3000, "model": "vggmini",
     "input_shape": [32, 32, 3], "batch_size": 256, "logdir": DIR, "out": PROFILE_JSON}

The service is the worker's loopback: the trace's bytes never cross the emulated (shaped) links. The
protocol on stdin/stdout lets the runner place the costly parts where they disturb the run least:
    -> "READY"           TensorFlow is imported (done while the cluster starts, not during steps)
    <- "trace"           the chief finished its measured steps and waits: trace `duration_ms` now
    -> "TRACING"         the trace call starts; the runner tells the chief to run its unmeasured tail
                         rounds (spec "trace_tail_s", geryon.demo.chief), which the trace sees
    -> "TRACED <xplane>"
    <- "convert" or EOF  the mode is over: convert the trace into a profile (geryon.threshold.incluster)
    -> "DONE <out>"      exit 0; on any failure "ERROR <message>" and exit 1
Converting after the mode keeps the Keras model build and the protobuf parsing off the cores that the
measured steps use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def say(line: str) -> None:
    print(line, flush=True)


def run(spec: dict[str, Any]) -> int:
    from geryon.tfenv import import_tensorflow

    import_tensorflow()  # the import is most of the start-up cost: do it before any step runs
    from geryon.cluster.models import build_model
    from geryon.threshold.incluster import capture, profile_from_ops, read_trace

    say("READY")
    if sys.stdin.readline().strip() != "trace":
        say("ERROR the runner did not ask for a trace (the mode ended first)")
        return 1
    say("TRACING")  # the runner lets the chief's tail rounds start now
    xplane = capture(spec["service"], spec["logdir"], int(spec["duration_ms"]))
    say(f"TRACED {xplane}")
    sys.stdin.readline()  # "convert", or EOF when the runner closed our stdin
    shape = tuple(int(d) for d in spec["input_shape"])
    ops, overlap = read_trace(xplane)
    profile = profile_from_ops(
        ops,
        build_model(spec["model"], shape),  # type: ignore[arg-type]
        batch_size=int(spec["batch_size"]),
        source=f"incluster:{spec.get('mode', 'demo')}:worker0",
        meta={"trace": str(xplane), "duration_ms": int(spec["duration_ms"]), "mode": spec.get("mode")},
        overlap=overlap,
    )
    profile.save(spec["out"])
    say(f"DONE {spec['out']}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.demo.capture SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    Path(spec["logdir"]).mkdir(parents=True, exist_ok=True)
    try:
        return run(spec)
    except Exception as e:  # the runner falls back to the alone profile and records why
        say(f"ERROR {type(e).__name__}: {e}".replace("\n", " "))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
