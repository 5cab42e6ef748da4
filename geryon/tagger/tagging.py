"""The tagger's answer for one model: parameters, consumption order, urgency, kinds, classes.

Pure logic on top of `dag.analyse`; the TF front door is `geryon.tagger.tag_model`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from geryon.tagger.dag import Consumption, ForwardGraph, analyse
from geryon.tagger.map_table import MapTable
from geryon.tagger.params import Parameter
from geryon.tagger.partition import PartitionPlan, plan_partitions
from geryon.tagger.tac import OpTimes, tac
from geryon.tagger.urgency import compute_urgency

# Op types that make a layer "dense" (fully connected) or "conv" when they consume its parameters.
DENSE_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"})
CONV_OPS = frozenset(
    {"Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput", "Conv3DBackpropInputV2"}
)


@dataclass(frozen=True)
class Tagging:
    params: tuple[Parameter, ...]
    consumption: Consumption
    urgency_function: str
    urgency: tuple[float, ...]
    kinds: tuple[str, ...]  # per parameter: "dense", "conv" or "other", from the ops consuming its layer
    consumer_ops: tuple[str | None, ...]  # per parameter: name of the first consuming op
    # The traced graph, kept for urgency functions that need more than the consumption (TAC).
    graph: ForwardGraph | None = field(default=None, compare=False, repr=False)
    # TAC only: where its op times came from (OpTimes.source).
    times_source: str | None = None

    @classmethod
    def from_graph(cls, params: Sequence[Parameter], graph: ForwardGraph, urgency_function: str) -> Tagging:
        consumption = analyse(graph)
        urgency = compute_urgency(urgency_function, params, consumption)
        consumer_types = [graph.nodes[c].op_type if c is not None else None for c in consumption.consumer]
        layer_kind: dict[str, str] = {}
        for p, op_type in zip(params, consumer_types, strict=True):
            kind = "dense" if op_type in DENSE_OPS else "conv" if op_type in CONV_OPS else None
            if kind is not None:
                layer_kind.setdefault(p.layer, kind)
        kinds = tuple(layer_kind.get(p.layer, "other") for p in params)
        consumer_ops = tuple(graph.nodes[c].name if c is not None else None for c in consumption.consumer)
        return cls(tuple(params), consumption, urgency_function, tuple(urgency), kinds, consumer_ops, graph)

    def with_urgency(self, urgency_function: str) -> Tagging:
        """The same tagging under another urgency function, without tracing the model again."""
        urgency = compute_urgency(urgency_function, self.params, self.consumption)
        return replace(self, urgency_function=urgency_function, urgency=tuple(urgency), times_source=None)

    def with_tac(self, times: OpTimes) -> Tagging:
        """The same tagging under TicTac's TAC (`geryon.tagger.tac`) with these op times."""
        if self.graph is None:
            raise ValueError("urgency 'tac': this tagging has no graph (build it with Tagging.from_graph)")
        _, urgency = tac(self.params, self.graph, self.consumption, times)
        return replace(self, urgency_function="tac", urgency=tuple(urgency), times_source=times.source)

    def map_table(self, thresholds: Iterable[float], version: int = 1, default_class: int = 0) -> MapTable:
        return MapTable.build(
            [p.name for p in self.params],
            self.urgency,
            thresholds,
            self.urgency_function,
            version,
            default_class,
        )

    def partition_plan(self, num_ps: int, slice_bytes: int | None) -> PartitionPlan:
        """The shards of these parameters over `num_ps` PSes, placed round-robin in this order."""
        return plan_partitions([(p.name, p.shape, p.element_size) for p in self.params], num_ps, slice_bytes)

    @property
    def unconsumed(self) -> list[str]:
        return [self.params[i].name for i, c in enumerate(self.consumption.consumer) if c is None]

    def rows(self, table: MapTable) -> list[dict[str, Any]]:
        """One row per parameter in consumption order (what `geryon tag` prints)."""
        rows = []
        for position, i in enumerate(self.consumption.order):
            p = self.params[i]
            rows.append(
                {
                    "order": position,
                    "id": i,
                    "name": p.name,
                    "runtime_name": p.runtime_name,
                    "parent": p.parent,
                    "layer": p.layer,
                    "kind": self.kinds[i],
                    "shape": list(p.shape),
                    "dtype": p.dtype,
                    "bytes": p.bytes,
                    "urgency": self.urgency[i],
                    "class": table.entries[i].cls,
                    "consumer": self.consumer_ops[i],
                }
            )
        return rows

    def summary(self, table: MapTable) -> dict[str, Any]:
        total = sum(p.bytes for p in self.params)
        per_class = [0] * table.num_classes
        count_per_class = [0] * table.num_classes
        for p, e in zip(self.params, table.entries, strict=True):
            per_class[e.cls] += p.bytes
            count_per_class[e.cls] += 1
        dense = sum(p.bytes for p, k in zip(self.params, self.kinds, strict=True) if k == "dense")
        conv = sum(p.bytes for p, k in zip(self.params, self.kinds, strict=True) if k == "conv")
        return {
            "parameters": len(self.params),
            "variables": len({p.logical_name for p in self.params}),
            "layers": len({p.layer for p in self.params}),
            "total_bytes": total,
            "bytes_per_class": per_class,
            "parameters_per_class": count_per_class,
            "share_per_class": [b / total for b in per_class],
            "dense_bytes": dense,
            "dense_share": dense / total,
            "conv_share": conv / total,
            "unconsumed": self.unconsumed,
        }
