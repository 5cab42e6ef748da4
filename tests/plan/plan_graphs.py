"""Seeded random connected graphs for the plan tests (compute nodes only, or a PCIe-like switch tree)."""

from __future__ import annotations

import numpy as np

from geryon.plan.topology import Edge, Topology


def random_graph(rng: np.random.Generator, n_min: int = 3, n_max: int = 9, density: float = 0.4) -> Topology:
    """A connected graph: a random tree plus each other pair with probability density, capacities 1..4
    (integers, so that C(G) is a simple fraction) or, one graph in three, real numbers in [0.5, 4)."""
    n = int(rng.integers(n_min, n_max + 1))
    pairs = {(int(rng.integers(0, i)), i) for i in range(1, n)}
    pairs |= {(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < density}
    real = rng.random() < 1 / 3
    edges = tuple(
        Edge(f"n{a}", f"n{b}", float(rng.uniform(0.5, 4)) if real else float(rng.integers(1, 5)))
        for a, b in sorted(pairs)
    )
    return Topology(f"random{n}", tuple(f"n{i}" for i in range(n)), (), edges)


def switch_tree(rng: np.random.Generator, gpus: int) -> Topology:
    """GPUs as leaves of a random tree of switches (routes are unique, as in a PCIe tree)."""
    switches = [f"sw{i}" for i in range(int(rng.integers(1, 4)))]
    edges = [
        Edge(switches[int(rng.integers(0, i))], switches[i], float(rng.integers(1, 4)))
        for i in range(1, len(switches))
    ]
    edges += [
        Edge(f"g{i}", switches[int(rng.integers(0, len(switches)))], float(rng.integers(1, 4)))
        for i in range(gpus)
    ]
    return Topology("switch-tree", tuple(f"g{i}" for i in range(gpus)), tuple(switches), tuple(edges))
