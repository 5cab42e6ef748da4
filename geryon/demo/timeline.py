"""When each parameter arrives at a worker within one iteration: rows for the arrival timeline chart.

`arrivals` reads a simulator timeline (`simulate(..., trace=True).spans`) and gives one row per
parameter of the profile, in consumption order (forward layer order, then the profile's order within
a layer), for one worker and one iteration:

    param, layer, layer_name, class, bytes,
    first_byte_s  when the first of its shards' pulls got bandwidth (None: nothing crossed the network)
    arrival_s     when the last of its shards arrived at the worker
    forward_start_s  when the layer that consumes it started its forward pass on that worker

Times are seconds from the iteration's start: the earliest pull to (or compute on) that worker in that
iteration, which with the barrier is when the previous iteration's gradients were all aggregated and
the pulls were released. A layer's forward cannot start before its parameters arrived, so
forward_start_s - arrival_s is the slack; 0 means that parameter held the layer up.

A shard pulled from a PS on the worker's own host (colocated) is a free memory copy with no span: a
parameter made only of such shards arrives at 0. Pure: no simulation or drawing here.

`class_order` says how the arrivals inside each class are ordered against consumption (issue 14: the
paper's Geryon serves a class in the order its transfers became ready, the hybrid most urgent first):
per class, the parameters in the order they arrived and Kendall's tau between that order and the
consumption order (1: every one arrived before every later-consumed one; about 0: unrelated).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from geryon.threshold.profile import Profile
from geryon.threshold.trace import Span


def arrivals(
    spans: Iterable[Span], profile: Profile, *, iteration: int | None = None, worker: int = 0
) -> list[dict[str, Any]]:
    """Per-parameter arrival rows (see the module docstring) for `worker` in `iteration`.

    `iteration=None` takes the last iteration in the spans (the steady state). Raises ValueError when
    the spans hold no compute for that worker and iteration (not a trace of this profile, or
    simulated without trace=True).
    """
    mine = [s for s in spans if s.args.get("worker") == worker]
    iterations = {s.args.get("iteration") for s in mine if s.category == "forward"}
    if not iterations:
        raise ValueError(f"spans: no forward pass of worker {worker} (simulate with trace=True)")
    it = max(i for i in iterations if isinstance(i, int)) if iteration is None else iteration
    if it not in iterations:
        raise ValueError(
            f"iteration: expected one of {sorted(i for i in iterations if isinstance(i, int))}, got {it!r}"
        )
    pulls = [s for s in mine if s.category == "pull" and s.args.get("iteration") == it]
    forward = {
        s.args["layer"]: s.start_s for s in mine if s.category == "forward" and s.args.get("iteration") == it
    }
    start = min([s.start_s for s in pulls] + list(forward.values()))
    by_param: dict[str, list[Span]] = {}
    for s in pulls:
        by_param.setdefault(str(s.args.get("param")), []).append(s)
    order = sorted(range(len(profile.params)), key=lambda i: (profile.params[i].layer, i))
    rows = []
    for i in order:
        p = profile.params[i]
        got = by_param.get(p.name, [])
        classes = {s.args.get("class") for s in got}
        rows.append(
            {
                "param": p.name,
                "layer": p.layer,
                "layer_name": profile.layers[p.layer].name,
                "class": classes.pop() if len(classes) == 1 else None,
                "bytes": p.bytes,
                "first_byte_s": min(s.start_s for s in got) - start if got else None,
                "arrival_s": max(s.end_s for s in got) - start if got else 0.0,
                "forward_start_s": forward[p.layer] - start,
            }
        )
    return rows


def class_order(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per class of `rows` (arrivals' rows, consumption order): {"arrival_order": [row index, ...] in
    the order they arrived, "tau": Kendall's tau of arrival against consumption, None for fewer than
    2 parameters}. Only parameters that crossed the network count; equal arrival times are neither
    concordant nor discordant (tau-a over all pairs)."""
    by_class: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        if r.get("first_byte_s") is not None and isinstance(r.get("class"), int):
            by_class.setdefault(r["class"], []).append(i)
    out = {}
    for cls, idx in sorted(by_class.items()):
        ordered = sorted(idx, key=lambda i: (rows[i]["arrival_s"], i))
        out[cls] = {"arrival_order": ordered, "tau": _kendall_tau(idx, [rows[i]["arrival_s"] for i in idx])}
    return out


def _kendall_tau(ranks: list[int], times: list[float]) -> float | None:
    n = len(ranks)
    if n < 2:
        return None

    def sign(x: float) -> int:
        return (x > 0) - (x < 0)

    score = sum(
        sign(ranks[b] - ranks[a]) * sign(times[b] - times[a]) for a in range(n) for b in range(a + 1, n)
    )
    return score / (n * (n - 1) / 2)
