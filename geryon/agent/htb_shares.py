"""HTB quanta for classes that share a link by weight: one rule for the host agent's trees
(geryon.agent.linux_driver, ETS classes by `bandwidth`) and the software switch's
(geryon.fabric.render.linux, DWRR classes by `weight`). Pure: no pyroute2, so rendering imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K")

# HTB sends at least one packet per turn even when the packet exceeds the class's quantum, so a quantum
# below the packet size makes every class equal. The lightest class gets the largest packet
# segmentation offloads hand HTB (64 KiB), so the weights hold with GSO on too.
LIGHTEST_QUANTUM = 64 * 1024


def weighted_quanta(weights: Mapping[K, int]) -> dict[K, int]:
    """{class: HTB quantum in bytes}, proportional to the (positive) weights, the lightest class
    LIGHTEST_QUANTUM; {} when the weights are all equal (HTB's default quantum already shares equally)."""
    if len(set(weights.values())) <= 1:
        return {}
    lightest = min(weights.values())
    return {k: round(LIGHTEST_QUANTUM * w / lightest) for k, w in weights.items()}
