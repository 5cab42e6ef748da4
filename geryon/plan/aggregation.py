"""Aggregation times on a topology (the LP schedule, one best tree, a ring, a PS) and the report.

Every time is that of one aggregation (gather) in paper 003's model: links are undirected, c_e is the
time to send all gradients through link e (eq. 1), and a schedule's time is max_e c_e P_e where P_e is
the traffic it puts on e, in units of the whole gradient set (eq. 2). The broadcast back is the same
schedule reversed and takes the same time in each model, so the ratios hold for gather-scatter too.

  * schedule: the LP's optimum C(G) (eq. 2; spanning_trees.solve).
  * best single tree: C(T_MWST) = max_e c_e T_e of a minimum spanning tree under c (eq. 1 and the
    Boruvka remark after it). With switches a single schedule's S_e can exceed 1 and the best one is
    not an MST: the best of the MST over routes, the ring order's chain and the LP's own columns
    (C(G) bounds it from below).
  * ring: Sec. 2, "form 8 chains and balance the network traffic equally over them ... matching the
    bandwidth offered by ring synchronization": a cyclic order of the n compute nodes, each hop on a
    route; the n chains (the ring less one hop) carry 1/n each, so P_e = (n-1)/n * S_e with S_e the hops
    crossing e. Without switches the best Hamiltonian cycle of direct links (least bottleneck) is
    searched exactly for n <= RING_SEARCH_MAX; the other candidate is the depth-first order of the
    bottleneck spanning tree (every tree link crossed twice: the least a ring can do on a tree, so this
    is exact on tree-shaped PCIe topologies).
  * PS: Sec. 1 ([1]: workers and servers) and Sec. 4 ("a parameter server (PS) ... that uses all-to-all
    communication"): every compute node serves 1/n of the parameters and every other node pushes that
    share to it along its cheapest route, unaggregated; P_e = (1/n) * (ordered pairs routed over e).
    It is the convex combination of the n star schedules, so C(G) <= PS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from geryon.plan.routes import UnionFind, adjacency, cheapest_routes
from geryon.plan.spanning_trees import Schedule, Solution, cheapest_schedule, solve
from geryon.plan.topology import Topology

RING_SEARCH_MAX = 12  # compute nodes: the exact Hamiltonian-cycle search beyond this is skipped
# The link-utilisation ratio paper 003 Sec. 3 gives (intra-card PLX : inter-card PLX : central link).
PAPER_RATIOS = {"p2.16xlarge": "15:14:8", "p2.8xlarge": "7:6"}


def schedule_time(topo: Topology, loads: Any) -> float:
    """max_e c_e P_e (eq. 2's objective; eq. 1 when P is one tree's 0/1 vector)."""
    return float(np.max(np.asarray(topo.costs) * np.asarray(loads, dtype=float)))


def _crossings(topo: Topology, hops: list[tuple[int, ...]]) -> np.ndarray:
    counts = np.zeros(len(topo.edges))
    for route in hops:
        for e in route:
            counts[e] += 1
    return counts


def _bottleneck_tree(topo: Topology) -> list[int]:
    """A minimum spanning tree of all nodes (switches too) under c: edge indices."""
    ends = topo.endpoints()
    uf = UnionFind(len(topo.all_nodes))
    return [e for e in sorted(range(len(ends)), key=lambda e: (topo.edges[e].cost, e)) if uf.union(*ends[e])]


def _tree_order(topo: Topology) -> tuple[list[int], dict[int, dict[int, tuple[int, ...]]]]:
    """The compute nodes in depth-first order of the bottleneck tree, and routes along that tree."""
    tree = _bottleneck_tree(topo)
    ends = topo.endpoints()
    adj = adjacency(len(topo.all_nodes), [ends[e] for e in tree])
    order, stack, seen = [], [0], {0}
    while stack:
        node = stack.pop()
        if node < len(topo.nodes):
            order.append(node)
        for other, _ in reversed(adj[node]):
            if other not in seen:
                seen.add(other)
                stack.append(other)
    unit = [1.0] * len(tree)
    routes = {}
    for u in order:
        local = cheapest_routes(adj, unit, u)
        routes[u] = {v: tuple(tree[i] for i in r) for v, r in local.items()}
    return order, routes


def _hamiltonian_cycle(n: int, edges: dict[frozenset[int], int]) -> list[int] | None:
    """A Hamiltonian cycle through nodes 0..n-1 over the given links (backtracking), or None."""
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for pair in edges:
        a, b = sorted(pair)
        nbrs[a].append(b)
        nbrs[b].append(a)
    if n < 3 or any(len(x) < 2 for x in nbrs):
        return None
    path, used = [0], [False] * n
    used[0] = True

    def extend() -> bool:
        if len(path) == n:
            return 0 in nbrs[path[-1]]
        for nxt in nbrs[path[-1]]:
            if not used[nxt]:
                used[nxt] = True
                path.append(nxt)
                if extend():
                    return True
                path.pop()
                used[nxt] = False
        return False

    return path if extend() else None


@dataclass(frozen=True)
class Ring:
    order: tuple[str, ...]
    time: float
    how: str


def best_ring(topo: Topology) -> Ring:
    n = len(topo.nodes)
    factor = (n - 1) / n
    order, routes = _tree_order(topo)
    hops = [routes[u][v] for u, v in zip(order, order[1:] + order[:1], strict=True)]
    best = Ring(
        tuple(topo.nodes[i] for i in order),
        factor * schedule_time(topo, _crossings(topo, hops)),
        "depth-first order of the bottleneck spanning tree",
    )
    if topo.switches or n > RING_SEARCH_MAX:
        return best
    ends = topo.endpoints()
    for threshold in sorted({e.cost for e in topo.edges}):
        if factor * threshold >= best.time:
            break
        usable = {frozenset(ends[i]): i for i, e in enumerate(topo.edges) if e.cost <= threshold}
        cycle = _hamiltonian_cycle(n, usable)
        if cycle is not None:
            return Ring(tuple(topo.nodes[i] for i in cycle), factor * threshold, "Hamiltonian cycle of links")
    return best


def ps_time(topo: Topology) -> float:
    n = len(topo.nodes)
    adj = adjacency(len(topo.all_nodes), topo.endpoints())
    hops = []
    for u in range(n):
        routes = cheapest_routes(adj, topo.costs, u)
        hops += [routes[v] for v in range(n) if v != u]
    return schedule_time(topo, _crossings(topo, hops) / n)


def _single_time(topo: Topology, s: Schedule) -> float:
    return schedule_time(topo, s.counts)


def best_single(topo: Topology, solution: Solution) -> tuple[Schedule, float, bool]:
    """(the best single tree or schedule, its time, whether it is provably the best)."""
    mwst = cheapest_schedule(topo, topo.costs)
    if not topo.switches:
        return mwst, _single_time(topo, mwst), True
    order, routes = _tree_order(topo)
    chain = [(order[i], order[i + 1]) for i in range(len(order) - 1)]
    idx = {(min(a, b), max(a, b)) for a, b in chain}
    path = Schedule(
        tuple(sorted(idx)),
        tuple(routes[a][b] for a, b in chain),
        tuple(int(x) for x in _crossings(topo, [routes[a][b] for a, b in chain])),
    )
    candidates = [mwst, path, *solution.schedules]
    best = min(candidates, key=lambda s: _single_time(topo, s))
    return best, _single_time(topo, best), False


def fraction(x: float, limit: int = 1000) -> str:
    """'7/24' when x is that fraction within 1e-8 (the LP's tolerances), else ''."""
    f = Fraction(x).limit_denominator(limit)
    return str(f) if abs(float(f) - x) <= 1e-8 * max(1.0, abs(x)) else ""


def ratio(values: list[float]) -> str:
    """Small integers in the proportion of values ('15:14:8'), or '' when they are not simple fractions."""
    fracs = [Fraction(v).limit_denominator(64) for v in values]
    if any(abs(float(f) - v) > 1e-6 * max(1.0, v) for f, v in zip(fracs, values, strict=True)):
        return ""
    scale = math.lcm(*(f.denominator for f in fracs))
    ints = [int(f * scale) for f in fracs]
    g = math.gcd(*ints) or 1
    return ":".join(str(i // g) for i in ints)


@dataclass(frozen=True)
class GroupUse:
    group: str
    links: int
    mean: float  # mean of c_e P_e over the group's links: the time each is busy
    max: float


@dataclass
class Report:
    topo: Topology
    solution: Solution
    lemma: dict[str, float] | None  # Lemma 2.1's chain, switch-free graphs only
    single: tuple[Schedule, float, bool]
    ring: Ring
    ps: float
    groups: list[GroupUse] = field(default_factory=list)

    @property
    def utilisation_ratio(self) -> str:
        return ratio([g.mean for g in self.groups]) if self.groups else ""


def plan(topo: Topology) -> Report:
    solution = solve(topo)
    single = best_single(topo, solution)
    lemma = None
    if not topo.switches:  # Lemma 2.1 (eq. 3) is stated for networks of compute nodes (Sec. 2)
        costs = topo.costs
        lemma = {
            "max_c": max(costs),
            "c_mwst": single[1],
            "c_g": solution.value,
            "lower": (len(topo.nodes) - 1) / sum(1 / c for c in costs),
        }
    busy = np.asarray(topo.costs) * np.asarray(solution.loads)
    groups = []
    names = list(dict.fromkeys(e.group for e in topo.edges))
    if len(names) > 1:
        for g in names:
            members = [busy[i] for i, e in enumerate(topo.edges) if e.group == g]
            groups.append(GroupUse(g or "(none)", len(members), float(np.mean(members)), float(max(members))))
    return Report(topo, solution, lemma, single, best_ring(topo), ps_time(topo), groups)


def _tree_text(topo: Topology, s: Schedule) -> str:
    names = topo.all_nodes
    parts = []
    for (u, v), route in zip(s.tree, s.routes, strict=True):
        if len(route) == 1 and not topo.switches:
            parts.append(f"{names[u]}-{names[v]}")
        else:
            parts.append(f"{names[u]}-{names[v]}({len(route)} links)")
    return " ".join(parts)


def _num(x: float) -> str:
    f = fraction(x)
    return f"{x:.9g}" + (f" ({f})" if f and "/" in f else "")


def to_text(r: Report) -> str:
    t, s = r.topo, r.solution
    lines = [
        f"topology {t.name}: {len(t.nodes)} compute nodes, {len(t.switches)} switches, "
        f"{len(t.edges)} links (capacity unit: {t.unit})",
    ]
    if t.source:
        lines.append(f"  source: {t.source}")
    lines.append(
        "  times: one aggregation, in units of the gradients over a link of capacity 1 (c_e = 1/capacity)"
    )
    lines.append(f"C(G) = {_num(s.value)}  (paper 003 eq. 2; {s.columns} columns, {s.rounds} LP solves)")
    if r.lemma is not None:
        lm = r.lemma
        lines.append(
            f"Lemma 2.1 (eq. 3): max_e c_e = {_num(lm['max_c'])} >= C(T_MWST) = {_num(lm['c_mwst'])} "
            f">= C(G) = {_num(lm['c_g'])} >= (n-1)/sum_e 1/c_e = {_num(lm['lower'])}"
        )
    else:
        lines.append("Lemma 2.1: stated for networks without switches (Sec. 2); not applicable")
    single_name = "best single tree (eq. 1)" if r.single[2] else "best single schedule found (Sec. 3)"
    rows = [
        ("LP schedule (eq. 2)", s.time),
        (single_name, r.single[1]),
        (f"ring (Sec. 2, {r.ring.how})", r.ring.time),
        ("PS, sharded over every node (Sec. 4)", r.ps),
    ]
    lines.append("time per aggregation:")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        lines.append(f"  {name:<{width}}  {_num(value):<24} {value / s.time:6.3f}x the LP")
    lines.append(f"  ring order: {' '.join(r.ring.order)}")
    if r.groups:
        lines.append("link utilisation by group (mean and max of c_e P_e):")
        for g in r.groups:
            lines.append(f"  {g.group:<10} {g.links:3d} links  mean {_num(g.mean):<22} max {g.max:.9g}")
        line = f"  ratio of the means: {r.utilisation_ratio or 'not small integers'}"
        if t.name in PAPER_RATIOS:
            line += f"  (paper 003 Sec. 3: {PAPER_RATIOS[t.name]})"
        lines.append(line)
        lines.append(
            "  (of the optimal schedule with the least total link time; eq. 2 alone leaves links off the "
            "bottleneck slack, so its other optima give other ratios: docs/planning.md)"
        )
    lines.append(f"schedule: {len(s.schedules)} {'schedules' if t.switches else 'trees'} (share: tree edges)")
    for share, sched in zip(s.shares, s.schedules, strict=True):
        lines.append(f"  {share:.6f}  {_tree_text(t, sched)}")
    return "\n".join(lines) + "\n"


def to_json(r: Report) -> dict[str, Any]:
    t, s = r.topo, r.solution
    names = t.all_nodes

    def sched(x: Schedule) -> dict[str, Any]:
        return {
            "tree": [[names[u], names[v]] for u, v in x.tree],
            "routes": [[[t.edges[e].a, t.edges[e].b] for e in route] for route in x.routes],
        }

    return {
        "topology": {
            "name": t.name,
            "nodes": list(t.nodes),
            "switches": list(t.switches),
            "links": len(t.edges),
            "unit": t.unit,
            "source": t.source,
        },
        "c_g": s.value,
        "c_g_fraction": fraction(s.value) or None,
        "lemma_2_1": r.lemma,
        "times": {
            "schedule": s.time,
            "single_tree": r.single[1],
            "single_tree_exact": r.single[2],
            "ring": r.ring.time,
            "ps": r.ps,
        },
        "ring": {"order": list(r.ring.order), "how": r.ring.how},
        "utilisation": [g.__dict__ for g in r.groups],
        "utilisation_ratio": r.utilisation_ratio or None,
        "paper_ratio": PAPER_RATIOS.get(t.name),
        "schedule": [{"share": a, **sched(x)} for a, x in zip(s.shares, s.schedules, strict=True)],
        "loads": [{"ends": [e.a, e.b], "load": p} for e, p in zip(t.edges, s.loads, strict=True)],
        "solver": {"columns": s.columns, "rounds": s.rounds},
    }
