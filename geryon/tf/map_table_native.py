"""The map_table as the native extension reads it (native/rendezvous/classes.cc parses this format).

A line-based text format, so the C++ side needs no JSON or protobuf parser and a truncated or
garbled table is easy to detect (the counts must match and the last line must be ``end``)::

    geryon.map_table.native 1
    version 3
    classes 2
    default 0
    params 2
    0 0 net/dense/kernel    <id> <class> <name>   (name: the rest of the line)
    1 1 net/dense/bias
    bindings 1
    0 w/Read/ReadVariableOp <id> <producer node>  (TF1 sessions only, see geryon.tf.tf1)
    end

The ids are the tagger's stable parameter ids; only classes change between versions. The graph
pass takes a TF2 function's parameter ids from the captured variables (geryon.tf.bindings), so the
table needs no graph names; the names are kept for diagnostics and checked to be unique.
"""

from __future__ import annotations

from collections.abc import Mapping

from geryon.tagger.map_table import MAX_CLASSES, MapTable

__all__ = ["MAGIC", "MAX_PARAMS", "to_native"]

MAGIC = "geryon.map_table.native 1"
# Mirrors kMaxParams in classes.h: the native side refuses larger ids.
MAX_PARAMS = 1 << 24


def _check_line_text(value: str, field: str) -> None:
    if not value or "\n" in value or "\r" in value:
        raise ValueError(f"{field}: {value!r} must be a non-empty string without line breaks")


def to_native(table: MapTable, producers: Mapping[str, int] | None = None) -> str:
    """The native text of `table`; raises ValueError naming the field that cannot be written.

    `producers`: TF1 producer bindings, node name -> parameter id (see geryon.tf.tf1).
    """
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
        lines.append(f"{entry.id} {entry.cls} {entry.name}")
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
