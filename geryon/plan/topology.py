"""A server's communication graph: compute nodes, switches, links with capacities; built-ins and files.

A compute node (a GPU, a CPU) can aggregate what it receives (paper 003 Sec. 2); a switch (a PCIe PLX
bridge) only forwards: data crossing it cannot be aggregated (Sec. 3). A link is undirected and has a
capacity in the topology's `unit`; the time c_e to send all gradients through link e (eq. 1) is taken as
1 / capacity, in units of "the gradients over a link of capacity 1". Parallel physical links between two
nodes (the dual NVLinks of a V100) are one edge of their summed capacity.

The file format (JSON; every key but the three required is optional, unknown keys are errors):

    {"name": "box", "unit": "NVLink",
     "nodes": ["gpu0", "gpu1", "gpu2"],
     "switches": ["plx0"],
     "edges": [{"ends": ["gpu0", "gpu1"], "capacity": 2, "group": "nvlink"},
               {"ends": ["gpu0", "plx0"], "capacity": 1}, ...]}
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geryon.errors import UsageError


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    capacity: float
    group: str = ""

    @property
    def cost(self) -> float:
        """c_e of paper 003 eq. (1): the time to send all gradients through this link."""
        return 1.0 / self.capacity


@dataclass(frozen=True)
class Topology:
    name: str
    nodes: tuple[str, ...]  # compute nodes: they aggregate
    switches: tuple[str, ...]  # forward only (paper 003 Sec. 3)
    edges: tuple[Edge, ...]
    unit: str = "1"
    source: str = ""

    @property
    def all_nodes(self) -> tuple[str, ...]:
        return self.nodes + self.switches

    @property
    def costs(self) -> list[float]:
        return [e.cost for e in self.edges]

    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.all_nodes)}

    def endpoints(self) -> list[tuple[int, int]]:
        idx = self.index()
        return [(idx[e.a], idx[e.b]) for e in self.edges]


def _cube_mesh(
    links: list[tuple[int, int, int]], count: int
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Edge, ...]]:
    nodes = tuple(f"gpu{i}" for i in range(count))
    return nodes, (), tuple(Edge(f"gpu{a}", f"gpu{b}", float(n), "nvlink") for a, b, n in links)


# NVLinks between the eight V100s of a DGX-1 / P3.16xlarge (the hybrid cube-mesh): NVIDIA, "NVIDIA DGX-1
# With Tesla V100 System Architecture" white paper (WP-08437-002, 2017), Fig. 5, and paper 003 Fig. 1.
# Each V100 has six NVLinks: two quads (0-3, 4-7), each a fully connected K4, joined by the links
# i <-> i+4, with eight pairs doubled. The numbering is that of `nvidia-smi topo -m` on these machines
# (NV1/NV2); paper 003's Fig. 1 numbers the GPUs differently (its single link is (0,3), its dual (5,7)),
# an isomorphic graph: C(G) does not depend on the labels. 24 links in all.
_P3_16XLARGE = [
    (0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2), (1, 2, 2), (1, 3, 1), (1, 5, 2), (2, 3, 2),
    (2, 6, 1), (3, 7, 1), (4, 5, 1), (4, 6, 1), (4, 7, 2), (5, 6, 2), (5, 7, 1), (6, 7, 2),
]  # fmt: skip
# P3.8xlarge: four V100s, one quad of the cube-mesh (nvidia-smi topo -m: 0-3 NV2, 1-2 NV2, 2-3 NV2, the
# other three pairs NV1); 9 links.
_P3_8XLARGE = [(a, b, n) for a, b, n in _P3_16XLARGE if a < 4 and b < 4]


def _pcie_tree(cards: int) -> Topology:
    """P2.16xlarge (8 cards) / P2.8xlarge (4 cards) as paper 003 Fig. 2 and Sec. 3 describe them.

    AWS's P2 instances carry NVIDIA K80 cards, two GK210 GPUs each (P2.16xlarge: 16 GPUs, 8 cards). On a
    card both GPUs sit behind the card's own PLX switch; four cards hang off a central PLX; P2.16xlarge
    has two central PLX chips joined by one link. Every link is 16 PCIe lanes wide (Fig. 2: "Solid lines
    are PCI-E bus lanes (16 lanes wide)"), so all capacities are 1 (unit: a PCIe x16 link).
    """
    gpus = tuple(f"gpu{i}" for i in range(2 * cards))
    card_sw = tuple(f"card{k}" for k in range(cards))
    central = tuple(f"plx{h}" for h in range((cards + 3) // 4))
    edges = [Edge(f"gpu{i}", f"card{i // 2}", 1.0, "gpu-card") for i in range(2 * cards)]
    edges += [Edge(f"card{k}", f"plx{k // 4}", 1.0, "card-plx") for k in range(cards)]
    edges += [Edge(a, b, 1.0, "plx-plx") for a, b in itertools.pairwise(central)]
    return Topology(
        f"p2.{2 * cards}xlarge",
        gpus,
        card_sw + central,
        tuple(edges),
        "PCIe x16",
        "AWS P2 (K80 cards, two GPUs behind each card's PLX); layout as paper 003 Fig. 2, Sec. 3",
    )


def _builtins() -> dict[str, Topology]:
    nv = "NVIDIA DGX-1 with Tesla V100 System Architecture white paper, Fig. 5; paper 003 Fig. 1"
    p316 = Topology("p3.16xlarge", *_cube_mesh(_P3_16XLARGE, 8), "NVLink", nv)
    return {
        "p3.16xlarge": p316,
        "dgx-1": Topology("dgx-1", p316.nodes, (), p316.edges, "NVLink", nv),
        "p3.8xlarge": Topology("p3.8xlarge", *_cube_mesh(_P3_8XLARGE, 4), "NVLink", "one quad of " + nv),
        "p2.16xlarge": _pcie_tree(8),
        "p2.8xlarge": _pcie_tree(4),
    }


BUILTINS: dict[str, Topology] = _builtins()

_TOP_KEYS = ("name", "unit", "nodes", "switches", "edges")
_EDGE_KEYS = ("ends", "capacity", "group")


def _names(data: dict[str, Any], key: str, required: bool) -> list[str]:
    if key not in data:
        if required:
            raise UsageError(f"{key}: missing; expected a list of node names")
        return []
    value = data[key]
    if not isinstance(value, list):
        raise UsageError(f"{key}: expected a list of node names, got {type(value).__name__}")
    seen: set[str] = set()
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{key}[{i}]: expected a non-empty string, got {name!r}")
        if name in seen:
            raise UsageError(f"{key}[{i}]: duplicate name {name!r}")
        seen.add(name)
    return value


def _edge(i: int, raw: object, known: dict[str, str], seen: dict[frozenset[str], int]) -> Edge:
    where = f"edges[{i}]"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected an object with keys {', '.join(_EDGE_KEYS)}")
    unknown = sorted(set(raw) - set(_EDGE_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(_EDGE_KEYS)}")
    for key in ("ends", "capacity"):
        if key not in raw:
            raise UsageError(f"{where}.{key}: missing")
    ends = raw["ends"]
    if not isinstance(ends, list) or len(ends) != 2:
        raise UsageError(f"{where}.ends: expected a list of two node names, got {ends!r}")
    for j, name in enumerate(ends):
        if not isinstance(name, str) or name not in known:
            raise UsageError(
                f"{where}.ends[{j}]: unknown node {name!r}; nodes and switches are {', '.join(known)}"
            )
    if ends[0] == ends[1]:
        raise UsageError(f"{where}.ends: a link from {ends[0]!r} to itself")
    pair = frozenset(ends)
    if pair in seen:
        raise UsageError(
            f"{where}.ends: duplicate link {ends[0]}-{ends[1]} (also edges[{seen[pair]}]); "
            "give parallel links as one edge of their summed capacity"
        )
    seen[pair] = i
    cap = raw["capacity"]
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not math.isfinite(cap) or cap <= 0:
        raise UsageError(f"{where}.capacity: expected a finite number > 0, got {cap!r}")
    group = raw.get("group", "")
    if not isinstance(group, str):
        raise UsageError(f"{where}.group: expected a string, got {group!r}")
    return Edge(ends[0], ends[1], float(cap), group)


def parse_topology(data: object, default_name: str = "topology", source: str = "") -> Topology:
    """A topology from decoded JSON, validated strictly; UsageError names the field at fault."""
    if not isinstance(data, dict):
        raise UsageError(f"expected a JSON object with keys {', '.join(_TOP_KEYS)}")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r}; allowed: {', '.join(_TOP_KEYS)}")
    for key in ("name", "unit"):
        if key in data and (not isinstance(data[key], str) or not data[key].strip()):
            raise UsageError(f"{key}: expected a non-empty string, got {data[key]!r}")
    nodes = _names(data, "nodes", required=True)
    if len(nodes) < 2:
        raise UsageError(f"nodes: expected at least 2 compute nodes, got {len(nodes)}")
    switches = _names(data, "switches", required=False)
    both = sorted(set(nodes) & set(switches))
    if both:
        raise UsageError(f"switches: {both[0]!r} is also in nodes; a node computes or switches, not both")
    known = {name: "node" for name in nodes} | {name: "switch" for name in switches}
    raw_edges = data.get("edges")
    if raw_edges is None:
        raise UsageError("edges: missing; expected a list of {ends, capacity[, group]} objects")
    if not isinstance(raw_edges, list) or not raw_edges:
        raise UsageError("edges: expected a non-empty list of {ends, capacity[, group]} objects")
    seen: dict[frozenset[str], int] = {}
    edges = tuple(_edge(i, raw, known, seen) for i, raw in enumerate(raw_edges))
    topo = Topology(
        data.get("name", default_name), tuple(nodes), tuple(switches), edges, data.get("unit", "1"), source
    )
    _check_connected(topo)
    return topo


def _check_connected(topo: Topology) -> None:
    adjacency: dict[str, list[str]] = {n: [] for n in topo.all_nodes}
    for e in topo.edges:
        adjacency[e.a].append(e.b)
        adjacency[e.b].append(e.a)
    reached = {topo.nodes[0]}
    stack = [topo.nodes[0]]
    while stack:
        for other in adjacency[stack.pop()]:
            if other not in reached:
                reached.add(other)
                stack.append(other)
    cut_off = [n for n in topo.all_nodes if n not in reached]
    if cut_off:
        raise UsageError(
            f"edges: the graph is not connected: {', '.join(cut_off)} cannot be reached from "
            f"{topo.nodes[0]} (aggregation needs a spanning tree, paper 003 Sec. 2)"
        )


def load_topology(spec: str) -> Topology:
    """A built-in by name (case-insensitive), else a JSON file; UsageError names what is wrong."""
    builtin = BUILTINS.get(spec.lower())
    if builtin is not None:
        return builtin
    path = Path(spec)
    if not path.is_file():
        raise UsageError(
            f"--topology: {spec!r} is neither a built-in topology ({', '.join(BUILTINS)}) nor a file"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--topology: cannot read {spec}: {e}") from e
    except json.JSONDecodeError as e:
        raise UsageError(f"--topology: {spec}: not JSON: {e}") from e
    try:
        return parse_topology(data, default_name=path.stem, source=str(path))
    except UsageError as e:
        raise UsageError(f"--topology: {spec}: {e}") from e
