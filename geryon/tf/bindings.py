"""Marks the variables a tf.function captures with their map_table id, for the native graph pass.

Inside a TF2 multi-device function a variable reaches the PS partition as a resource ``_Arg``
whose name is derived from whichever op read it first, and the function's name changes with every
trace (ClusterCoordinator traces again under its own context), so neither names the parameter.
What does survive tracing, partitioning and remote registration is an underscore attr on the
placeholder that captures the variable's handle: TF copies those into the FunctionDef's arg
attributes and onto the ``_Arg`` node in every partition. So while a function is traced, each
captured handle of a registered variable gets ``_geryon_param_id = <id>`` (kParamIdAttr in
native/rendezvous/graph_pass.h), and the pass reads it.

The hook wraps ``FuncGraph.capture`` (TF's internal capture entry point, stable in the TF release
the extension is pinned to); it changes nothing for handles that were not registered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["PARAM_ID_ATTR", "install_capture_hook", "param_id_of", "register_variables"]

PARAM_ID_ATTR = "_geryon_param_id"

_lock = threading.Lock()
# id(handle tensor) -> (the handle, kept alive so its id() cannot be reused, parameter id)
_handles: dict[int, tuple[Any, int]] = {}
_hooked = False


def register_variables(pairs: Iterable[tuple[Any, int]]) -> None:
    """Registers (tf variable, parameter id) pairs; functions traced afterwards carry the ids.

    A variable is anything with a resource `handle`: a tf.Variable, one shard of a ShardedVariable,
    or the distributed wrapper ParameterServerStrategy creates (its handle is the PS-side one).
    """
    with _lock:
        for variable, param_id in pairs:
            if isinstance(param_id, bool) or not isinstance(param_id, int) or param_id < 0:
                raise ValueError(f"parameter id of {variable!r}: {param_id!r} is not an integer >= 0")
            handle = getattr(variable, "handle", None)
            if handle is None:
                raise ValueError(f"{variable!r} has no resource handle; register a tf.Variable or a shard")
            _handles[id(handle)] = (handle, param_id)


def param_id_of(handle: Any) -> int | None:
    entry = _handles.get(id(handle))
    return entry[1] if entry is not None and entry[0] is handle else None


def install_capture_hook() -> None:
    """Wraps FuncGraph.capture once per process (idempotent)."""
    global _hooked
    with _lock:
        if _hooked:
            return
        from tensorflow.core.framework import attr_value_pb2
        from tensorflow.python.framework import func_graph

        original = func_graph.FuncGraph.capture

        def capture(self: Any, tensor: Any, name: Any = None, shape: Any = None) -> Any:
            placeholder = original(self, tensor, name, shape)
            param_id = param_id_of(tensor)
            op = getattr(placeholder, "op", None)
            if param_id is not None and op is not None and op.type == "Placeholder":
                op._set_attr(PARAM_ID_ATTR, attr_value_pb2.AttrValue(i=param_id))
            return placeholder

        func_graph.FuncGraph.capture = capture
        _hooked = True
