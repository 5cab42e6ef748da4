"""The consumption analysis on hand-made graphs, where the right answer is known by construction."""

from __future__ import annotations

import pytest

from geryon.tagger.dag import ForwardGraph, GraphError, GraphNode, analyse, topological_order


class Builder:
    """Builds a ForwardGraph by name: ``b.op("conv1", "Conv2D", "x", "w1")``."""

    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self.index: dict[str, int] = {}
        self.inputs: set[int] = set()
        self.sources: dict[int, int] = {}
        self.params: list[str] = []

    def op(self, name: str, op_type: str, *inputs: str) -> str:
        self.index[name] = len(self.nodes)
        self.nodes.append(GraphNode(name, op_type, tuple(self.index[i] for i in inputs)))
        return name

    def input(self, name: str) -> str:
        self.op(name, "Placeholder")
        self.inputs.add(self.index[name])
        return name

    def param(self, name: str) -> str:
        """A variable handle plus its read, as a traced function has them."""
        self.op(name + "/handle", "Placeholder")
        self.sources[self.index[name + "/handle"]] = len(self.params)
        self.params.append(name)
        return self.op(name + "/read", "ReadVariableOp", name + "/handle")

    def graph(self) -> ForwardGraph:
        return ForwardGraph(self.nodes, frozenset(self.inputs), dict(self.sources), len(self.params))

    def order(self) -> list[str]:
        return [self.params[p] for p in analyse(self.graph()).order]


def test_chain_in_forward_order_even_when_created_backwards() -> None:
    b = Builder()
    # Variables created last-layer-first: creation order must not leak into the answer.
    w3, w2, w1 = b.param("w3"), b.param("w2"), b.param("w1")
    b.input("x")
    b.op("mm1", "MatMul", "x", w1)
    b.op("mm2", "MatMul", "mm1", w2)
    b.op("mm3", "MatMul", "mm2", w3)
    assert b.order() == ["w1", "w2", "w3"]
    c = analyse(b.graph())
    assert c.level == [3, 2, 1]
    assert c.tic_deps == [3, 2, 1]


def test_weight_preparation_does_not_count_as_consumption() -> None:
    b = Builder()
    w1 = b.param("w1")
    w2 = b.param("w2")
    # w2 is cast and reshaped long before the input arrives; it is still needed second.
    b.op("w2/cast", "Cast", w2)
    b.op("w2/reshape", "Reshape", "w2/cast")
    b.input("x")
    b.op("mm1", "MatMul", "x", w1)
    b.op("mm2", "MatMul", "mm1", "w2/reshape")
    assert b.order() == ["w1", "w2"]


def test_shared_variable_takes_its_first_use() -> None:
    b = Builder()
    w_late, w_shared = b.param("w_late"), b.param("w_shared")
    b.input("x")
    b.op("a", "MatMul", "x", w_shared)
    b.op("b", "MatMul", "a", w_late)
    b.op("c", "MatMul", "b", w_shared)  # the same variable read again, later
    assert b.order() == ["w_shared", "w_late"]
    assert analyse(b.graph()).tic_deps == [2, 1]


def test_unconsumed_parameters_go_last() -> None:
    b = Builder()
    unused, w = b.param("unused"), b.param("w")
    b.op("unused/cast", "Cast", unused)  # read but never meets the data
    b.input("x")
    b.op("mm", "MatMul", "x", w)
    c = analyse(b.graph())
    assert [b.params[p] for p in c.order] == ["w", "unused"]
    assert c.consumer[0] is None and c.tic_deps[0] is None


def test_branches_interleave_by_depth_and_tic_ranks_fan_in() -> None:
    # Two towers of different depth joined by a concat, then a head:
    #   x -> a1 -> a2 -> a3 \
    #   x -> b1 ------------ concat -> head
    b = Builder()
    names = ["a1", "a2", "a3", "b1", "head"]
    for n in names:
        b.param(n)
    b.input("x")
    b.op("A1", "Conv2D", "x", "a1/read")
    b.op("A2", "Conv2D", "A1", "a2/read")
    b.op("A3", "Conv2D", "A2", "a3/read")
    b.op("B1", "Conv2D", "x", "b1/read")
    b.op("cat", "ConcatV2", "A3", "B1")
    b.op("H", "MatMul", "cat", "head/read")
    # ASAP: a1 and b1 are both needed at depth 1 (a1 first by graph order), then a2, a3, head.
    assert b.order() == ["a1", "b1", "a2", "a3", "head"]
    c = analyse(b.graph())
    assert dict(zip(names, c.tic_deps, strict=True)) == {"a1": 1, "a2": 2, "a3": 3, "b1": 1, "head": 5}


def test_fused_op_consuming_two_parameters_orders_them_by_index() -> None:
    b = Builder()
    gamma, beta = b.param("gamma"), b.param("beta")
    b.input("x")
    b.op("bn", "FusedBatchNormV3", "x", gamma, beta)
    c = analyse(b.graph())
    assert c.order == [0, 1]
    assert c.consumer[0] == c.consumer[1]
    assert c.tic_deps == [2, 2]


def test_cycle_and_missing_input_are_reported() -> None:
    nodes = [GraphNode("a", "Add", (1,)), GraphNode("b", "Add", (0,))]
    with pytest.raises(GraphError, match="cycle"):
        topological_order(nodes)
    with pytest.raises(GraphError, match="does not exist"):
        topological_order([GraphNode("a", "Add", (7,))])
    with pytest.raises(GraphError, match="no model input"):
        analyse(ForwardGraph([GraphNode("w", "VarHandleOp", ())], frozenset(), {0: 0}, 1))


def test_topological_order_is_creation_order_for_traced_graphs() -> None:
    b = Builder()
    b.input("x")
    w = b.param("w")
    b.op("mm", "MatMul", "x", w)
    assert topological_order(b.nodes) == list(range(len(b.nodes)))
