"""TicTac's TAC: Timing-Aware Communication scheduling (paper 000, Hashemi et al., SysML 2019, Sec. 4).

Pure logic on a `ForwardGraph` and a time oracle (Sec. 3.1: ``Time(op)``, the seconds an op takes on a
resource dedicated to it: compute for a computation op, the transfer for a recv). The caller supplies
the times (`OpTimes`): reading traces and profiles belongs to the layer that owns them
(`geryon.threshold.tac_times`).

The worker DAG: every parameter is one recv op (the node(s) `ForwardGraph.sources` maps to it, roots
of the DAG: a recv's communication dependency is itself); every other node is a computation op. Then,
as in the paper:

- Algorithm 1 (UpdateProperties), for the outstanding recvs R:
  ``op.M = sum(Time(r) for r in op.dep & R)`` (Sec. 4.1 "Communication Time"; a recv's M is its own
  transfer time); for each recv ``P = 0``, ``M+ = inf``; then for each op not in R with
  ``D = op.dep & R``: ``|D| = 1`` adds ``Time(op)`` to that recv's P ("Directly-Dependent Compute
  Load"), ``|D| > 1`` lowers every ``r.M+`` in D to ``op.M`` ("Impending Communication Load").
- Sec. 4.3, Case 1, Eq. 2: A precedes B iff ``min(P_B, M_A) < min(P_A, M_B)``, i.e. iff doing A then
  B (``M_A + max(P_A, M_B) + P_B``) ends sooner than B then A. Case 2: when those are equal (all P
  are 0, say), the smaller M+ goes first.
- Algorithm 3 (TAC): R = every recv; while R is not empty: UpdateProperties, take the minimum of R
  under the comparator, remove it from R, give it the next priority number (0, 1, ...).

One correction, stated: Algorithm 3 as printed computes ``A = min(P_A, M_B)`` and
``B = min(P_B, M_A)`` and returns ``A < B``, which is Eq. 2 with A and B swapped; read literally it
schedules the second layer of a two-layer chain before the first (that layer's P is 0: nothing runs
on it alone). We follow Eq. 2, which is also what the authors' code does (xldrx/tictac, tictac/tac.py,
``_comparator``: ``a = min(op2.P, op1.M)``, ``b = min(op1.P, op2.M)``, op1 first iff ``a < b``).

Choices the paper leaves open, made deterministic (every task must compute the same order): the
"minimum wrt Comparator" is a scan of R in the tagger's consumption order (then parameter index) that
keeps the current best unless a later recv strictly precedes it, so full ties go to the earlier
consumed parameter; times are added exactly (floats as exact binary fractions), so a tie is a tie
whatever the order of the sum. The graph is the forward pass the tagger traces, not the training
step's (the backward ops depend on the loss, hence on every recv, and add nothing to P until R is
down to one recv).

Cost: one pass over the ops' distinct dependency sets per scheduled recv (ops with the same set are
one group: same D, same M), so O(N x G) set operations for N recvs and G groups.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from geryon.tagger.dag import Consumption, ForwardGraph, topological_order
from geryon.tagger.params import Parameter

FORMAT = "geryon.op_times"
FORMAT_VERSION = 1


class OpTimesError(ValueError):
    """Op times that do not fit the graph or are malformed; the message names the field."""


@dataclass(frozen=True)
class OpTimes:
    """TicTac's time oracle for one model (Sec. 3.1), by name so that it survives re-tracing.

    `compute_s`: graph node name -> seconds of that computation op (nodes not named take 0).
    `transfer_s`: parameter name -> seconds of its transfer (every parameter needs one).
    `source`: where the times come from (a measured trace, a FLOPs cost model, ...), for the output.
    """

    compute_s: Mapping[str, float]
    transfer_s: Mapping[str, float]
    source: str = "unknown"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what, values in (("compute_s", self.compute_s), ("transfer_s", self.transfer_s)):
            for name, t in values.items():
                if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
                    raise OpTimesError(f"op times {what}[{name!r}]: {t!r} is not a number of seconds >= 0")

    def resolve(self, params: Sequence[Parameter], graph: ForwardGraph) -> tuple[list[float], list[float]]:
        """Per-node compute seconds and per-parameter transfer seconds for this graph."""
        index = {node.name: i for i, node in enumerate(graph.nodes)}
        unknown = sorted(set(self.compute_s) - set(index))
        if unknown:
            names = ", ".join(unknown[:5])
            raise OpTimesError(f"op times compute_s: nodes not in the model's graph: {names}")
        missing = [p.name for p in params if p.name not in self.transfer_s]
        if missing:
            raise OpTimesError(f"op times transfer_s: no transfer time for {', '.join(missing[:5])}")
        compute = [0.0] * len(graph.nodes)
        for name, t in self.compute_s.items():
            compute[index[name]] = float(t)
        return compute, [float(self.transfer_s[p.name]) for p in params]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "source": self.source,
            "meta": dict(self.meta),
            "compute_s": dict(self.compute_s),
            "transfer_s": dict(self.transfer_s),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, data: Any) -> OpTimes:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise OpTimesError(f'op times: expected a JSON object with "format": "{FORMAT}"')
        if data.get("version") != FORMAT_VERSION:
            raise OpTimesError(f"op times version: expected {FORMAT_VERSION}, got {data.get('version')!r}")
        for key in ("compute_s", "transfer_s"):
            if not isinstance(data.get(key), dict):
                raise OpTimesError(f"op times {key}: expected an object of name -> seconds")
        source = data.get("source", "unknown")
        meta = data.get("meta", {})
        if not isinstance(source, str) or not isinstance(meta, dict):
            raise OpTimesError("op times: source must be a string and meta an object")
        return cls(dict(data["compute_s"]), dict(data["transfer_s"]), source, meta)

    @classmethod
    def load(cls, path: str | Path) -> OpTimes:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise OpTimesError(f"op times {str(path)!r}: {e.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise OpTimesError(f"op times {str(path)!r}: not JSON ({e.msg}, line {e.lineno})") from None
        return cls.from_dict(data)


def _exact(values: Sequence[float]) -> list[int]:
    """The values as integers on one common binary scale: exact sums, so ties are exact."""
    fractions = [Fraction(v) for v in values]
    scale = math.lcm(1, *(f.denominator for f in fractions))
    return [int(f * scale) for f in fractions]


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _precedes(a: int, b: int, p_load: Sequence[int], m: Sequence[int], m_plus: Sequence[float]) -> bool:
    """Recv a goes before recv b: Sec. 4.3, Eq. 2 (Case 1), then M+ (Case 2); see the module docstring
    on Algorithm 3's printed comparator. `m` is a recv's own M, its transfer time (Algorithm 1, line 3)."""
    x = min(p_load[b], m[a])
    y = min(p_load[a], m[b])
    if x != y:
        return x < y
    return m_plus[a] < m_plus[b]


def tac_order(
    graph: ForwardGraph,
    compute_s: Sequence[float],
    transfer_s: Sequence[float],
    scan_order: Sequence[int] | None = None,
) -> list[int]:
    """Parameters in TAC priority order (Algorithm 3): position k is priority number k.

    `compute_s` is per graph node (recv nodes' entries are ignored: their time is the transfer),
    `transfer_s` per parameter. `scan_order` is the order ties keep (default: parameter index; the
    tagger passes its consumption order).
    """
    nodes = graph.nodes
    n = graph.num_params
    if len(compute_s) != len(nodes) or len(transfer_s) != n:
        raise ValueError("tac_order: one compute time per node and one transfer time per parameter")
    if any(not (math.isfinite(t) and t >= 0) for t in [*compute_s, *transfer_s]):
        raise ValueError("tac_order: times must be finite numbers of seconds >= 0")
    scan = list(range(n)) if scan_order is None else list(scan_order)
    if sorted(scan) != list(range(n)):
        raise ValueError("tac_order: scan_order must list every parameter once")
    exact = _exact([*compute_s, *transfer_s])
    comp, trans = exact[: len(nodes)], exact[len(nodes) :]

    # FindDependencies (Algorithms 2-3, line 2; Sec. 4.1 "Communication Dependency"): op.dep, the recvs
    # an op depends on directly or transitively, as a bitset over parameters.
    deps = [0] * len(nodes)
    for i in topological_order(nodes):
        param = graph.sources.get(i)
        if param is not None:
            deps[i] = 1 << param  # a recv: a root of the worker DAG, depending on itself
            continue
        bits = 0
        for src in nodes[i].inputs:
            bits |= deps[src]
        deps[i] = bits
    # Computation ops with the same dep share D and M in every round: one group, their times summed.
    load: dict[int, int] = {}
    for i, mask in enumerate(deps):
        if mask and i not in graph.sources:
            load[mask] = load.get(mask, 0) + comp[i]
    group_d = list(load)  # D = op.dep & R, kept current as R shrinks
    group_load = [load[m] for m in group_d]  # sum of Time(op) over the group
    group_m = [sum(trans[r] for r in _bits(m)) for m in group_d]  # op.M = sum of Time(r), r in D

    outstanding = (1 << n) - 1
    order: list[int] = []
    while outstanding:
        # Algorithm 1 (UpdateProperties) for R = outstanding.
        p_load = [0] * n
        m_plus: list[float] = [math.inf] * n
        multi: list[tuple[int, int]] = []
        for g, d in enumerate(group_d):
            if d == 0:
                continue
            if d & (d - 1) == 0:  # |D| = 1: only this recv blocks the op (line 12)
                p_load[d.bit_length() - 1] += group_load[g]
            else:  # |D| > 1 (line 15): r.M+ = min over such ops of op.M, found in increasing M
                multi.append((group_m[g], g))
        multi.sort()
        unset = outstanding
        for m, g in multi:
            fresh = group_d[g] & unset
            if fresh:
                for r in _bits(fresh):
                    m_plus[r] = m
                unset &= ~fresh
                if not unset:
                    break

        best = -1
        for r in scan:
            if outstanding >> r & 1 and (best < 0 or _precedes(r, best, p_load, trans, m_plus)):
                best = r
        # Algorithm 3, lines 17-19: remove it from R, priority = count.
        order.append(best)
        bit = 1 << best
        outstanding &= ~bit
        for g, d in enumerate(group_d):
            if d & bit:
                group_d[g] = d & ~bit
                group_m[g] -= trans[best]
    return order


def tac_urgency(order: Sequence[int], consumption: Consumption) -> list[float]:
    """TAC's order as urgencies: ``1 - k/N`` for the k-th (1-based) consumed parameter in that order.

    The `layer`/`tic` form ``1 - l/L``: values in [0, 1 - 1/N], higher first, distinct per parameter
    (TAC gives every recv its own priority number). Parameters the forward pass never reads get 0.
    """
    n = len(order)
    urgency = [0.0] * n
    k = 0
    for p in order:
        if consumption.consumer[p] is not None:
            k += 1
            urgency[p] = 1.0 - k / n
    return urgency


def tac(
    params: Sequence[Parameter], graph: ForwardGraph, consumption: Consumption, times: OpTimes
) -> tuple[list[int], list[float]]:
    """TAC's order and urgencies for a traced model under `times` (names resolved on `graph`)."""
    compute, transfer = times.resolve(params, graph)
    order = tac_order(graph, compute, transfer, consumption.order)
    return order, tac_urgency(order, consumption)
