"""The linear program of paper 003 on the spanning tree polytope, solved by column generation.

Paper 003 eq. (2): C(G) = min over P in the spanning tree polytope of max_e P_e c_e, where
P_e = sum_T alpha_T T_e, sum_T alpha_T = 1, alpha >= 0. With switches (Sec. 3) the columns are schedules
S instead of trees: a spanning tree over the compute nodes whose every edge travels a route of links,
S_e = how many of its routes cross link e (an integer, possibly above 1). As an LP (the master):

    minimize t  subject to  sum_S alpha_S c_e S_e <= t  (every link e),  sum_S alpha_S = 1,  alpha >= 0.

Enumerating the trees is exponential, so the master starts from one column and grows: with the duals
w_e >= 0 of the link rows (sum_e w_e = 1) and pi of the convexity row, a column S prices out when
sum_e w_e c_e S_e < pi. The cheapest column is a minimum spanning tree under the weights w_e c_e (the
oracle: Kruskal; with switches, Kruskal over the compute nodes with each pair's cheapest route as its
weight, which finds the cheapest schedule exactly since S_e only sums route crossings). When nothing
prices out, the master's value is C(G). A second master (same oracle) then picks, among schedules of
time C(G), the one of least total link time sum_e c_e P_e: the paper's "efficient schedules" (Sec. 3),
and a unique answer where the first LP has many optimal vertices (links with slack).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from geryon.errors import UsageError
from geryon.plan.routes import UnionFind, adjacency, cheapest_routes
from geryon.plan.topology import Topology

SCIPY_MISSING = "geryon plan needs SciPy: pip install 'geryon[plan]'"
MAX_ROUNDS = 20_000
# A column prices out when its reduced cost is below -TOLERANCE * max(1, pi).
TOLERANCE = 1e-10
# The second master allows the schedule's time to exceed C(G) by this much (relative): HiGHS's
# feasibility tolerance, so that its first vertex stays feasible.
SLACK = 1e-12


@dataclass(frozen=True)
class Schedule:
    """One column: tree edges over compute nodes (indices into Topology.all_nodes) and their routes."""

    tree: tuple[tuple[int, int], ...]
    routes: tuple[tuple[int, ...], ...]  # edge indices, one route per tree edge
    counts: tuple[int, ...]  # S_e (T_e for a tree) per link


@dataclass(frozen=True)
class Solution:
    value: float  # C(G), the first master's optimum
    schedules: tuple[Schedule, ...]  # the support of the chosen schedule
    shares: tuple[float, ...]  # alpha, summing to 1
    loads: tuple[float, ...]  # P_e = sum alpha S_e per link
    time: float  # max_e c_e P_e of the chosen schedule (C(G) within SLACK)
    rounds: int  # master solves of both phases
    columns: int  # columns generated


def _linprog() -> Any:
    try:
        from scipy.optimize import linprog
    except ImportError as e:
        raise UsageError(SCIPY_MISSING) from e
    return linprog


def _schedule(topo: Topology, tree: list[tuple[int, int]], routes: list[tuple[int, ...]]) -> Schedule:
    counts = [0] * len(topo.edges)
    for route in routes:
        for e in route:
            counts[e] += 1
    return Schedule(tuple(tree), tuple(routes), tuple(counts))


def cheapest_schedule(topo: Topology, weights: Sequence[float]) -> Schedule:
    """The oracle: the column minimising sum_e weights_e S_e (Kruskal; ties go to lower indices)."""
    ends = topo.endpoints()
    n = len(topo.nodes)
    if not topo.switches:  # a spanning tree of G itself (Sec. 2)
        order = sorted(range(len(ends)), key=lambda e: (weights[e], e))
        uf = UnionFind(n)
        chosen = [e for e in order if uf.union(*ends[e])]
        return _schedule(topo, [ends[e] for e in chosen], [(e,) for e in chosen])
    # With switches: a spanning tree of the compute nodes' complete graph, each pair at the price of
    # its cheapest route (through switches or other compute nodes).
    adj = adjacency(len(topo.all_nodes), ends)
    pairs: list[tuple[float, int, int, int, tuple[int, ...]]] = []
    for u in range(n):
        routes = cheapest_routes(adj, weights, u)
        for v in range(u + 1, n):
            route = routes[v]
            pairs.append((sum(weights[e] for e in route), len(route), u, v, route))
    pairs.sort()
    uf = UnionFind(n)
    tree = [(u, v, route) for _, _, u, v, route in pairs if uf.union(u, v)]
    return _schedule(topo, [(u, v) for u, v, _ in tree], [r for _, _, r in tree])


def _master(
    matrix: np.ndarray, costs: np.ndarray | None, cap: float | None
) -> tuple[np.ndarray, float, np.ndarray, float]:
    """Solves the master over the columns of matrix (rows: links, entries c_e S_e).

    costs None: phase 1 (minimise t). Else phase 2: minimise costs . alpha with every row <= cap.
    Returns (alpha, objective, w (link duals, >= 0), pi (convexity dual)).
    """
    linprog = _linprog()
    m, k = matrix.shape
    opts = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    if costs is None:
        c = np.r_[np.zeros(k), 1.0]
        a_ub = np.hstack([matrix, -np.ones((m, 1))])
        b_ub = np.zeros(m)
        a_eq = np.r_[np.ones(k), 0.0][None, :]
    else:
        assert cap is not None
        c, a_ub, b_ub, a_eq = costs, matrix, np.full(m, cap), np.ones((1, k))
    res = linprog(
        c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs", options=opts
    )
    if res.status != 0:  # pragma: no cover: both masters are feasible and bounded by construction
        raise RuntimeError(f"linprog failed: {res.message}")
    return res.x[:k], float(res.fun), -np.asarray(res.ineqlin.marginals), float(res.eqlin.marginals[0])


def _generate(
    topo: Topology,
    columns: list[Schedule],
    costs_of: Any,
    weights_of: Any,
    cap: float | None,
) -> tuple[np.ndarray, float, int]:
    """Column generation until no column prices out; returns (alpha, objective, rounds)."""
    c = np.asarray(topo.costs)
    seen = {s.counts for s in columns}
    for rounds in range(1, MAX_ROUNDS + 1):
        matrix = np.array([s.counts for s in columns], dtype=float).T * c[:, None]
        costs = None if costs_of is None else np.array([costs_of(s) for s in columns])
        alpha, objective, w, pi = _master(matrix, costs, cap)
        weights = weights_of(np.maximum(w, 0.0))
        best = cheapest_schedule(topo, weights)
        price = float(np.dot(weights, best.counts))
        if price >= pi - TOLERANCE * max(1.0, abs(pi)) or best.counts in seen:
            return alpha, objective, rounds
        columns.append(best)
        seen.add(best.counts)
    raise RuntimeError(f"column generation did not converge in {MAX_ROUNDS} rounds")  # pragma: no cover


def solve(topo: Topology) -> Solution:
    """C(G) and an optimal schedule of least total link time, by column generation."""
    c = np.asarray(topo.costs)
    columns = [cheapest_schedule(topo, list(c))]  # the MWST: C(T_MWST) bounds the LP from above
    # Phase 1: eq. (2). Reduced cost of S: sum_e w_e c_e S_e - pi.
    _, value, rounds1 = _generate(topo, columns, None, lambda w: w * c, None)
    # Phase 2: least sum_e c_e P_e among schedules of time <= C(G).
    # Reduced cost of S: sum_e c_e (1 + w_e) S_e - pi.
    cap = value * (1 + SLACK) + 1e-15
    alpha, _, rounds2 = _generate(
        topo, columns, lambda s: float(np.dot(c, s.counts)), lambda w: c * (1 + w), cap
    )
    return _solution(topo, value, columns, alpha, rounds1 + rounds2)


def _solution(
    topo: Topology, value: float, columns: list[Schedule], alpha: np.ndarray, rounds: int
) -> Solution:
    alpha = np.where(alpha > 1e-9, alpha, 0.0)  # HiGHS's zeros
    alpha = alpha / alpha.sum()
    keep = [i for i in np.argsort(-alpha, kind="stable") if alpha[i] > 0]
    loads = np.array([columns[i].counts for i in keep], dtype=float).T @ alpha[keep]
    return Solution(
        value=value,
        schedules=tuple(columns[i] for i in keep),
        shares=tuple(float(alpha[i]) for i in keep),
        loads=tuple(float(x) for x in loads),
        time=float(np.max(loads * np.asarray(topo.costs))),
        rounds=rounds,
        columns=len(columns),
    )


def all_spanning_trees(topo: Topology) -> list[Schedule]:
    """Every spanning tree of a switch-free graph (brute force, for cross-checks on small graphs)."""
    if topo.switches:
        raise ValueError("enumeration is for graphs without switches")
    ends = topo.endpoints()
    n = len(topo.nodes)
    trees = []
    for subset in itertools.combinations(range(len(ends)), n - 1):
        uf = UnionFind(n)
        if all(uf.union(*ends[e]) for e in subset):
            trees.append(_schedule(topo, [ends[e] for e in subset], [(e,) for e in subset]))
    return trees


def solve_enumerated(topo: Topology, columns: list[Schedule]) -> float:
    """eq. (2) over the given columns in one LP (every spanning tree: C(G) by brute force)."""
    c = np.asarray(topo.costs)
    matrix = np.array([s.counts for s in columns], dtype=float).T * c[:, None]
    return _master(matrix, None, None)[1]
