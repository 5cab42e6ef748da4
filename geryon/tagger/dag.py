"""Consumption order of parameters in a forward dataflow graph (pure logic, no TensorFlow).

The TF driver (`tf_graph.py`) reduces a traced graph to a `ForwardGraph`: nodes with their data inputs,
the model's input nodes, and for each parameter the node its value comes from (the captured resource
handle or the variable op). Everything here works on that reduction, so it is testable on hand-made
graphs and fast on real ones.

Definitions used throughout:
- A *data node* depends (transitively) on a model input. Nodes that depend only on variables and
  constants (ReadVariableOp, Cast, Identity, a concat of shard reads) are weight preparation: they can
  run before the input arrives, so they do not say when the forward pass needs a parameter.
- The *consumer* of a parameter is the earliest data node that depends on it. "Earliest" is the ASAP
  schedule of an unconstrained dataflow executor: by level (longest path from the inputs through data
  nodes), ties by graph order. That is a property of the graph, not of the order in which the Python
  code created variables or layers; parallel branches (ResNet shortcut and main path, Inception
  towers) are interleaved by depth, as an executor with enough cores would run them.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GraphNode:
    name: str
    op_type: str
    inputs: tuple[int, ...]  # indices of the nodes whose outputs this node reads (data edges only)


@dataclass(frozen=True)
class ForwardGraph:
    nodes: Sequence[GraphNode]
    input_nodes: frozenset[int]
    # node index -> parameter index: the node that yields the parameter's value (handle or variable op).
    sources: dict[int, int]
    num_params: int


@dataclass(frozen=True)
class Consumption:
    """How the forward pass consumes each parameter (all lists are indexed by parameter)."""

    consumer: list[int | None]  # node index of the first data consumer, None if never consumed
    level: list[int | None]  # that node's level
    # TicTac's TIC quantity: the fewest parameters any computation that needs this one must wait for.
    tic_deps: list[int | None]
    order: list[int]  # parameters in consumption order; unconsumed ones last, in index order


class GraphError(ValueError):
    """The graph cannot be analysed (a cycle, dangling inputs, no model input)."""


def topological_order(nodes: Sequence[GraphNode]) -> list[int]:
    """Kahn's algorithm, ties broken by node index so the result is deterministic.

    For graphs built by tracing (inputs always created before their users) this is the creation order.
    """
    n = len(nodes)
    indegree = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for i, node in enumerate(nodes):
        for src in node.inputs:
            if not 0 <= src < n:
                raise GraphError(f"node {node.name!r} reads node index {src}, which does not exist")
            indegree[i] += 1
            users[src].append(i)
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != n:
        stuck = sorted(i for i in range(n) if indegree[i] > 0)[:5]
        raise GraphError("graph has a cycle through nodes " + ", ".join(nodes[i].name for i in stuck))
    return order


def analyse(graph: ForwardGraph) -> Consumption:
    nodes = graph.nodes
    if not graph.input_nodes:
        raise GraphError("the graph has no model input node, so no parameter is consumed by the forward pass")
    topo = topological_order(nodes)
    rank = [0] * len(nodes)
    for r, i in enumerate(topo):
        rank[i] = r

    # One pass in topological order: which parameters each node depends on (a bitset in an int), its
    # level among data nodes, and for data nodes the parameters that enter it through weight
    # preparation (non-data inputs): its "entry" set.
    deps = [0] * len(nodes)
    entry = [0] * len(nodes)
    level: list[int | None] = [None] * len(nodes)
    for i in topo:
        node = nodes[i]
        bits = 0
        weight_bits = 0
        lvl: int | None = 0 if i in graph.input_nodes else None
        for src in node.inputs:
            bits |= deps[src]
            src_level = level[src]
            if src_level is None:
                weight_bits |= deps[src]
            elif lvl is None or src_level + 1 > lvl:
                lvl = src_level + 1
        param = graph.sources.get(i)
        if param is not None:
            bits |= 1 << param
            weight_bits |= 1 << param
        deps[i] = bits
        level[i] = lvl
        if lvl is not None:
            entry[i] = weight_bits

    # A parameter reaches any data node either from a data input (which then holds it too, with fewer
    # dependencies and a lower level) or through an entry: so its first consumer and its TIC minimum
    # are both found among the data nodes it enters, visited here in ASAP order.
    data_nodes = sorted(
        (i for i in range(len(nodes)) if level[i] is not None and entry[i]),
        key=lambda i: (level[i], rank[i]),
    )
    consumer: list[int | None] = [None] * graph.num_params
    tic: list[int | None] = [None] * graph.num_params
    for i in data_nodes:
        count = deps[i].bit_count()
        rest = entry[i]
        while rest:
            low = rest & -rest
            rest ^= low
            p = low.bit_length() - 1
            if consumer[p] is None:
                consumer[p] = i
            best = tic[p]
            if best is None or count < best:
                tic[p] = count

    def key(p: int) -> tuple[int, int, int, int]:
        c = consumer[p]
        if c is None:
            return (1, 0, 0, p)
        return (0, level[c] or 0, rank[c], p)

    order = sorted(range(graph.num_params), key=key)
    return Consumption(
        consumer=consumer,
        level=[level[c] if c is not None else None for c in consumer],
        tic_deps=tic,
        order=order,
    )
