"""A profile's forward pass as the model's dataflow instead of a chain (`LayerSpec.after`).

The simulator runs a chain profile's forward layers one after another in profile order: a layer
whose parameters have not arrived holds back every later layer, even one on a branch that does not
read it (an Inception tower, a ResNet shortcut). TicTac's TAC (paper 000, Sec. 4) orders transfers
so that the ops that can run early get their inputs early; on a chain that freedom does not exist,
so a chain simulator cannot show what TAC is for. With `after` set, a worker runs, whenever its
device is free, the first layer in profile order whose predecessors are done and whose parameters
are in (one op at a time, as one GPU stream does; geryon.threshold.sim_replay).

Which layers precede which comes from the tagger's traced forward graph (`Tagging.graph`, the same
graph TIC and TAC read): a profile layer stands at the graph node that first consumes one of its
parameters (the rule `geryon.threshold.tac_times` uses for op times); layer A precedes layer B when
A's node is an ancestor of B's. `after` keeps only the nearest such layers (the transitive reduction),
which constrains the same schedules. Parameter-free ops are folded into the layers' times by the
profile, so they add no constraint of their own. A layer none of whose parameters the forward pass
consumes has no node: nothing precedes it and it precedes nothing.
"""

from __future__ import annotations

from dataclasses import replace

from geryon.tagger.dag import topological_order
from geryon.tagger.tagging import Tagging
from geryon.threshold.profile import Profile, ProfileError
from geryon.threshold.tac_times import first_consumed


def layer_nodes(profile: Profile, tagging: Tagging) -> list[int | None]:
    """Per profile layer, the graph node that first consumes one of its parameters (None: none is)."""
    first = first_consumed(profile, tagging)
    consumer = tagging.consumption.consumer
    return [consumer[first[la]] if la in first else None for la in range(profile.num_layers)]


def layer_after(profile: Profile, tagging: Tagging) -> list[tuple[int, ...]]:
    """Per profile layer, the nearest layers whose forward must end before it starts."""
    graph = tagging.graph
    if graph is None:
        raise ProfileError("tagging: no traced graph kept (tag the model again to get its dataflow)")
    nodes = layer_nodes(profile, tagging)
    at_node: dict[int, int] = {}  # graph node -> bit mask of the profile layers standing there
    for layer, node in enumerate(nodes):
        if node is not None:
            at_node[node] = at_node.get(node, 0) | (1 << layer)
    # below[n]: the layers at n's strict ancestors; with[n] adds n's own.
    below: list[int] = [0] * len(graph.nodes)
    with_own: list[int] = [0] * len(graph.nodes)
    for n in topological_order(graph.nodes):
        mask = 0
        for src in graph.nodes[n].inputs:
            mask |= with_own[src]
        below[n] = mask
        with_own[n] = mask | at_node.get(n, 0)
    # The strict ancestors among layers, then only the nearest: drop a layer that another one in the
    # set already has below it.
    ancestors: list[int] = [below[node] if node is not None else 0 for node in nodes]
    out: list[tuple[int, ...]] = []
    for mask in ancestors:
        implied = 0
        for a in _bits(mask):
            implied |= ancestors[a]
        out.append(tuple(_bits(mask & ~implied)))
    return out


def with_forward_dag(profile: Profile, tagging: Tagging) -> Profile:
    """`profile` whose layers carry `after` from `tagging`'s forward graph."""
    after = layer_after(profile, tagging)
    layers = tuple(replace(layer, after=a) for layer, a in zip(profile.layers, after, strict=True))
    return replace(profile, layers=layers, meta={**profile.meta, "forward": "dag"})


def _bits(mask: int) -> list[int]:
    """The indices of the bits set in `mask`, lowest first."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]
