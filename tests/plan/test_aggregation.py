"""The time models beside the LP (one tree, a ring, a PS), the utilisation ratio, and the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plan.plan_graphs import random_graph, switch_tree

from geryon.plan.aggregation import PAPER_RATIOS, best_ring, plan, ps_time, ratio, to_json, to_text
from geryon.plan.topology import BUILTINS, Edge, Topology


def test_p3_16xlarge_tree_ring_and_ps() -> None:
    r = plan(BUILTINS["p3.16xlarge"])
    # Sec. 2: the best single tree is a chain of dual NVLinks (c = 1/2); 8 chains of the dual-link
    # ring take 7/8 of that ("matching the bandwidth offered by ring synchronization").
    assert r.single[1] == pytest.approx(1 / 2) and r.single[2]
    assert r.ring.time == pytest.approx(7 / 16)
    assert r.ring.how == "Hamiltonian cycle of links"
    assert r.lemma == pytest.approx({"max_c": 1.0, "c_mwst": 0.5, "c_g": 7 / 24, "lower": 7 / 24})
    assert r.ps == pytest.approx(3 / 4)
    assert r.groups == []


def test_p3_8xlarge() -> None:
    r = plan(BUILTINS["p3.8xlarge"])
    assert r.solution.value == pytest.approx(1 / 3, abs=1e-9)
    assert r.single[1] == pytest.approx(1 / 2)
    assert r.ring.time == pytest.approx(3 / 4)  # the dual links form no cycle: the ring needs a single one
    assert r.ps == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    ("name", "means"), [("p2.16xlarge", [15 / 8, 14 / 8, 8 / 8]), ("p2.8xlarge", [7 / 4, 6 / 4])]
)
def test_p2_link_utilisation_reproduces_the_papers_ratio(name: str, means: list[float]) -> None:
    r = plan(BUILTINS[name])
    assert [g.mean for g in r.groups] == pytest.approx(means, abs=1e-9)
    assert r.utilisation_ratio == PAPER_RATIOS[name]
    gpu_links = r.groups[0]
    assert gpu_links.group == "gpu-card" and gpu_links.max == pytest.approx(r.solution.value, rel=1e-9)
    assert r.lemma is None


def test_p2_16xlarge_ring_and_ps() -> None:
    r = plan(BUILTINS["p2.16xlarge"])
    # The card-by-card ring crosses every link of the tree twice: (15/16) * 2 = 15/8, C(G) itself.
    assert r.ring.time == pytest.approx(15 / 8)
    assert r.ring.order == tuple(f"gpu{i}" for i in range(16))
    # The sharded PS sends 8 * 8 * 2 shares of 1/16 over the link between the halves.
    assert r.ps == pytest.approx(8)
    # A single schedule has a GPU of degree 2: its link carries 2.
    assert r.single[1] == pytest.approx(2) and not r.single[2]


def test_the_lp_is_never_worse_than_tree_ring_or_ps_on_random_graphs() -> None:
    rng = np.random.default_rng(40)
    for i in range(60):
        topo = random_graph(rng) if i % 3 else switch_tree(rng, int(rng.integers(2, 7)))
        r = plan(topo)
        value = r.solution.value
        assert value <= r.single[1] * (1 + 1e-9)
        assert value <= r.ring.time * (1 + 1e-9)
        assert value <= r.ps * (1 + 1e-9)
        assert r.solution.time == pytest.approx(value, rel=1e-9)


def test_ring_on_two_nodes_and_a_path() -> None:
    two = Topology("two", ("a", "b"), (), (Edge("a", "b", 2.0),))
    assert best_ring(two).time == pytest.approx(0.5)  # (n-1)/n * 2 crossings * c = 1/2 * 2 * 1/2
    path = Topology("path", ("a", "b", "c"), (), (Edge("a", "b", 1.0), Edge("b", "c", 1.0)))
    assert best_ring(path).time == pytest.approx(2 / 3 * 2)
    assert ps_time(path) == pytest.approx(4 / 3)  # a-b carries a->b, a->c, b->a, c->a: 4 shares of 1/3


def test_ratio() -> None:
    assert ratio([15 / 8, 1.75, 1.0]) == "15:14:8"
    assert ratio([1.75, 1.5]) == "7:6"
    assert ratio([2.0, 2.0]) == "1:1"
    assert ratio([np.pi, 1.0]) == ""


def test_text_and_json_reports() -> None:
    r = plan(BUILTINS["p2.16xlarge"])
    text = to_text(r)
    assert "C(G) = 1.875 (15/8)" in text
    assert "ratio of the means: 15:14:8  (paper 003 Sec. 3: 15:14:8)" in text
    assert "Lemma 2.1: stated for networks without switches" in text
    data = json.loads(json.dumps(to_json(r)))
    assert data["utilisation_ratio"] == data["paper_ratio"] == "15:14:8"
    assert sum(s["share"] for s in data["schedule"]) == pytest.approx(1)
    assert data["c_g_fraction"] == "15/8"
    text = to_text(plan(BUILTINS["p3.16xlarge"]))
    assert "C(G) = 0.291666667 (7/24)" in text
    assert "(n-1)/sum_e 1/c_e = 0.291666667 (7/24)" in text
