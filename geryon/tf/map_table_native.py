"""The map_table as the native extension reads it (native/rendezvous/classes.cc parses this format).

A line-based text format, so the C++ side needs no JSON or protobuf parser and a truncated or
garbled table is easy to detect (the counts must match and the last line must be ``end``)::

    geryon.map_table.native 2
    version 3
    classes 2
    default 0
    params 2
    0 0 0 net/dense/kernel  <id> <class> <rank> <name>   (name: the rest of the line)
    1 1 1 net/dense/bias
    bindings 1
    0 w/Read/ReadVariableOp <id> <producer node>  (TF1 sessions only, see geryon.tf.tf1)
    end

The ids are the tagger's stable parameter ids; only classes change between versions. The rank is
the parameter's position in the forward pass's consumption order (0 = needed first, the tagger's
`Tagging.consumption.order`): the data plane serves the pending responses of one connection most
urgent first by it (issue 14). Format 1 had no rank; the native side refuses it, naming both
versions. The graph pass takes a TF2 function's parameter ids from the captured variables
(geryon.tf.bindings), so the table needs no graph names; the names are kept for diagnostics and
checked to be unique.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from geryon.tagger.map_table import MAX_CLASSES, MapTable

__all__ = ["FORMAT", "MAGIC", "MAX_PARAMS", "consumption_ranks", "to_native", "urgency_ranks"]

FORMAT = 2  # kMapTableFormat in classes.h
MAGIC = f"geryon.map_table.native {FORMAT}"
# Mirrors kMaxParams in classes.h: the native side refuses larger ids.
MAX_PARAMS = 1 << 24


def _check_line_text(value: str, field: str) -> None:
    if not value or "\n" in value or "\r" in value:
        raise ValueError(f"{field}: {value!r} must be a non-empty string without line breaks")


def consumption_ranks(order: Sequence[int]) -> dict[int, int]:
    """Parameter id -> its position in `order` (the tagger's consumption order, first needed first)."""
    return {param_id: position for position, param_id in enumerate(order)}


def urgency_ranks(table: MapTable) -> dict[int, int]:
    """Ranks from the table alone, for callers without the tagging: most urgent first, ties by id.

    Under the tagger's urgency functions urgency falls along the consumption order, so this is that
    order up to ties (a layer's parameters share one urgency and keep their id order).
    """
    ordered = sorted(table.entries, key=lambda e: (-e.urgency, e.id))
    return {e.id: position for position, e in enumerate(ordered)}


def to_native(
    table: MapTable, producers: Mapping[str, int] | None = None, ranks: Mapping[int, int] | None = None
) -> str:
    """The native text of `table`; raises ValueError naming the field that cannot be written.

    `producers`: TF1 producer bindings, node name -> parameter id (see geryon.tf.tf1).
    `ranks`: parameter id -> urgency rank (`consumption_ranks(tagging.consumption.order)`); default
    `urgency_ranks(table)`. Every parameter of the table needs one.
    """
    rank_of = dict(urgency_ranks(table) if ranks is None else ranks)
    if table.num_classes > MAX_CLASSES:
        raise ValueError(f"map_table.num_classes: {table.num_classes} exceeds {MAX_CLASSES}")
    lines = [
        MAGIC,
        f"version {table.version}",
        f"classes {table.num_classes}",
        f"default {table.default_class}",
        f"params {len(table.entries)}",
    ]
    for i, entry in enumerate(table.entries):
        if not 0 <= entry.id < MAX_PARAMS:
            raise ValueError(f"map_table.entries[{i}].id: {entry.id} is outside [0, {MAX_PARAMS})")
        _check_line_text(entry.name, f"map_table.entries[{i}].name")
        rank = rank_of.get(entry.id)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_PARAMS:
            raise ValueError(
                f"ranks[{entry.id}]: {rank!r} is not an int in [0, {MAX_PARAMS}) (parameter {entry.name})"
            )
        lines.append(f"{entry.id} {entry.cls} {rank} {entry.name}")
    ids = {e.id for e in table.entries}
    bound = sorted((producers or {}).items())
    lines.append(f"bindings {len(bound)}")
    for name, param_id in bound:
        _check_line_text(name, f"producers[{name!r}]")
        if isinstance(param_id, bool) or not isinstance(param_id, int) or param_id not in ids:
            raise ValueError(
                f"producers[{name!r}]: {param_id!r} is not the id of a parameter in the map_table"
            )
        lines.append(f"{param_id} {name}")
    lines.append("end")
    return "\n".join(lines) + "\n"
