"""Bands (pure): the ranking by GPU intensity, urgency-major slots, compression into k queues."""

from __future__ import annotations

import itertools
import random

import pytest

from geryon.jobs.bands import HYSTERESIS, Band, Demand, compute_bands, describe, rank
from geryon.jobs.controller import decide, previous_ranks
from geryon.jobs.registration import Registered, make_record


def classes(bands: dict[str, Band]) -> dict[str, tuple[int, ...]]:
    return {j: b.classes for j, b in bands.items()}


def test_one_job_keeps_todays_classes() -> None:
    for n in range(1, 5):
        assert compute_bands([Demand("a", n, 0.5)], 4)["a"].mapping() == {c: c for c in range(n)}


def test_one_job_with_more_classes_than_queues_is_compressed_in_order() -> None:
    assert compute_bands([Demand("a", 8, 0.5)], 4)["a"].classes == (0, 0, 1, 1, 2, 2, 3, 3)


def test_two_jobs_four_queues_the_issues_example() -> None:
    # the most intense job's urgent tensors highest, the other's urgent next, then the two bulks
    bands = compute_bands([Demand("light", 2, 0.3), Demand("heavy", 2, 0.9)], 4)
    assert classes(bands) == {"heavy": (0, 2), "light": (1, 3)}
    assert bands["heavy"].rank == 0 and bands["light"].rank == 1
    assert describe(bands) == [
        "rank 0 heavy: class 0 -> 0, class 1 -> 2",
        "rank 1 light: class 0 -> 1, class 1 -> 3",
    ]


def test_intensity_change_swaps_the_order() -> None:
    before = compute_bands([Demand("a", 2, 0.9), Demand("b", 2, 0.3)], 4)
    after = compute_bands([Demand("a", 2, 0.2), Demand("b", 2, 0.3)], 4)
    assert classes(before) == {"a": (0, 2), "b": (1, 3)}
    assert classes(after) == {"a": (1, 3), "b": (0, 2)}


def test_more_jobs_than_queues_compress_to_contiguous_groups() -> None:
    demands = [Demand(f"j{i}", 2, 1 - i / 10) for i in range(5)]  # j0 most intense
    bands = compute_bands(demands, 4)
    # 10 slots on 4 queues: urgent of j0..j2 on 0, urgent of j3, j4 on 1, bulk of j0..j2 on 2, the rest 3
    assert classes(bands) == {"j0": (0, 2), "j1": (0, 2), "j2": (0, 2), "j3": (1, 3), "j4": (1, 3)}


def test_compression_keeps_the_order_and_uses_every_queue() -> None:
    rng = random.Random(39)
    for _ in range(200):
        k = rng.randint(1, 8)
        demands = [
            Demand(f"j{i}", rng.randint(1, 4), rng.uniform(0.01, 1)) for i in range(rng.randint(1, 12))
        ]
        bands = compute_bands(demands, k)
        ranked = rank(demands)
        slots = sorted((c, r) for r, d in enumerate(ranked) for c in range(d.classes))
        queue = [bands[ranked[r].job].classes[c] for c, r in slots]
        assert queue == sorted(queue), "a slot sits above one ranked before it"
        assert all(0 <= q < k for q in queue)
        if len(slots) >= k:
            assert set(queue) == set(range(k))
            sizes = [queue.count(q) for q in range(k)]
            assert max(sizes) - min(sizes) <= 1
        else:
            assert queue == list(range(len(slots)))
        for b in bands.values():
            assert list(b.classes) == sorted(b.classes), "a band inverts its job's classes"


def test_ties_rank_by_job_id_and_the_answer_is_deterministic() -> None:
    demands = [Demand("b", 2, 0.5), Demand("a", 2, 0.5), Demand("c", 2, 0.5 + 1e-12)]
    assert [d.job for d in rank(demands)] == ["a", "b", "c"]
    answers = {
        tuple(sorted(classes(compute_bands(list(p), 4)).items())) for p in itertools.permutations(demands)
    }
    assert len(answers) == 1


def test_mixed_class_counts() -> None:
    bands = compute_bands([Demand("a", 3, 0.9), Demand("b", 2, 0.4)], 8)
    assert classes(bands) == {"a": (0, 2, 4), "b": (1, 3)}


@pytest.mark.parametrize(
    ("demands", "queues", "match"),
    [
        ([], 0, "queues: 0"),
        ([], 9, "queues: 9"),
        ([Demand("a", 2, 0.5), Demand("a", 2, 0.4)], 4, "listed twice"),
        ([Demand("a", 0, 0.5)], 4, "classes 0"),
        ([Demand("a", 2, 0.0)], 4, r"intensity 0.0; must be in \(0, 1\]"),
        ([Demand("a", 2, float("nan"))], 4, "intensity nan"),
    ],
)
def test_bad_inputs(demands: list[Demand], queues: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_bands(demands, queues)


def test_decide_groups_bands_by_host_and_keeps_refusals_out() -> None:
    a = make_record("a", {"worker:0": "h1:2222", "ps:0": "h2:2222"}, 0.18, 0.2, 10)
    b = make_record("b", {"worker:0": "h2:2223"}, 0.05, 0.2, 10)
    c = make_record("c", {"worker:0": "h9:2222"}, 0.2, 0.2, 10)
    regs = [Registered(r.job, r.dumps().encode(), i + 1) for i, r in enumerate((a, b, c))]
    answer = decide(regs, {"h1", "h2"}, 4)
    assert {j: v["classes"] for j, v in answer.jobs.items()} == {"a": [0, 2], "b": [1, 3]}
    assert answer.hosts == {"h1": {"a": [0, 2]}, "h2": {"a": [0, 2], "b": [1, 3]}}
    assert list(answer.refused) == ["c"] and "host 'h9' is unknown" in answer.refused["c"]


# --- hysteresis: jobs of nearly equal intensity keep the last generation's order -----------------------


def test_a_job_passes_another_only_with_more_than_the_margin() -> None:
    previous = {"a": 0, "b": 1}
    # b measures 4% above a: within 5%, a keeps its band; 6% above: b passes.
    near = [Demand("a", 2, 0.50), Demand("b", 2, 0.52)]
    far = [Demand("a", 2, 0.50), Demand("b", 2, 0.53)]
    assert classes(compute_bands(near, 4, previous, 0.05)) == {"a": (0, 2), "b": (1, 3)}
    assert classes(compute_bands(far, 4, previous, 0.05)) == {"a": (1, 3), "b": (0, 2)}
    # Without the last generation's ranks, or with no margin, intensity alone decides.
    assert classes(compute_bands(near, 4)) == {"a": (1, 3), "b": (0, 2)}
    assert classes(compute_bands(near, 4, previous, 0.0)) == {"a": (1, 3), "b": (0, 2)}


def test_measurements_that_wander_within_the_margin_never_swap_bands() -> None:
    rng = random.Random(3)
    previous = {"a": 0, "b": 1}
    for _ in range(200):
        a, b = 0.5 * (1 + rng.uniform(-0.02, 0.02)), 0.5 * (1 + rng.uniform(-0.02, 0.02))
        bands = compute_bands([Demand("a", 2, a), Demand("b", 2, b)], 4, previous, HYSTERESIS)
        assert bands["a"].rank == 0
        previous = {j: band.rank for j, band in bands.items()}


def test_a_new_job_ranks_by_intensity_alone_and_the_answer_ignores_input_order() -> None:
    previous = {"a": 0, "b": 1}
    demands = [Demand("a", 1, 0.50), Demand("b", 1, 0.51), Demand("c", 1, 0.505)]
    ranks = {tuple(d.job for d in rank(list(p), previous, 0.05)) for p in itertools.permutations(demands)}
    assert len(ranks) == 1
    (order,) = ranks
    # c is new: it sits where its intensity puts it (above a); b stays below a (within the margin).
    assert order.index("c") < order.index("a") < order.index("b")


@pytest.mark.parametrize("margin", [-0.1, 1.0, float("nan"), True])
def test_a_bad_margin_names_itself(margin: float) -> None:
    with pytest.raises(ValueError, match=r"margin: expected a fraction in \[0, 1\)"):
        compute_bands([Demand("a", 2, 0.5)], 4, {"a": 0}, margin)


def test_previous_ranks_read_from_a_stored_record_leave_out_what_is_not_a_rank() -> None:
    stored = {"jobs": {"a": {"rank": 0}, "b": {"rank": "1"}, "c": [], "d": {"rank": True}, "e": {"rank": 2}}}
    assert previous_ranks(stored) == {"a": 0, "e": 2}
    assert previous_ranks([]) == {} and previous_ranks({"jobs": 3}) == {}


def test_decide_keeps_the_last_order_within_the_margin() -> None:
    a = make_record("a", {"worker:0": "h1:2222"}, 0.100, 0.2, 10)  # intensity 0.5
    b = make_record("b", {"worker:0": "h1:2223"}, 0.102, 0.2, 10)  # 0.51: 2% above
    regs = [Registered(r.job, r.dumps().encode(), i + 1) for i, r in enumerate((a, b))]
    kept = decide(regs, {"h1"}, 4, {"a": 0, "b": 1}, HYSTERESIS)
    assert {j: v["classes"] for j, v in kept.jobs.items()} == {"a": [0, 2], "b": [1, 3]}
    fresh = decide(regs, {"h1"}, 4)
    assert {j: v["classes"] for j, v in fresh.jobs.items()} == {"a": [1, 3], "b": [0, 2]}
