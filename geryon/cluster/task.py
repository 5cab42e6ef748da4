"""One PS or worker task of a TF cluster: `python -m geryon.cluster.task SPEC_JSON`.

The demo's runner starts it inside a testbed host's network namespace. SPEC_JSON (one argument):
    {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "job": "ps", "index": 0,
     "protocol": "grpc" | "grpc+geryon", "intra_threads": 1, "inter_threads": 2,
     "class_dscp": [46, 26] | null, "class_priority": [0, 0] | null (SO_PRIORITY per class;
     null: geryon.tf's defaults), "profiler_port": 6009 | null}
With "profiler_port" the task also starts TensorFlow's profiler server on that port
(tf.profiler.experimental.server.start), so `python -m geryon.threshold.incluster` can capture a trace
of the steps it runs while the cluster trains: compute timed where it runs, contention included.
It prints "READY <pid>" once the server listens, then serves until it is killed (by PID).

Few threads per task: five TensorFlow processes share the machine's two cores, and TF's default
pools (one thread per core each, per process) would make them fight over them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from geryon.cluster.protocol import READY


def limit_threads(intra: int, inter: int) -> None:
    """Caps TF's thread pools (set before TF starts any) and the math libraries' OpenMP pools."""
    os.environ.setdefault("OMP_NUM_THREADS", str(intra))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(intra))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(inter))


def serve(spec: dict[str, Any]) -> Any:
    """Starts the task's server (protocol per spec); returns it."""
    limit_threads(int(spec.get("intra_threads", 1)), int(spec.get("inter_threads", 2)))
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(spec["cluster"])
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=int(spec.get("intra_threads", 1)),
        inter_op_parallelism_threads=int(spec.get("inter_threads", 2)),
    )
    if spec["protocol"] == "grpc+geryon":
        import geryon.tf

        if spec.get("class_dscp"):
            geryon.tf.set_class_marks(list(spec["class_dscp"]), spec.get("class_priority"))
        return geryon.tf.server(cluster, spec["job"], int(spec["index"]), config=config)
    return tf.distribute.Server(
        cluster, job_name=spec["job"], task_index=int(spec["index"]), protocol=spec["protocol"], config=config
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.cluster.task SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    server = serve(spec)
    if spec.get("profiler_port"):
        import tensorflow as tf

        tf.profiler.experimental.server.start(int(spec["profiler_port"]))
    print(f"{READY} {os.getpid()} {server.target}", flush=True)
    while True:  # the runner kills this process by PID when the mode is over
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
