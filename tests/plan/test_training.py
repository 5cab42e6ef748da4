"""`geryon plan training`'s search (geryon.plan.training): its choices, reasons and errors.

The real simulator on small synthetic models, and a scripted simulator where a test needs exact
times to check a choice at the tolerance's edge.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from geryon.plan.training import MODES, plan_training, to_text
from geryon.threshold.profile import synthetic

MiB = 1 << 20


def network_bound():
    # A big layer last (the least urgent), small urgent ones first: priority and slicing matter.
    return synthetic(
        [4 * 20000, 4 * 20000, 4 * 400000, 4 * 2_000_000],
        [1e-3, 1e-3, 2e-3, 2e-3],
        [2e-3, 2e-3, 4e-3, 4e-3],
    )


def test_the_recommended_point_is_the_fastest_explored_up_to_the_tolerance() -> None:
    plan = plan_training(network_bound(), workers=4, num_ps=2, bandwidth_bps=1e9)
    best = min(p.iteration_s for p in plan.explored)
    rec = plan.recommended
    assert rec.iteration_s <= best * (1 + 0.005) ** 2  # the slice and class rules each allow 0.5%
    assert set(plan.modes) == {name for name, _, _ in MODES} | {"bound"}
    # No mode below the bound; Geryon's settings at least as fast as the baselines in this model.
    assert all(t >= plan.modes["bound"] * (1 - 1e-9) for t in plan.modes.values())
    assert plan.modes["geryon"] == pytest.approx(rec.iteration_s)
    assert plan.gain("P+S") >= 1.0 and plan.gain("vanilla") >= 1.0
    assert plan.simulations > len(plan.explored)
    text = to_text(plan, imgs_per_step=4)
    assert "Recommended settings:" in text and "Why:" in text and "bound" in text
    data = plan.to_dict()
    assert data["recommended"]["classes"] == rec.classes and data["gain"]["P+S"] == plan.gain("P+S")


def test_a_compute_bound_model_keeps_the_cheapest_settings_and_says_why() -> None:
    slow = synthetic([4000, 8000], [1.0, 1.0], [2.0, 2.0])
    plan = plan_training(slow, workers=2, num_ps=2, bandwidth_bps=1e10)
    assert plan.recommended.slice_bytes is None  # no slicing: the fewest messages
    assert plan.recommended.classes == 2 and plan.recommended.chunk_bytes == 256 << 10
    assert plan.bound_by == "compute"
    assert any(r.startswith("compute-bound") for r in plan.reasons)


class Scripted:
    """A simulator whose hybrid time is a function of (slice, classes, chunk); other modes 2 s."""

    def __init__(self, times: dict[tuple[Any, int, int], float]) -> None:
        self.times = times

    def __call__(self, profile, *, mode, thresholds, slice_bytes, chunk_bytes, partition, **kw):
        t = 2.0
        if mode == "hybrid":
            t = self.times.get((slice_bytes, len(thresholds) + 1, chunk_bytes), 3.0)
        return SimpleNamespace(iteration_s=t, bound=SimpleNamespace(seconds=0.5, by="ps0.nic"))


def test_a_costlier_setting_must_gain_more_than_the_tolerance() -> None:
    profile = synthetic([4000, 4000, 4000, 4000], [1e-3] * 4, [1e-3] * 4)
    k = 256 << 10
    times = {
        (4 * MiB, 2, k): 1.000,
        (1 * MiB, 2, k): 0.996,  # 0.4% faster: within 0.5%, the larger slice stays
        (1 * MiB, 3, k): 0.990,
        (4 * MiB, 3, k): 0.994,  # 0.6% over 2 classes at 4 MiB: a third class earns its queue
        (4 * MiB, 3, 16 << 10): 0.993,  # 0.1% only: the default chunk stays
        (4 * MiB, 3, 1 * MiB): 0.980,
    }
    plan = plan_training(
        profile,
        workers=2,
        num_ps=2,
        bandwidth_bps=1e9,
        slices=(4 * MiB, 1 * MiB),
        class_counts=(2, 3),
        chunks=(16 << 10, k, 1 * MiB),
        simulate=Scripted(times),
    )
    # 1 MiB's best (0.990) is within 0.5% of 4 MiB's best (0.994): the larger slice.
    assert plan.recommended.slice_bytes == 4 * MiB
    assert plan.recommended.classes == 3
    # 1 MiB chunks gain 1.4% at the chosen point: taken.
    assert plan.recommended.chunk_bytes == 1 * MiB and plan.recommended.iteration_s == 0.980
    assert any("1 MiB is only" in r for r in plan.reasons)
    assert plan.modes["bound"] == 0.5 and plan.bound_by == "ps0.nic"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"slices": ()}, "slices: expected one or more"),
        ({"slices": (0,)}, "slices: expected one or more sizes > 0 or None"),
        ({"class_counts": (1,)}, "class_counts: expected one or more ints >= 2"),
        ({"chunks": (-1,)}, "chunks: expected one or more sizes > 0"),
        ({"tolerance": 1.0}, "tolerance: expected a fraction in [0, 1)"),
    ],
)
def test_bad_grids_name_the_argument(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        plan_training(network_bound(), workers=2, num_ps=2, bandwidth_bps=1e9, **kw)


def test_more_classes_than_urgencies_are_skipped_with_a_note() -> None:
    notes: list[str] = []
    two_layers = synthetic([4000, 4000], [1e-3, 1e-3], [1e-3, 1e-3])
    plan = plan_training(
        two_layers, workers=2, num_ps=1, bandwidth_bps=1e8, class_counts=(2, 3), say=notes.append
    )
    assert plan.recommended.classes == 2
    assert any("3 classes: skipped" in n for n in notes)
