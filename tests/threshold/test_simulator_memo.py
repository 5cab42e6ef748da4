"""The allocation memo of end-host and hybrid (sim_rates.Rates._settle_memo) gives what allocating at
every settle gives."""

from __future__ import annotations

import pytest

import geryon.threshold.sim_rates as rates
from geryon.threshold.profile import synthetic
from geryon.threshold.simknobs import Background, PsCosts
from geryon.threshold.simulator import simulate
from tests.threshold.test_simulator import vgg19_like
from tests.threshold.test_simulator_cohost import uneven
from tests.threshold.test_simulator_knobs import off_and_on


def both(monkeypatch, profile, mode="end-host", **kw):
    runs = off_and_on(monkeypatch, "memo_allocations", lambda: simulate(profile, mode=mode, **kw))
    (old, old_calls), (new, new_calls) = runs
    return old, new, old_calls, new_calls


def assert_same(old, new) -> None:
    assert new.iteration_ends == pytest.approx(old.iteration_ends, rel=1e-9, abs=0)
    assert new.first_iteration_s == pytest.approx(old.first_iteration_s, rel=1e-9, abs=0)
    if new.mode == "hybrid":
        # The memo advances a connection's bytes only when its rate changes (the old path at every
        # settle), so they round differently: a chunk boundary a rounding apart can add a finish event
        # (VGG-19 16 x 4 co-hosted: 5303 vs 5298, iteration ends equal to the last digit).
        assert new.events == pytest.approx(old.events, rel=2e-3)
    else:
        assert new.events == old.events
    assert set(new.link_bytes) == set(old.link_bytes)
    for port, moved in new.link_bytes.items():
        assert moved == pytest.approx(old.link_bytes[port], rel=1e-9, abs=1e-6)
    if old.spans is not None:
        assert new.spans is not None

        def key(s):
            return (s.host, s.track, s.name, s.args["iteration"])

        a, b = sorted(old.spans, key=key), sorted(new.spans, key=key)
        assert [key(s) for s in a] == [key(s) for s in b]
        assert [s.start_s for s in b] == pytest.approx([s.start_s for s in a], rel=1e-9, abs=1e-12)
        assert [s.end_s for s in b] == pytest.approx([s.end_s for s in a], rel=1e-9, abs=1e-12)


SHAPES = [
    # (workers, num_ps, colocate, symmetric)
    (12, 4, True, True),  # co-hosted groups (weighted flows)
    (8, 8, True, True),  # co-hosted, no two PSes alike: every host
    (12, 4, True, False),
    (6, 3, False, True),  # separate hosts, one representative worker (the quiet gaps)
    (6, 3, False, False),
    (3, 3, False, True),
]
KNOBS = [
    {},
    {"barrier": True},
    {"partition": False},
    {"thresholds": (0.3, 0.7)},
    {"ps_costs": PsCosts(aggregate_s_per_byte=2e-9, update_s_per_byte=1e-9, per_message_s=1e-4)},
    {"ps_costs": PsCosts(per_slice_s=3e-4)},
    {"background": (Background(3e7, "all", "both"),)},
    {"endhost_gap_s": 0.0},
    {"endhost_gap_s": 2e-3},
    {"endhost_scope": "sender"},
    {"slice_bytes": None},
    {"trace": True},
    {"iterations": 4},
]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(k) or "defaults")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_memo_equals_allocating_every_time(monkeypatch, shape, knobs):
    workers, num_ps, colocate, symmetric = shape
    kw = {
        "workers": workers,
        "num_ps": num_ps,
        "bandwidth_bps": 1e8,
        "slice_bytes": 8000,
        "colocate": colocate,
        "symmetric": symmetric,
        "iterations": 3,
        **knobs,
    }
    old, new, old_calls, new_calls = both(monkeypatch, uneven(), **kw)
    assert_same(old, new)
    assert new_calls <= old_calls


HYBRID_KNOBS = [
    {},
    {"barrier": True},
    {"partition": False},
    {"thresholds": (0.3, 0.7)},
    {"ps_costs": PsCosts(aggregate_s_per_byte=2e-9, update_s_per_byte=1e-9, per_message_s=1e-4)},
    {"background": (Background(3e7, "all", "both"),)},
    {"sender_order": "nic"},
    {"sender_order": "connection"},
    {"push_order": "urgency"},
    {"push_order": "arrival"},
    {"chunk_bytes": 4096},
    {"trace": True},
]


@pytest.mark.parametrize("knobs", HYBRID_KNOBS, ids=lambda k: "-".join(k) or "defaults")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_hybrid_memo_equals_allocating_every_time(monkeypatch, shape, knobs):
    workers, num_ps, colocate, symmetric = shape
    kw = {
        "workers": workers,
        "num_ps": num_ps,
        "bandwidth_bps": 1e8,
        "slice_bytes": 8000,
        "colocate": colocate,
        "symmetric": symmetric,
        "iterations": 3,
        **knobs,
    }
    old, new, old_calls, new_calls = both(monkeypatch, uneven(), mode="hybrid", **kw)
    assert_same(old, new)
    if colocate:
        assert new_calls <= old_calls
    else:  # hybrid keeps the memo to co-hosted runs: separate hosts allocate at every settle
        assert new_calls == old_calls and new.iteration_ends == old.iteration_ends


@pytest.mark.parametrize("mode", ["end-host", "hybrid"])
@pytest.mark.parametrize("colocate", [True, False], ids=["cohost", "separate"])
def test_memo_on_vgg19_shapes(monkeypatch, colocate, mode):
    kw = {"workers": 16, "num_ps": 4, "bandwidth_bps": 10e9, "slice_bytes": 4 << 20, "colocate": colocate}
    old, new, old_calls, new_calls = both(monkeypatch, vgg19_like(), mode=mode, **kw)
    assert_same(old, new)
    assert new_calls <= old_calls
    if colocate and mode == "end-host":  # the gap's leave-and-rejoin revisits allocations: most hit
        assert new_calls < old_calls / 2


def test_memo_is_bounded(monkeypatch):
    # A full memo starts again; the result does not change.
    monkeypatch.setattr(rates.Rates, "MEMO_MAX", 3)
    p = synthetic([300_000, 40_000, 2_500_000, 800_000], [2e-3, 1e-3, 4e-3, 1e-3], [3e-3, 2e-3, 6e-3, 2e-3])
    old, new, _, _ = both(
        monkeypatch, p, workers=8, num_ps=4, bandwidth_bps=1e9, colocate=True, slice_bytes=100_000
    )
    assert_same(old, new)


@pytest.mark.parametrize(
    "knobs",
    [{}, {"barrier": True}, {"thresholds": (0.3, 0.7)}, {"background": (Background(3e7, "all", "both"),)}]
    + [{"sender_order": o} for o in ("nic", "connection")],
    ids=lambda k: "-".join(k) or "defaults",
)
@pytest.mark.parametrize(
    ("mode", "shape"),
    [("end-host", shape) for shape in SHAPES[:4]] + [("hybrid", shape) for shape in SHAPES if shape[2]],
    ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)),
)
def test_allocations_on_arrays_equal_allocating_every_time(monkeypatch, shape, mode, knobs):
    # Every memo miss on numpy arrays (network.allocate_arrays; by default only from 128 flows, the
    # 1024 x 64 co-hosted groups) against the old path's network.allocate at every settle.
    monkeypatch.setattr(rates, "_ARRAY_FLOWS", 0)
    workers, num_ps, colocate, symmetric = shape
    kw = {
        "workers": workers,
        "num_ps": num_ps,
        "bandwidth_bps": 1e8,
        "slice_bytes": 8000,
        "colocate": colocate,
        "symmetric": symmetric,
        "iterations": 3,
        **knobs,
    }
    old, new, _, new_calls = both(monkeypatch, uneven(), mode=mode, **kw)
    assert_same(old, new)
    assert new_calls == 0  # every miss went to allocate_arrays (the counter counts network.allocate)
