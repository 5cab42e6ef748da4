"""Topologies: the built-ins as their sources describe them, and strict validation of the file format."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from geryon.errors import UsageError
from geryon.plan.topology import BUILTINS, load_topology, parse_topology


def test_p3_16xlarge_is_the_hybrid_cube_mesh() -> None:
    t = BUILTINS["p3.16xlarge"]
    assert len(t.nodes) == 8 and not t.switches and len(t.edges) == 16
    assert sum(e.capacity for e in t.edges) == 24  # six NVLinks a V100
    per_gpu = Counter[str]()
    for e in t.edges:
        per_gpu[e.a] += int(e.capacity)
        per_gpu[e.b] += int(e.capacity)
    assert set(per_gpu.values()) == {6}
    duals = [e for e in t.edges if e.capacity == 2]
    assert len(duals) == 8  # a Hamiltonian cycle of dual links (the paper's chain of dual edges, Sec. 2)
    assert BUILTINS["dgx-1"].edges == t.edges


def test_p3_8xlarge_is_one_quad() -> None:
    t = BUILTINS["p3.8xlarge"]
    assert len(t.nodes) == 4 and len(t.edges) == 6  # fully connected
    assert sum(e.capacity for e in t.edges) == 9


def test_p2_16xlarge_is_a_pcie_switch_tree() -> None:
    t = BUILTINS["p2.16xlarge"]
    assert len(t.nodes) == 16 and len(t.switches) == 10 and len(t.edges) == 25  # a tree
    assert Counter(e.group for e in t.edges) == {"gpu-card": 16, "card-plx": 8, "plx-plx": 1}
    assert {e.capacity for e in t.edges} == {1.0}
    assert all(e.a in t.nodes for e in t.edges if e.group == "gpu-card")
    p28 = BUILTINS["p2.8xlarge"]
    assert len(p28.nodes) == 8 and len(p28.switches) == 5 and "plx-plx" not in {e.group for e in p28.edges}


GOOD: dict[str, Any] = {
    "name": "box",
    "unit": "GB/s",
    "nodes": ["a", "b", "c"],
    "switches": ["s"],
    "edges": [
        {"ends": ["a", "b"], "capacity": 25, "group": "nvlink"},
        {"ends": ["a", "s"], "capacity": 16},
        {"ends": ["c", "s"], "capacity": 16.5},
    ],
}


def test_a_good_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "box.json"
    path.write_text(json.dumps(GOOD))
    t = load_topology(str(path))
    assert t.name == "box" and t.unit == "GB/s" and t.nodes == ("a", "b", "c") and t.switches == ("s",)
    assert [e.capacity for e in t.edges] == [25.0, 16.0, 16.5]
    assert t.edges[0].cost == pytest.approx(1 / 25)
    minimal = {"nodes": ["x", "y"], "edges": [{"ends": ["x", "y"], "capacity": 1}]}
    path.write_text(json.dumps(minimal))
    assert load_topology(str(path)).name == "box"  # the file's stem


def _with(**changes: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return data


def _edge(i: int, **changes: Any) -> dict[str, Any]:
    data = _with()
    for key, value in changes.items():
        if value is None:
            del data["edges"][i][key]
        else:
            data["edges"][i][key] = value
    return data


BAD = [
    ([1, 2], "expected a JSON object"),
    (_with(nodes=None), "nodes: missing; expected a list of node names"),
    (_with(nodes="a b c"), "nodes: expected a list of node names, got str"),
    (_with(nodes=["a"]), "nodes: expected at least 2 compute nodes, got 1"),
    (_with(nodes=["a", "b", "a"]), "nodes[2]: duplicate name 'a'"),
    (_with(nodes=["a", "", "c"]), "nodes[1]: expected a non-empty string, got ''"),
    (_with(switches=["a"]), "switches: 'a' is also in nodes"),
    (_with(switches=[3]), "switches[0]: expected a non-empty string, got 3"),
    (_with(edges=None), "edges: missing"),
    (_with(edges=[]), "edges: expected a non-empty list"),
    (_with(colour="red"), "unknown key 'colour'; allowed: name, unit, nodes, switches, edges"),
    (_with(name=""), "name: expected a non-empty string"),
    (_with(unit=7), "unit: expected a non-empty string, got 7"),
    (_with(edges=["a-b"]), "edges[0]: expected an object with keys ends, capacity, group"),
    (_edge(0, ends=None), "edges[0].ends: missing"),
    (_edge(0, capacity=None), "edges[0].capacity: missing"),
    (_edge(1, ends=["a"]), "edges[1].ends: expected a list of two node names"),
    (_edge(1, ends=["a", "z"]), "edges[1].ends[1]: unknown node 'z'; nodes and switches are a, b, c, s"),
    (_edge(0, ends=["b", "b"]), "edges[0].ends: a link from 'b' to itself"),
    (_edge(1, ends=["b", "a"]), "edges[1].ends: duplicate link b-a (also edges[0])"),
    (_edge(0, capacity=0), "edges[0].capacity: expected a finite number > 0, got 0"),
    (_edge(0, capacity=-3), "edges[0].capacity: expected a finite number > 0, got -3"),
    (_edge(0, capacity="fast"), "edges[0].capacity: expected a finite number > 0, got 'fast'"),
    (_edge(0, capacity=True), "edges[0].capacity: expected a finite number > 0, got True"),
    (_edge(2, group=5), "edges[2].group: expected a string, got 5"),
    (_edge(0, width=2), "edges[0]: unknown key 'width'; allowed: ends, capacity, group"),
    (_with(edges=[{"ends": ["a", "b"], "capacity": 1}]), "edges: the graph is not connected: c, s cannot"),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_bad_topologies_name_the_field(data: Any, message: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_topology(data)
    assert message in str(e.value)


def test_the_file_and_name_errors(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError, match=r"--topology: 'p9.huge' is neither a built-in topology \(p3.16xlarge"
    ):
        load_topology("p9.huge")
    path = tmp_path / "t.json"
    path.write_text("{nodes: 1")
    with pytest.raises(UsageError, match=r"t.json: not JSON"):
        load_topology(str(path))
    path.write_text(json.dumps(_edge(0, capacity=0)))
    with pytest.raises(UsageError, match=r"--topology: .*t.json: edges\[0\].capacity"):
        load_topology(str(path))
    assert load_topology("P3.16XLARGE") is BUILTINS["p3.16xlarge"]
