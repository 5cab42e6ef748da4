"""TensorFlow driver of the tagger: Keras models, traced functions and TF1 graphs -> `ForwardGraph`.

Only this module (and the model builders) import TensorFlow; the analysis itself is in `dag.py`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from geryon.tagger.dag import ForwardGraph, GraphNode
from geryon.tagger.params import Parameter, scope_of

# TF1 op types that hold a variable (its output is the variable reference or resource handle).
_TF1_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})


class TaggerInputError(ValueError):
    """The model or graph handed to the tagger cannot be tagged (message says why)."""


def _runtime_name(v: Any) -> str:
    name = v.name
    return name[:-2] if name.endswith(":0") else name


def _tf_variable(v: Any) -> Any:
    """The tf.Variable (or ShardedVariable) behind a Keras 3 variable; a TF variable is returned as is."""
    inner = getattr(v, "_value", None)
    if inner is not None and (isinstance(inner, tf.Variable) or hasattr(inner, "variables")):
        return inner
    return v


def _shards(v: Any) -> list[Any]:
    # ShardedVariable has no public class in tf.*; it is the variable type with a `variables` list.
    shards = getattr(v, "variables", None)
    if shards is not None and not isinstance(v, tf.Variable):
        return list(shards)
    return [v]


def parameters_of(variables: Sequence[Any]) -> tuple[list[Parameter], list[Any]]:
    """One `Parameter` per variable, or per shard of a sharded variable, with the TF objects behind them.

    A Keras variable is keyed by its path and grouped by its layer; a TF variable by its name and
    grouped by its name scope.
    """
    params: list[Parameter] = []
    handles: list[Any] = []
    keys = [getattr(v, "path", None) or _runtime_name(_tf_variable(v)) for v in variables]
    loose = _loose_shards(keys)
    for v, key in zip(variables, keys, strict=True):
        tv = _tf_variable(v)
        shards = _shards(tv)
        parent = key if len(shards) > 1 or shards[0] is not tv else None
        layer = scope_of(key)
        index: int | None = None
        count: int | None = None
        if key in loose:  # one shard of a variable handed over shard by shard: its parent's layer
            parent, index, count = loose[key]
            layer = scope_of(parent)
        for j, s in enumerate(shards):
            if not s.shape.is_fully_defined():
                raise TaggerInputError(f"variable {key!r} has a shape that is not fully defined: {s.shape}")
            sharded = parent is not None and index is None
            params.append(
                Parameter(
                    name=f"{key}/part_{j}" if sharded else key,
                    runtime_name=_runtime_name(s),
                    shape=tuple(int(d) for d in s.shape),
                    dtype=s.dtype.name,
                    element_size=s.dtype.size,
                    layer=layer,
                    parent=parent,
                    shard_index=j if sharded else index,
                    num_shards=len(shards) if sharded else count,
                )
            )
            handles.append(s)
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise TaggerInputError(
            f"variable names are not unique, the map_table cannot tell them apart: {dup[:5]}"
        )
    return params, handles


def _nodes(graph: tf.Graph) -> tuple[list[GraphNode], dict[str, int]]:
    ops = graph.get_operations()
    index = {op.name: i for i, op in enumerate(ops)}
    nodes = [GraphNode(op.name, op.type, tuple(index[t.op.name] for t in op.inputs)) for op in ops]
    return nodes, index


_PART = re.compile(r"^(?P<parent>.+)/part_(?P<index>\d+)$")


def _loose_shards(keys: Sequence[str]) -> dict[str, tuple[str, int, int]]:
    """Shards listed one by one: key -> (parent, shard index, shard count).

    tf_keras lists a ShardedVariable's shards in `model.trainable_variables` as variables of their
    own, named as ParameterServerStrategy names them (`<name>/part_<i>`, TF's sharded_variable.py);
    Keras 3 lists the ShardedVariable. Grouped by `<name>`, a complete run 0..n-1 is one variable's
    shards, so that they take the layer of `<name>` (not a layer `<name>` of their own, which would
    split the kernel from its bias under the `layer` urgency). Anything else is left as it is.
    """
    groups: dict[str, dict[int, str]] = {}
    for key in keys:
        m = _PART.match(key)
        if m is not None:
            groups.setdefault(m["parent"], {})[int(m["index"])] = key
    out: dict[str, tuple[str, int, int]] = {}
    for parent, by_index in groups.items():
        n = len(by_index)
        if sorted(by_index) == list(range(n)) and parent not in keys:
            for i, key in by_index.items():
                out[key] = (parent, i, n)
    return out


def graph_of_function(fn: Any, params: Sequence[Parameter], handles: Sequence[Any]) -> ForwardGraph:
    """Reduces a traced `ConcreteFunction` to a `ForwardGraph` over `params`.

    Variables enter a function graph as captured resource handles: a placeholder inside the graph per
    handle outside. Those placeholders are the parameters' sources; the other placeholders are inputs.
    """
    graph = fn.graph
    nodes, index = _nodes(graph)
    internal_of = {id(external): internal for external, internal in graph.captures}
    sources: dict[int, int] = {}
    for p, h in enumerate(handles):
        internal = internal_of.get(id(h.handle))
        if internal is not None:
            sources[index[internal.op.name]] = p
    captured = {index[internal.op.name] for _, internal in graph.captures}
    inputs = frozenset(
        index[t.op.name] for t in graph.inputs if t.dtype != tf.resource and index[t.op.name] not in captured
    )
    return ForwardGraph(nodes, inputs, sources, len(params))


def trace_keras_model(
    model: Any, input_shape: Sequence[int] | None = None, training: bool = True
) -> tuple[list[Parameter], ForwardGraph]:
    """Traces `model(x, training=...)` with `tf.function` and returns its parameters and forward graph."""
    variables = list(model.trainable_variables)
    if not variables:
        raise TaggerInputError(f"model {getattr(model, 'name', model)!r} has no trainable variables to tag")
    params, handles = parameters_of(variables)
    specs = _input_specs(model, input_shape)
    fn = tf.function(lambda *xs: model(xs[0] if len(xs) == 1 else list(xs), training=training))
    concrete = fn.get_concrete_function(*specs)
    return params, graph_of_function(concrete, params, handles)


def trace_concrete_function(fn: Any) -> tuple[list[Parameter], ForwardGraph]:
    """A traced `tf.function` (ConcreteFunction): its trainable variables and forward graph."""
    variables = list(fn.trainable_variables)
    if not variables:
        raise TaggerInputError("the traced function reads no trainable variables")
    params, handles = parameters_of(variables)
    return params, graph_of_function(fn, params, handles)


def trace_tf1_graph(graph: tf.Graph) -> tuple[list[Parameter], ForwardGraph]:
    """A TF1-style graph (variables are ops, inputs are placeholders), e.g. between-graph training."""
    with graph.as_default():
        variables = tf.compat.v1.trainable_variables()
    if not variables:
        raise TaggerInputError(
            "the graph has no trainable variables (tf.compat.v1.trainable_variables is empty)"
        )
    params, handles = parameters_of(variables)
    nodes, index = _nodes(graph)
    sources = {index[h.op.name]: p for p, h in enumerate(handles)}
    inputs = frozenset(
        i for i, n in enumerate(nodes) if n.op_type in ("Placeholder", "PlaceholderWithDefault")
    )
    bad = [nodes[i].name for i in sources if nodes[i].op_type not in _TF1_VARIABLE_OPS]
    if bad:
        raise TaggerInputError(f"trainable variables whose op is not a variable op: {bad[:5]}")
    return params, ForwardGraph(nodes, inputs, sources, len(params))


def _input_specs(model: Any, input_shape: Sequence[int] | None) -> list[tf.TensorSpec]:
    if input_shape is not None:
        return [tf.TensorSpec([1, *input_shape], tf.float32)]
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise TaggerInputError(
            f"model {getattr(model, 'name', model)!r} has no known input shape; pass input_shape "
            "(e.g. --input-shape 224,224,3) for subclassed models"
        )
    specs = []
    for t in inputs:
        shape = [1 if d is None else int(d) for d in t.shape]
        specs.append(tf.TensorSpec(shape, getattr(t, "dtype", None) or tf.float32))
    return specs
