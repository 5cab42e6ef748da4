"""`geryon demo` and `geryon bench`: real TensorFlow training on the emulated cluster (geryon.testbed).

    geryon demo [--quick] [--model M] [--steps N] [--out DIR] [--json]
    geryon bench --workers 1,2,4 --slice-size 1MiB,256KiB ...

The demo trains the same CNN under vanilla TF (grpc, whole variables), partition+slicing, Geryon
(grpc+geryon, priority switch, adaptive threshold search), end-host priority only (Geryon's flows,
FIFO switch) and one worker, and prints a table like the paper's. Modules: `modes` (what each mode
runs), `chief` (the training loop; the PS and worker tasks and the models are geryon.cluster's),
`runner` (orchestration, result JSON), `cli` (arguments and output); `report`, `chart`, `predict`
turn a result into the table, the PNGs and the simulator's prediction.
"""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Adds `demo` and `bench` to the `geryon` command's subparsers."""
    from geryon.demo import cli

    cli.add_demo(sub)
    cli.add_bench(sub)
