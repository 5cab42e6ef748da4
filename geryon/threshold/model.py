"""The paper's iteration-time model of one PS and one worker (Geryon, section II-C, eqs. 1-6).

A chain of L layers; the worker pulls every layer's parameters over one link, one layer after the
other in a given transfer order, runs the forward pass in layer order (layer l starts once layer l-1
is done and its own parameters have arrived), runs the backward pass in reverse layer order, and
pushes each layer's gradients as soon as they are computed, again one at a time over the link:

    t_p^l  = sum of tau_p over the layers pulled up to and including l            (pull l done)
    t_ff^0 = t_p^0 + tau_f^0;   t_ff^l = max(t_ff^(l-1), t_p^l) + tau_f^l          (forward l done)
    t_b^l  = t_ff^(L-1) + sum_{i >= l} tau_b^i                                     (backward l done)
    t_bf^(L-1) = t_b^(L-1) + tau_g^(L-1);  t_bf^l = max(t_bf^(l+1), t_b^l) + tau_g^l   (push l done)
    T = t_bf^0

with tau_p^l = tau_g^l = bytes_l * 8 / bandwidth. The paper's printed eq. 4 omits tau_b^(L-1) in
t_bf^(L-1); here it is included through t_b^(L-1), as the design says. Layers are indexed from 0 in
forward order; every per-layer tuple of the result is indexed by layer, not by transfer position.

Pure Python and allocation-light: the threshold search and the benchmarks call it inside loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from geryon.threshold.profile import Profile


@dataclass(frozen=True)
class ModelResult:
    iteration_s: float  # T = t_bf of layer 0
    comm_s: float  # N: every pull plus every push, back to back on the link
    compute_s: float  # C: every forward plus every backward
    alpha: float  # TicTac's overlap coefficient (N + C - T) / min(N, C), in [0, 1]
    t_p: tuple[float, ...]  # per layer: its pull completes
    t_ff: tuple[float, ...]  # per layer: its forward compute completes
    t_b: tuple[float, ...]  # per layer: its backward compute completes
    t_bf: tuple[float, ...]  # per layer: its gradient push completes
    order: tuple[int, ...]  # the transfer order used: order[j] = layer pulled j-th

    @property
    def utilization(self) -> float:
        """Share of the iteration the worker computes: C / T."""
        return self.compute_s / self.iteration_s if self.iteration_s > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration_s": self.iteration_s,
            "comm_s": self.comm_s,
            "compute_s": self.compute_s,
            "alpha": self.alpha,
            "utilization": self.utilization,
            "order": list(self.order),
            "t_p": list(self.t_p),
            "t_ff": list(self.t_ff),
            "t_b": list(self.t_b),
            "t_bf": list(self.t_bf),
        }


def iteration_time(profile: Profile, order: Sequence[int], bandwidth_bps: float) -> ModelResult:
    """Iteration time of `profile` when layers are pulled in `order` over a link of `bandwidth_bps`."""
    forward = [layer.forward_s for layer in profile.layers]
    backward = [layer.backward_s for layer in profile.layers]
    return chain_iteration_time(profile.layer_bytes(), forward, backward, order, bandwidth_bps)


def chain_iteration_time(
    layer_bytes: Sequence[int],
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    order: Sequence[int],
    bandwidth_bps: float,
) -> ModelResult:
    """The model on plain per-layer lists (what `iteration_time` reads from a profile)."""
    n = len(layer_bytes)
    if not (len(forward_s) == len(backward_s) == n):
        raise ValueError(
            f"layer_bytes, forward_s and backward_s must have the same length, got "
            f"{n}, {len(forward_s)}, {len(backward_s)}"
        )
    if n == 0:
        raise ValueError("layer_bytes: the model needs at least one layer")
    check_bandwidth(bandwidth_bps)
    _check_order(order, n)

    tau = [b * 8.0 / bandwidth_bps for b in layer_bytes]  # tau_p = tau_g per layer

    # Eq. 1: pulls are serialized on the link in transfer order.
    t_p = [0.0] * n
    clock = 0.0
    for layer in order:
        clock += tau[layer]
        t_p[layer] = clock

    # Eq. 2: forward in layer order, each layer waits for its predecessor and its own parameters.
    t_ff = [0.0] * n
    done = 0.0
    for layer in range(n):
        done = max(done, t_p[layer]) + forward_s[layer]
        t_ff[layer] = done

    # Eq. 3: backward in reverse layer order, starting when the forward pass ends.
    t_b = [0.0] * n
    done = t_ff[-1]
    for layer in range(n - 1, -1, -1):
        done += backward_s[layer]
        t_b[layer] = done

    # Eqs. 4-5: each push waits for its gradient and for the previous push on the link.
    t_bf = [0.0] * n
    done = 0.0
    for layer in range(n - 1, -1, -1):
        done = max(done, t_b[layer]) + tau[layer]
        t_bf[layer] = done

    total = t_bf[0]  # eq. 6
    comm = 2.0 * sum(tau)
    compute = sum(forward_s) + sum(backward_s)
    return ModelResult(
        iteration_s=total,
        comm_s=comm,
        compute_s=compute,
        alpha=overlap_coefficient(comm, compute, total),
        t_p=tuple(t_p),
        t_ff=tuple(t_ff),
        t_b=tuple(t_b),
        t_bf=tuple(t_bf),
        order=tuple(order),
    )


def check_bandwidth(bandwidth_bps: Any) -> float:
    """A link rate in bits per second: finite and above 0, else ValueError naming bandwidth_bps."""
    if (
        isinstance(bandwidth_bps, bool)
        or not isinstance(bandwidth_bps, int | float)
        or not math.isfinite(bandwidth_bps)
        or bandwidth_bps <= 0
    ):
        raise ValueError(
            f"bandwidth_bps: expected a finite number of bits per second > 0, got {bandwidth_bps!r}"
        )
    return float(bandwidth_bps)


def overlap_coefficient(comm_s: float, compute_s: float, iteration_s: float) -> float:
    """TicTac's alpha = (N + C - T) / min(N, C): 1 when the shorter of N and C hides entirely.

    When N or C is zero there is nothing to overlap and T = max(N, C) is already the best possible,
    so alpha is 1. Clamped to [0, 1] against float rounding at the bounds.
    """
    shorter = min(comm_s, compute_s)
    if shorter <= 0:
        return 1.0
    return min(1.0, max(0.0, (comm_s + compute_s - iteration_s) / shorter))


def in_order(profile: Profile) -> list[int]:
    """Pull layers in forward order: the order the forward pass needs them (the paper's ideal)."""
    return list(range(profile.num_layers))


def reverse_order(profile: Profile) -> list[int]:
    """Pull layers last-first, the order their gradients arrive in (the paper's bad case, Fig. 4)."""
    return list(range(profile.num_layers - 1, -1, -1))


def _check_order(order: Sequence[int], n: int) -> None:
    if len(order) != n or sorted(order) != list(range(n)):
        shown = list(order) if len(order) <= 20 else f"{len(order)} entries"
        raise ValueError(f"order: expected a permutation of the layer indices 0..{n - 1}, got {shown}")
