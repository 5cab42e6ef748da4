"""Paths between compute nodes: the cheapest route under per-link weights (Dijkstra) and a union-find.

Data crossing a switch cannot be aggregated (paper 003 Sec. 3), so a schedule's tree edge between two
compute nodes is carried along a route of links; these helpers find such routes.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        """Joins the sets of a and b; False when they were one set already."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)
        return True


def adjacency(size: int, endpoints: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """node -> [(neighbour, edge index)], in edge order."""
    adj: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    for i, (a, b) in enumerate(endpoints):
        adj[a].append((b, i))
        adj[b].append((a, i))
    return adj


def cheapest_routes(
    adj: list[list[tuple[int, int]]], weights: Sequence[float], source: int
) -> dict[int, tuple[int, ...]]:
    """node -> the edge indices of the cheapest path from source (ties: fewer hops, then lower indices)."""
    best: dict[int, tuple[float, int]] = {source: (0.0, 0)}
    via: dict[int, tuple[int, int]] = {}
    heap: list[tuple[float, int, int]] = [(0.0, 0, source)]
    done: set[int] = set()
    while heap:
        dist, hops, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for other, edge in adj[node]:
            key = (dist + weights[edge], hops + 1)
            if other not in done and (other not in best or key < best[other]):
                best[other] = key
                via[other] = (node, edge)
                heapq.heappush(heap, (key[0], key[1], other))
    routes: dict[int, tuple[int, ...]] = {source: ()}
    for node in best:
        path: list[int] = []
        at = node
        while at != source:
            at, edge = via[at]
            path.append(edge)
        routes[node] = tuple(reversed(path))
    return routes
