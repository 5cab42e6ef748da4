"""The simulator's forward pass as the model's dataflow (`LayerSpec.after`, geryon.threshold.forward_dag)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from geryon.tagger.tagging import Tagging
from geryon.threshold.forward_dag import layer_after, with_forward_dag
from geryon.threshold.profile import LayerSpec, ParamSpec, Profile, ProfileError, synthetic
from geryon.threshold.simulator import simulate

from .test_tac_sim import _profile, inception_like

MODES = ("fifo", "end-host", "network", "hybrid", "ideal")


def _as_chain_dag(p: Profile) -> Profile:
    """The same chain spelled out as `after` lists: each layer after the one before it."""
    layers = tuple(replace(la, after=() if i == 0 else (i - 1,)) for i, la in enumerate(p.layers))
    return replace(p, layers=layers)


def test_a_chain_spelled_as_a_dag_simulates_exactly_as_the_chain() -> None:
    p = synthetic(
        [400_000, 1_600_000, 100_000, 4_000_000], [1e-3, 2e-3, 5e-4, 1e-3], [2e-3, 4e-3, 1e-3, 2e-3]
    )
    d = _as_chain_dag(p)
    for mode, (w, ps), colocate in itertools.product(MODES, ((1, 1), (2, 1), (4, 2)), (False, True)):
        kw = dict(workers=w, num_ps=ps, bandwidth_bps=1e9, mode=mode, colocate=colocate, iterations=3)
        a, b = simulate(p, **kw), simulate(d, **kw)  # type: ignore[arg-type]
        assert (a.iteration_s, a.first_iteration_s) == (b.iteration_s, b.first_iteration_s), (mode, w, ps)


def _diamond(after: bool) -> Profile:
    """stem -> (big, small) -> head; `small`'s parameter is pulled before `big`'s (more urgent)."""
    names = ("stem", "big", "small", "head")
    deps = ((), (0,), (0,), (1, 2))
    layers = tuple(
        LayerSpec(n, 0.1, 0.2, None, d if after else None) for n, d in zip(names, deps, strict=True)
    )
    sizes = (100_000, 400_000, 100_000, 100_000)  # bytes: 0.1, 0.4, 0.1, 0.1 s at 8 Mbit/s
    urgency = (1.0, 0.5, 0.75, 0.25)
    params = tuple(
        ParamSpec(f"{n}/w", (s // 4,), 4, u, i)
        for i, (n, s, u) in enumerate(zip(names, sizes, urgency, strict=True))
    )
    return Profile("diamond", 1, layers, params, "layer", "hand")


def test_a_branch_computes_while_the_other_waits_for_its_parameter() -> None:
    """Pulls in urgency order at 8 Mbit/s: stem in at 0.1 s, small 0.2, big 0.6, head 0.7. The chain runs
    stem 0.1-0.2, waits for big (0.6-0.7), then small 0.7-0.8, head 0.8-0.9; the dataflow runs small at
    0.2-0.3 while big is in flight, so its forward pass, and the iteration, end 0.1 s (small's forward)
    sooner; the pushes after it are the same."""
    kw = dict(
        workers=1, num_ps=1, bandwidth_bps=8e6, mode="ideal", thresholds=(1.0,), trace=True, iterations=1
    )
    chain = simulate(_diamond(False), **kw)  # type: ignore[arg-type]
    dag = simulate(_diamond(True), **kw)  # type: ignore[arg-type]
    assert chain.first_iteration_s - dag.first_iteration_s == pytest.approx(0.1, abs=1e-9)

    def forwards(r: object) -> list[tuple[str, float, float]]:
        spans = [s for s in r.spans if s.category == "forward"]  # type: ignore[attr-defined]
        return [(s.name.split()[1], round(s.start_s, 9), round(s.end_s, 9)) for s in spans]

    assert forwards(chain) == [("stem", 0.1, 0.2), ("big", 0.6, 0.7), ("small", 0.7, 0.8), ("head", 0.8, 0.9)]
    assert forwards(dag) == [("stem", 0.1, 0.2), ("small", 0.2, 0.3), ("big", 0.6, 0.7), ("head", 0.7, 0.8)]


def test_the_dataflow_comes_from_the_traced_graph_nearest_layers_only() -> None:
    graph, params, flops = inception_like()
    tic = Tagging.from_graph(params, graph, "tic")
    profile = _profile(tic, flops)
    after = dict(zip((la.name for la in profile.layers), layer_after(profile, tic), strict=True))
    index = {la.name: i for i, la in enumerate(profile.layers)}
    assert after["stem"] == ()
    assert after["b0t2c1"] == (index["b0t2c0"],)  # a tower's second conv after its first, not after stem too
    # The next block's towers read the concat (no parameter) of this block's three tower ends.
    ends = tuple(sorted(index[n] for n in ("b0t0c0", "b0t1c1", "b0t2c2")))
    assert after["b1t0c0"] == after["b1t1c0"] == after["b1t2c0"] == ends
    assert with_forward_dag(profile, tic).is_dag and not profile.is_dag


def test_no_mode_goes_below_the_bound_on_a_dataflow_profile() -> None:
    graph, params, flops = inception_like()
    tic = Tagging.from_graph(params, graph, "tic")
    profile = with_forward_dag(_profile(tic, flops), tic)
    for mode, w, bw in itertools.product(MODES, (1, 2, 8), (1e9, 1e10)):
        r = simulate(profile, workers=w, num_ps=2, bandwidth_bps=bw, mode=mode)
        assert r.iteration_s >= r.bound.seconds * (1 - 1e-9), (mode, w, bw)


def test_after_survives_json_and_a_chain_writes_none() -> None:
    d = _diamond(True)
    assert Profile.from_dict(d.to_dict()) == d
    assert all("after" not in la for la in _diamond(False).to_dict()["layers"])
    assert d.scaled(2.0).layers[3].after == (1, 2)


@pytest.mark.parametrize(
    ("deps", "match"),
    [
        (((), (0,), None, (1, 2)), r"layers\[2\]\.after: layer 0 has 'after' list and this layer none"),
        (((), (0,), (7,), (1, 2)), r"layers\[2\]\.after: 7 is not the index of another layer in \[0, 3\]"),
        (((), (1,), (0,), (1, 2)), r"layers\[1\]\.after: 1 is not the index of another layer"),
        (((3,), (0,), (0,), (1, 2)), r"form a cycle"),
    ],
)
def test_bad_after_lists_are_refused_naming_the_layer(deps: tuple, match: str) -> None:
    base = _diamond(True)
    layers = tuple(replace(la, after=d) for la, d in zip(base.layers, deps, strict=True))
    with pytest.raises(ProfileError, match=match):
        replace(base, layers=layers)


def test_a_profile_file_with_a_malformed_after_names_the_field() -> None:
    data = _diamond(True).to_dict()
    data["layers"][1]["after"] = ["stem"]
    with pytest.raises(ProfileError, match=r"layers\[1\]\.after: expected a list of layer indices"):
        Profile.from_dict(data)
