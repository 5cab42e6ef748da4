"""The LP of paper 003 (eq. 2) by column generation: the paper's values, Lemma 2.1, brute force.

The LP needs SciPy (the `plan` extra, which scripts/bootstrap.sh installs).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from plan.plan_graphs import random_graph, switch_tree

from geryon.plan.routes import UnionFind, adjacency, cheapest_routes
from geryon.plan.spanning_trees import (
    Schedule,
    _schedule,
    all_spanning_trees,
    cheapest_schedule,
    solve,
    solve_enumerated,
)
from geryon.plan.topology import BUILTINS, Edge, Topology


def lemma_lower(topo: Topology) -> float:
    return (len(topo.nodes) - 1) / sum(1 / c for c in topo.costs)


@pytest.mark.parametrize(
    ("name", "value"), [("p3.16xlarge", 7 / 24), ("dgx-1", 7 / 24), ("p3.8xlarge", 1 / 3)]
)
def test_the_papers_values_equal_lemma_2_1s_lower_bound(name: str, value: float) -> None:
    topo = BUILTINS[name]
    s = solve(topo)
    assert s.value == pytest.approx(value, abs=1e-9)
    assert lemma_lower(topo) == pytest.approx(value, abs=1e-12)
    assert s.time == pytest.approx(value, abs=1e-9)
    assert sum(s.shares) == pytest.approx(1.0, abs=1e-12)
    assert all(a > 0 for a in s.shares)


def test_the_schedule_is_a_convex_combination_of_spanning_trees() -> None:
    topo = BUILTINS["p3.16xlarge"]
    s = solve(topo)
    trees = {t.counts for t in all_spanning_trees(topo)}
    assert all(x.counts in trees for x in s.schedules)
    loads = np.array([x.counts for x in s.schedules], dtype=float).T @ np.array(s.shares)
    assert np.allclose(loads, s.loads)
    assert sum(s.loads) == pytest.approx(len(topo.nodes) - 1)  # every tree has n-1 edges


def test_the_oracle_is_a_minimum_spanning_tree() -> None:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree

    rng = np.random.default_rng(7)
    for _ in range(30):
        topo = random_graph(rng)
        weights = [float(w) for w in rng.uniform(0.1, 1, len(topo.edges))]
        tree = cheapest_schedule(topo, weights)
        n = len(topo.nodes)
        rows, cols = zip(*topo.endpoints(), strict=True)
        mst = minimum_spanning_tree(csr_matrix((weights, (rows, cols)), shape=(n, n)))
        assert np.dot(weights, tree.counts) == pytest.approx(mst.sum())
        assert sum(tree.counts) == n - 1


def test_100_random_graphs_lie_within_lemma_2_1_and_beat_the_best_tree() -> None:
    rng = np.random.default_rng(2018)
    checked_by_enumeration = 0
    for _ in range(100):
        topo = random_graph(rng)
        s = solve(topo)
        costs = topo.costs
        mwst = cheapest_schedule(topo, costs)
        c_mwst = max(c for c, t in zip(costs, mwst.counts, strict=True) if t)
        # eq. (3): max_e c_e >= C(T_MWST) >= C(G) >= (n-1) / sum_e 1/c_e
        assert max(costs) >= c_mwst
        assert c_mwst >= s.value - 1e-12
        assert s.value >= lemma_lower(topo) * (1 - 1e-9)
        assert s.time <= c_mwst * (1 + 1e-9)
        assert s.time == pytest.approx(s.value, rel=1e-9)
        if len(topo.edges) <= 14:
            checked_by_enumeration += 1
            brute = solve_enumerated(topo, all_spanning_trees(topo))
            assert s.value == pytest.approx(brute, rel=1e-9, abs=1e-12)
    assert checked_by_enumeration >= 40


def test_the_lower_bound_is_tight_on_uniformly_dense_graphs() -> None:
    # K_n with equal links: (n-1) / (n(n-1)/2) = 2/n (the PS's time too, Sec. 4)
    for n in (3, 4, 5, 6):
        edges = tuple(Edge(str(a), str(b), 1.0) for a, b in itertools.combinations(range(n), 2))
        topo = Topology("k", tuple(map(str, range(n))), (), edges)
        assert solve(topo).value == pytest.approx(2 / n, abs=1e-9)


def test_a_tree_topology_has_one_schedule_its_own() -> None:
    rng = np.random.default_rng(3)
    topo = random_graph(rng, n_min=6, n_max=6, density=0.0)
    s = solve(topo)
    assert len(s.schedules) == 1
    assert s.value == pytest.approx(max(topo.costs))


def _schedules_over_switches(topo: Topology) -> list[Schedule]:
    """Every spanning tree of the compute nodes, each edge on its (unique) route through the tree."""
    n = len(topo.nodes)
    adj = adjacency(len(topo.all_nodes), topo.endpoints())
    routes = {u: cheapest_routes(adj, [1.0] * len(topo.edges), u) for u in range(n)}
    pairs = list(itertools.combinations(range(n), 2))
    found = []
    for subset in itertools.combinations(pairs, n - 1):
        uf = UnionFind(n)
        if all(uf.union(u, v) for u, v in subset):
            found.append(_schedule(topo, list(subset), [routes[u][v] for u, v in subset]))
    return found


def test_with_switches_column_generation_equals_brute_force() -> None:
    rng = np.random.default_rng(11)
    for gpus in (3, 4, 5, 5, 6):
        topo = switch_tree(rng, gpus)
        s = solve(topo)
        brute = solve_enumerated(topo, _schedules_over_switches(topo))
        assert s.value == pytest.approx(brute, rel=1e-9)


def test_p2_16xlarge_is_bound_by_the_gpu_links() -> None:
    # Sec. 3: "the bottleneck is the intra-card connectivity". A GPU's link carries one crossing per
    # tree edge at the GPU: degrees sum to 2 * 15 over 16 links, so C(G) >= 30/16, and it is reached.
    s = solve(BUILTINS["p2.16xlarge"])
    assert s.value == pytest.approx(15 / 8, abs=1e-9)
    assert solve(BUILTINS["p2.8xlarge"]).value == pytest.approx(7 / 4, abs=1e-9)
