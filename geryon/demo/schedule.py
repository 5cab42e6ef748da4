"""Puts a demo mode's schedule into force on a running Geryon cluster, between training rounds.

    applied = apply_schedule(g, mode, thresholds)   # g: geryon.tf.strategy.GeryonStrategy

A schedule is (the classes: thresholds, or one class for every tensor; the order inside a class).
The classes go through the map_table (g.set_thresholds installs the next version on every task,
as the threshold search does at run time). The order inside a class is the data plane's
per-connection ordering (issue 14 item 1: each (consumer, producer, class) connection serves its
most urgent pending response first, large ones in chunks, or first ready with "arrival"), set on
every task through ORDERING_HOOK (`g.set_order("urgency" | "arrival")`) before each round; every
task answers with the order it now runs, which the returned dict keeps (`order_in_force`; a task
that answers otherwise is a ScheduleError). A strategy without the hook (a data plane from before
item 1) is recorded as `ordering_available: False`, and the report prints that urgency order was
requested but not applied.
The chunk size (`--chunk-size`, validated by the runner to 4 KiB..1 GiB) goes in once per cluster
through CHUNK_HOOK (`g.set_chunk_bytes(n)`) the same way (apply_chunk).
"""

from __future__ import annotations

from typing import Any

from geryon.demo import modes as modes_mod

ORDERING_HOOK = "set_order"  # GeryonStrategy method the data plane's ordering (item 1) will provide
CHUNK_HOOK = "set_chunk_bytes"  # and its chunk size (the preemption unit inside a class)


class ScheduleError(RuntimeError):
    """The cluster did not take the schedule (a table that still splits a one-class mode)."""


def ordering_available(g: Any) -> bool:
    return callable(getattr(g, ORDERING_HOOK, None))


def mode_thresholds(
    mode: modes_mod.Mode, chosen: list[float] | tuple[float, ...], classes: int
) -> list[float]:
    """The thresholds mode runs at: one class for every tensor in a single-class mode, else `chosen`."""
    if mode.single_class:
        return list(modes_mod.one_class_thresholds(classes))
    return [float(t) for t in chosen]


def apply_schedule(g: Any, mode: modes_mod.Mode, chosen: list[float] | tuple[float, ...]) -> dict[str, Any]:
    """Installs `mode`'s classes (only if they differ from what runs) and order; returns what runs.

    {"thresholds": [...], "classes_used": n, "order": "urgency"|"arrival"|None,
     "ordering_available": bool}. Raises ScheduleError if a single-class mode's table still splits.
    """
    classes = len(g.thresholds) + 1
    wanted = tuple(mode_thresholds(mode, chosen, classes))
    if wanted != tuple(g.thresholds):
        g.set_thresholds(wanted)
    used = sorted({e.cls for e in g.map_table.entries})
    if mode.single_class and used != [classes - 1]:
        raise ScheduleError(
            f"mode {mode.name}: every parameter in class {classes - 1} wanted, but the map_table at "
            f"{list(wanted)} puts parameters in classes {used}"
        )
    available = ordering_available(g)
    in_force = None
    if available and mode.order is not None:
        # Every task answers with the order it now runs: the rounds really differ, or this raises.
        answers = getattr(g, ORDERING_HOOK)(mode.order)
        in_force = sorted(set(answers.values())) if isinstance(answers, dict) else None
        if in_force is not None and in_force != [mode.order]:
            raise ScheduleError(f"mode {mode.name}: order {mode.order} wanted, the tasks run {answers}")
    return {
        "thresholds": list(wanted),
        "classes_used": len(used),
        "order": mode.order,
        "ordering_available": available,
        "order_in_force": in_force,
    }


def apply_chunk(g: Any, chunk_bytes: int | None) -> int | None:
    """Puts the data plane's chunk size in force when the strategy offers CHUNK_HOOK; returns the size
    in force, or None (no chunk size asked for, or a data plane without chunking)."""
    hook = getattr(g, CHUNK_HOOK, None)
    if chunk_bytes is None or not callable(hook):
        return None
    hook(int(chunk_bytes))
    return int(chunk_bytes)
