"""geryon.demo.twojobs' pure parts: the bands of each policy (two jobs of two classes on four queues,
as docs/jobs.md's table) and which steps count in a window."""

from __future__ import annotations

import pytest

from geryon.demo.twojobs import POLICIES, policy_bands, steps_in


def test_policy_bands_for_two_jobs_on_four_queues() -> None:
    ranked = ["a", "b"]  # a is the more intense
    assert policy_bands("fifo", ranked) == {"a": [3, 3], "b": [3, 3]}
    assert policy_bands("geryon", ranked) == {"a": [0, 1], "b": [0, 1]}
    assert policy_bands("job-priority", ranked) == {"a": [0, 0], "b": [1, 1]}
    assert policy_bands("combined", ranked) == {"a": [0, 2], "b": [1, 3]}
    assert policy_bands("combined", ["b", "a"]) == {"b": [0, 2], "a": [1, 3]}
    assert set(POLICIES) == {"fifo", "geryon", "job-priority", "combined"}


def test_an_unknown_policy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="policy: unknown policy 'crux'; allowed: fifo, geryon"):
        policy_bands("crux", ["a"])


def test_steps_count_when_they_ran_wholly_inside_the_window_after_the_settle() -> None:
    # (end time, seconds): began at end - seconds.
    steps = [(10.5, 1.0), (11.8, 1.0), (13.0, 1.0), (14.6, 1.0), (15.4, 1.0)]
    # Window 10..15, settle 0.5: the first began at 9.5 (before), the second at 10.8 (ok), the third
    # at 12.0, the fourth at 13.6 and ends at 14.6 (ok), the fifth ends after 15.
    assert steps_in(steps, 10.0, 15.0, 0.5) == [1.0, 1.0, 1.0]
    assert steps_in(steps, 10.0, 15.0, 1.0) == [1.0, 1.0]
    assert steps_in([], 0.0, 1.0, 0.0) == []


def test_probes_give_every_job_the_same_band() -> None:
    from geryon.demo.twojobs import bands_for

    assert bands_for("strict-one", ["a", "b"]) == {"a": [1, 1], "b": [1, 1]}
    assert bands_for("geryon-low", ["b", "a"]) == {"b": [2, 3], "a": [2, 3]}
    assert bands_for("shared-bulk", ["b", "a"]) == {"b": [0, 3], "a": [1, 3]}
    assert bands_for("combined", ["a", "b"]) == policy_bands("combined", ["a", "b"])
