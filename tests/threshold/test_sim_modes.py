"""The simulator's modes as policies: each mode's fields, the parser, and its error for other values."""

from __future__ import annotations

import pytest

from geryon.threshold import simulator
from geryon.threshold.profile import synthetic
from geryon.threshold.sim_modes import MODES, POLICIES, mode_policy


def test_every_mode_has_one_policy_named_after_it():
    assert MODES == ("fifo", "end-host", "network", "hybrid", "ideal")
    assert simulator.MODES is MODES
    for name in MODES:
        assert mode_policy(name) is POLICIES[name]
        assert POLICIES[name].name == name


@pytest.mark.parametrize(
    ("mode", "fields"),
    [
        # interleaves, per_class, by_urgency, preempts, takes_chunk, takes_gap
        ("fifo", (True, False, False, False, False, False)),
        ("end-host", (False, False, True, False, False, True)),
        ("network", (True, True, False, False, False, False)),
        ("hybrid", (False, True, True, True, True, False)),
        ("ideal", (False, False, True, True, False, False)),
    ],
)
def test_policy_flags(mode, fields):
    p = mode_policy(mode)
    assert (p.interleaves, p.per_class, p.by_urgency, p.preempts, p.takes_chunk, p.takes_gap) == fields


@pytest.mark.parametrize(
    ("mode", "nic", "switch", "background"),
    [
        ("fifo", None, None, None),
        ("end-host", "rank", None, None),  # only the sender orders; background shares fairly
        ("network", "class", "class", "class"),
        ("hybrid", "class", "class", "class"),
        ("ideal", "rank", "rank", "rank"),
    ],
)
def test_port_priorities(mode, nic, switch, background):
    p = mode_policy(mode)
    assert (p.nic_priority, p.switch_priority, p.background_priority) == (nic, switch, background)


def test_shares_only_interleaving_modes_with_interleave_on():
    assert [m for m in MODES if mode_policy(m).shares(True)] == ["fifo", "network"]
    assert not any(mode_policy(m).shares(False) for m in MODES)


def test_memo_runs_for_end_host_always_and_hybrid_co_hosted():
    assert [m for m in MODES if mode_policy(m).uses_memo(False)] == ["end-host"]
    assert [m for m in MODES if mode_policy(m).uses_memo(True)] == ["end-host", "hybrid"]


@pytest.mark.parametrize("bad", ["bogus", "FIFO", "", None, ["fifo"], 3])
def test_unknown_mode_names_the_allowed_ones(bad):
    message = f"mode: unknown mode {bad!r}; allowed: fifo, end-host, network, hybrid, ideal"
    with pytest.raises(ValueError) as e:
        mode_policy(bad)
    assert str(e.value) == message
    p = synthetic([4000], [1e-3], [1e-3])
    with pytest.raises(ValueError) as e:
        simulator.simulate(p, workers=1, num_ps=1, bandwidth_bps=1e9, mode=bad)
    assert str(e.value) == message


def test_policies_are_frozen():
    with pytest.raises(AttributeError):
        mode_policy("fifo").per_class = True  # type: ignore[misc]
