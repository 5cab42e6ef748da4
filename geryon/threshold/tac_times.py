"""TicTac's time oracle (paper 000, Sec. 3.1 and 5) from a profile, for the tagger's TAC.

TAC (`geryon.tagger.tac`) needs ``Time(op)`` for every computation op of the traced graph and for
every parameter's transfer. A profile holds what we know: per compute layer the forward seconds,
either measured (an in-cluster TensorFlow profiler trace, `geryon.threshold.incluster`, or the
local profiler: `Profile.source` says "incluster:..." or "measured:...") or from a cost model (FLOPs
over a device throughput, `profiles.profile_from_model`: "flops:..."). `OpTimes.source` names which.

Mapping, stated: a profile layer's forward time (its parameter-free layers folded in, as the profile
does) goes to the first graph op that consumes one of its parameters (the conv or matmul); every
other op takes 0. A transfer takes ``bytes x 8 / bandwidth``: the paper's oracle times an op "assuming
that the resource is dedicated to the op under consideration" (Sec. 3.1).
"""

from __future__ import annotations

from dataclasses import replace

from geryon.tagger.tac import OpTimes
from geryon.tagger.tagging import Tagging
from geryon.threshold.profile import ParamSpec, Profile, ProfileError


def op_times_from_profile(profile: Profile, tagging: Tagging, bandwidth_bps: float) -> OpTimes:
    """TAC's op times for `tagging`'s graph from `profile`'s layer times and `bandwidth_bps`."""
    if not (isinstance(bandwidth_bps, int | float) and bandwidth_bps > 0):
        raise ProfileError(f"bandwidth_bps: expected a positive number of bit/s, got {bandwidth_bps!r}")
    first = first_consumed(profile, tagging)
    compute: dict[str, float] = {}
    for layer, i in first.items():
        op = tagging.consumer_ops[i]
        assert op is not None
        compute[op] = compute.get(op, 0.0) + profile.layers[layer].forward_s
    transfer = {p.name: p.bytes * 8 / bandwidth_bps for p in tagging.params}
    kind = "measured" if profile.source.startswith(("measured", "incluster")) else "cost model"
    return OpTimes(
        compute,
        transfer,
        f"profile {profile.source} ({kind}), transfers at {bandwidth_bps:g} bit/s",
        {"model": profile.model, "batch_size": profile.batch_size, "bandwidth_bps": bandwidth_bps},
    )


def first_consumed(profile: Profile, tagging: Tagging) -> dict[int, int]:
    """Profile layer -> its earliest-consumed tagger parameter (index into `tagging.params`); layers
    none of whose parameters the forward pass consumes are left out. The op that consumes that
    parameter stands for the layer (here and in geryon.threshold.forward_dag)."""
    by_name = {p.name: i for i, p in enumerate(tagging.params)}
    missing = [q.name for q in profile.params if q.name not in by_name]
    if missing:
        names = ", ".join(missing[:5])
        raise ProfileError(f"profile {profile.model!r}: parameters the tagging lacks: {names}")
    consumption = tagging.consumption
    position = {p: k for k, p in enumerate(consumption.order)}
    first: dict[int, int] = {}
    for q in profile.params:
        i = by_name[q.name]
        if consumption.consumer[i] is None:
            continue
        if q.layer not in first or position[i] < position[first[q.layer]]:
            first[q.layer] = i
    return first


def with_urgency(profile: Profile, tagging: Tagging) -> Profile:
    """`profile` with its parameters' urgencies (and urgency function) taken from `tagging`."""
    by_name = {p.name: u for p, u in zip(tagging.params, tagging.urgency, strict=True)}
    params = tuple(
        ParamSpec(q.name, q.shape, q.element_size, by_name[q.name], q.layer) for q in profile.params
    )
    return replace(profile, params=params, urgency_function=tagging.urgency_function)


def tac_profile(profile: Profile, tagging: Tagging, bandwidth_bps: float) -> tuple[Profile, OpTimes]:
    """`profile` re-ranked by TAC, with op times from the profile itself, and those times."""
    times = op_times_from_profile(profile, tagging, bandwidth_bps)
    return with_urgency(profile, tagging.with_tac(times)), times
