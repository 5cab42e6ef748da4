"""geryon.demo.variants, pure: parsing, padding (the testbed run is test_variants_testbed.py)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from geryon.demo import modes, variants
from geryon.errors import UsageError


def test_padded_leaves_the_extra_classes_empty_with_rising_thresholds() -> None:
    assert variants.padded([0.25], 2) == (0.25,)
    ts = variants.padded([0.25], 4)
    assert ts[0] == 0.25 and len(ts) == 3
    assert all(a < b for a, b in pairwise(ts)) and ts[-1] == 1.0
    # Above every urgency the tagger gives (at most 1 - 1/L): those classes stay empty.
    assert ts[1] > 1 - 1e-6
    with pytest.raises(ValueError, match="need at least 3 classes"):
        variants.padded([0.1, 0.2], 2)


def test_parse_pads_to_the_clusters_classes_and_keeps_names_and_chunks() -> None:
    got = variants.parse(
        [
            {"name": "a", "mode": "geryon", "thresholds": [0.1], "chunk_bytes": 16 << 10},
            {"name": "b", "thresholds": [0.1, 0.5]},
            {"name": "c-end", "mode": "endhost"},
        ],
        3,
    )
    assert [v.name for v in got] == ["a", "b", "c-end"]
    assert got[0].thresholds == variants.padded([0.1], 3) and got[0].chunk_bytes == 16 << 10
    assert got[1].thresholds == (0.1, 0.5) and got[1].chunk_bytes is None
    assert got[2].mode.single_class and got[2].thresholds is None
    assert variants.parse([v.to_dict() for v in got], 3) == got  # what the chief reads back


@pytest.mark.parametrize(
    ("items", "match"),
    [
        ([], "at least one"),
        ([{"name": "A"}], r"variants\[0\].name"),
        ([{"name": "x"}, {"name": "x"}], r"variants\[1\].name: 'x' is taken"),
        ([{"name": "geryon"}], "is taken"),
        ([{"name": "x", "mode": "ps"}], r"variants\[0\].mode: 'ps' does not run in the paired cluster"),
        ([{"name": "x", "mode": "nosuch"}], "unknown mode"),
        ([{"name": "x", "thresholds": [0.1, 0.2, 0.3]}], r"thresholds: expected 1..2 numbers"),
        ([{"name": "x", "thresholds": [0.5, 0.2]}], "rising strictly"),
        ([{"name": "x", "thresholds": [1.5]}], "rising strictly"),
        ([{"name": "x", "thresholds": [True]}], "expected numbers"),
        ([{"name": "x", "chunk_bytes": 100}], r"chunk_bytes: expected bytes 4096\.\."),
        ([{"name": "x", "slice": 1}], "unknown fields"),
        (["x"], "expected an object"),
    ],
)
def test_bad_variants_are_refused_naming_the_item_and_field(items: list[Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        variants.parse(items, 3)


def test_from_modes_is_the_plain_rotation() -> None:
    got = variants.from_modes(["geryon", "endhost"])
    assert [(v.name, v.mode, v.thresholds, v.chunk_bytes) for v in got] == [
        ("geryon", modes.mode("geryon"), None, None),
        ("endhost", modes.mode("endhost"), None, None),
    ]
