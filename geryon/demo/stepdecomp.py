"""A traced worker's training steps split into the terms a step-time prediction adds up.

The in-cluster capture (`geryon.demo.capture`, TensorFlow's profiler on worker 0) records, besides
the op kernels `geryon.threshold.incluster` sums into a profile, three things the profile drops:

- the step itself: the worker's ``EagerLocalExecute: __inference_train_step_<n>`` span, one per
  closure the ClusterCoordinator ran on it;
- every parameter pull's arrival: an ``ExecutorState::ProcessAsync::Done`` event of a ``_Recv``
  kernel whose node reads a variable (``.../ReadVariableOp.../_<n>``);
- the PSes' "update done" signals: the ``_Recv`` of ``GroupCrossDeviceControlEdges_<i>/...``, one per
  PS, arriving when that PS applied the worker's gradients.

`decompose` turns them into one `StepParts` per step the trace holds whole: when the last pull
arrived, when the first and last layer op ran, the time no layer op ran inside the compute span,
how long after the last op the step ended (pushes and the PSes' updates), and how long the worker
then idled before its next step (the round's join and dispatch, and waiting for the slower worker).
`read_events` reads them from an XSpace trace (`*.xplane.pb`); `decompose` is pure, so it is tested
on synthetic events.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from geryon.threshold.incluster import TRANSFER_TYPES, host_events

STEP, LAYER_OP, PULL, UPDATE_DONE = "step", "layer_op", "pull", "update_done"
KINDS = (STEP, LAYER_OP, PULL, UPDATE_DONE)

_STEP_EVENT = re.compile(r"^EagerLocalExecute: __inference_train_step")
_OP_EVENT = re.compile(r"^(?P<name>[^:\s]+):(?P<type>[A-Za-z0-9_]+)$")
# Not compute: transfers, and the partitioned variables' gather/scatter (a layer's ConcatV2 of its
# pulled parts runs as the parts arrive, long before the layer computes; Slice splits a gradient).
_NOT_LAYER_TYPES = TRANSFER_TYPES | frozenset(
    {"ConcatV2", "Concat", "Slice", "Split", "SplitV"} | {"Reshape", "Identity", "Cast", "Pack", "Unpack"}
)
_PULL_NODE = re.compile(r"/ReadVariableOp(_\d+)?/_\d+$")
_UPDATE_NODE = re.compile(r"^GroupCrossDeviceControlEdges_\d+/")
_ASYNC_DONE = "ExecutorState::ProcessAsync::Done"
BACKWARD_PREFIX = "gradient_tape/"


@dataclass(frozen=True)
class Event:
    kind: str  # one of KINDS
    start_s: float
    end_s: float
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"event.kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")
        if not self.end_s >= self.start_s:
            raise ValueError(f"event {self.name!r}: end_s {self.end_s} before start_s {self.start_s}")


@dataclass(frozen=True)
class StepParts:
    """One traced step, every time in seconds from the step's start (durations where named _s)."""

    step_s: float  # the worker's train_step span
    pulls: int  # parameter pulls that arrived inside it
    last_pull_s: float | None  # when the last pull arrived (None: no pull traced)
    first_op_s: float  # the first layer op's start: waiting for parameters before compute
    last_op_s: float  # the last layer op's end
    busy_s: float  # time with at least one layer op running, inside [first_op_s, last_op_s]
    idle_in_compute_s: float  # (last_op_s - first_op_s) - busy_s: no op ran (waiting or descheduled)
    tail_s: float  # step end - last op end: the last pushes and the PSes' updates
    first_update_s: float | None  # when the first PS's "update done" arrived (None: not traced)
    last_update_s: float | None  # when the last PS's (the PSes finish apart: pushes queue unevenly)
    gap_s: float | None  # this step's end to the worker's next step's start (None: last traced)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decompose(events: Iterable[Event]) -> list[StepParts]:
    """The steps whose whole span (and at least one layer op) the events hold, in time order.
    Ops are assigned to the step whose span contains them, pulls and update signals to the step
    whose span (start excluded) contains their arrival."""
    evs = list(events)
    steps = sorted((e for e in evs if e.kind == STEP), key=lambda e: e.start_s)
    out: list[StepParts] = []
    for i, step in enumerate(steps):
        t0, t1 = step.start_s, step.end_s
        ops = [e for e in evs if e.kind == LAYER_OP and e.start_s >= t0 and e.end_s <= t1]
        if not ops:
            continue
        # Arrivals count where they end; one at a step's exact start closed the step before.
        pulls = [e.end_s for e in evs if e.kind == PULL and t0 < e.end_s <= t1]
        updates = [e.end_s for e in evs if e.kind == UPDATE_DONE and t0 < e.end_s <= t1]
        first = min(e.start_s for e in ops)
        last = max(e.end_s for e in ops)
        busy = union_length([(e.start_s, e.end_s) for e in ops])
        nxt = steps[i + 1].start_s if i + 1 < len(steps) else None
        out.append(
            StepParts(
                step_s=t1 - t0,
                pulls=len(pulls),
                last_pull_s=max(pulls) - t0 if pulls else None,
                first_op_s=first - t0,
                last_op_s=last - t0,
                busy_s=busy,
                idle_in_compute_s=max(0.0, (last - first) - busy),
                tail_s=t1 - last,
                first_update_s=min(updates) - t0 if updates else None,
                last_update_s=max(updates) - t0 if updates else None,
                gap_s=nxt - t1 if nxt is not None else None,
            )
        )
    return out


def union_length(spans: Sequence[tuple[float, float]]) -> float:
    """Total length the intervals cover (overlaps counted once)."""
    covered, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def summarize(parts: Sequence[StepParts]) -> dict[str, Any]:
    """Medians of each term over the steps (and how many steps), JSON-ready; {"steps": 0} when none."""
    if not parts:
        return {"steps": 0}
    out: dict[str, Any] = {"steps": len(parts)}
    for key in StepParts.__dataclass_fields__:
        values = [getattr(p, key) for p in parts if getattr(p, key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def classify(name: str, stats: Mapping[str, Any]) -> str | None:
    """The kind of one trace event (by its name and its stats), or None when decompose ignores it."""
    if _STEP_EVENT.match(name):
        return STEP
    if name == _ASYNC_DONE and stats.get("kernel_type") == "_Recv":
        node = str(stats.get("name", ""))
        if _UPDATE_NODE.match(node):
            return UPDATE_DONE
        if _PULL_NODE.search(node):
            return PULL
        return None
    m = _OP_EVENT.match(name)
    if m is None or m.group("type") in _NOT_LAYER_TYPES:
        return None
    op = m.group("name")
    op = op[len(BACKWARD_PREFIX) :] if op.startswith(BACKWARD_PREFIX) else op
    # A layer op sits in the model's name scope and a layer's ("vggmini_1/conv1_1_1/Relu"): the loss,
    # the update multiplies and the input pipeline ("mul_5", "random_uniform/...") do not.
    return LAYER_OP if op.count("/") >= 2 else None


def read_events(xplane: str | Path) -> list[Event]:
    """The events `decompose` uses from an XSpace trace's host planes (times in seconds), read with
    `geryon.threshold.incluster.host_events` (its ProfileError, a ValueError, for an unreadable file)."""
    events: list[Event] = []
    for name, start_ps, duration_ps, stats in host_events(xplane, stats_for=frozenset({_ASYNC_DONE})):
        kind = classify(name, stats)
        if kind is None:
            continue
        start = start_ps * 1e-12
        events.append(Event(kind, start, start + duration_ps * 1e-12, str(stats.get("name", name))))
    return events
