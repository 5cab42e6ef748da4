"""Urgency functions: how soon the next forward pass needs each parameter, as a number in [0, 1].

Higher is more urgent. Pluggable: `URGENCY_FUNCTIONS` maps a name to a function of the parameters and
their consumption; register more with `register`. Every function must be deterministic, because every
task of a job computes the map_table independently and all must agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from geryon.tagger.dag import Consumption
from geryon.tagger.params import Parameter

UrgencyFunction = Callable[[Sequence[Parameter], Consumption], list[float]]


def layer_urgency(params: Sequence[Parameter], consumption: Consumption) -> list[float]:
    """The paper's urgency (footnote 1): ``1 - l/L`` for a parameter of layer ``l`` of ``L``.

    Layers are numbered 1..L by the consumption position of their first-consumed parameter, so a layer
    called late but created early (or a shared layer called twice) gets the position of its first use.
    All parameters of a layer, and all shards of a variable, share its urgency. Parameters the forward
    pass never reads get 0.
    """
    layer_rank: dict[str, int] = {}
    for p in consumption.order:
        if consumption.consumer[p] is not None:
            layer_rank.setdefault(params[p].layer, len(layer_rank) + 1)
    total = len(layer_rank)
    return [1.0 - layer_rank[param.layer] / total if param.layer in layer_rank else 0.0 for param in params]


def tic_urgency(params: Sequence[Parameter], consumption: Consumption) -> list[float]:
    """TicTac's TIC (Timing-Independent Communication scheduling, paper 000, section 4).

    TIC ranks a transfer by M, the fewest transfers that any computation needing it must wait for
    (itself included); lower M goes first. Normalized as ``1 - M/N`` over the N parameters, which is the
    paper's ``1 - l/L`` form with l = M: a chain gives the same order as `layer`, while branches and
    fan-in (a concat of towers, an add of a shortcut) are ranked by what they block.
    """
    n = len(params)
    return [0.0 if m is None else 1.0 - m / n for m in consumption.tic_deps]


class TimingRequired(ValueError):
    """An urgency function that needs op times (TicTac's time oracle) was asked for without them."""


def tac_urgency(params: Sequence[Parameter], consumption: Consumption) -> list[float]:
    """TicTac's TAC (Timing-Aware Communication scheduling, paper 000, Sec. 4.3, Algorithm 3).

    TAC needs the graph and a time per op and per transfer, which an urgency function does not get:
    the tagging computes it (`Tagging.with_tac(times)`, `geryon.tagger.tac`); asked for here, it says so.
    """
    raise TimingRequired(
        "urgency 'tac' needs op times (TicTac's time oracle: seconds per op and per transfer): "
        "pass them (geryon tag --urgency tac --op-times FILE; Tagging.with_tac(times))"
    )


URGENCY_FUNCTIONS: dict[str, UrgencyFunction] = {
    "layer": layer_urgency,
    "tic": tic_urgency,
    "tac": tac_urgency,
}


def register(name: str, fn: UrgencyFunction) -> None:
    """Add an urgency function under `name` (e.g. from a plugin); names are unique."""
    if name in URGENCY_FUNCTIONS:
        raise ValueError(f"urgency function {name!r} is already registered")
    URGENCY_FUNCTIONS[name] = fn


def compute_urgency(name: str, params: Sequence[Parameter], consumption: Consumption) -> list[float]:
    try:
        fn = URGENCY_FUNCTIONS[name]
    except KeyError:
        allowed = ", ".join(sorted(URGENCY_FUNCTIONS))
        raise ValueError(f"unknown urgency function {name!r}; allowed: {allowed}") from None
    values = fn(params, consumption)
    if len(values) != len(params) or any(not 0.0 <= u <= 1.0 for u in values):
        raise ValueError(f"urgency function {name!r} must return one value in [0, 1] per parameter")
    return values
