"""Classes from thresholds and the map_table's JSON contract with the native side."""

from __future__ import annotations

import json
import math

import pytest

from geryon.tagger.map_table import MapTable, class_of, default_thresholds, validate_thresholds

NAMES = ["conv1/kernel", "conv1/bias", "fc1/kernel", "fc2/kernel"]
URGENCY = [0.9, 0.9, 0.5, 0.0]


def test_two_classes_follow_the_paper_rule() -> None:
    # "urgency more than the threshold -> high-priority flow": equal is not more.
    assert class_of(0.51, (0.5,)) == 0
    assert class_of(0.5, (0.5,)) == 1
    assert class_of(0.0, (0.0,)) == 1
    assert class_of(1.0, (1.0,)) == 1


def test_k_classes_are_ordered_by_urgency() -> None:
    ts = (0.25, 0.5, 0.75)
    assert [class_of(u, ts) for u in (1.0, 0.8, 0.6, 0.3, 0.1, 0.0)] == [0, 0, 1, 2, 3, 3]


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        ([], "at least one"),
        ([0.5, 0.4], "strictly increasing"),
        ([0.5, 0.5], "strictly increasing"),
        ([-0.1], r"thresholds\[0\]: -0.1 is not a number in \[0, 1\]"),
        ([0.2, 1.5], r"thresholds\[1\]"),
        ([math.nan], "not a number"),
        ([i / 10 for i in range(1, 9)], "at most 8 classes"),
        ([True], "not a number"),
    ],
)
def test_bad_thresholds_name_the_problem(thresholds: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_thresholds(thresholds)


def test_default_thresholds() -> None:
    assert default_thresholds(2) == (0.5,)
    assert default_thresholds(4) == (0.25, 0.5, 0.75)
    with pytest.raises(ValueError, match="2 to 8"):
        default_thresholds(9)
    with pytest.raises(ValueError, match="2 to 8"):
        default_thresholds(1)


def test_rebuild_for_new_thresholds_keeps_ids_and_bumps_version() -> None:
    t1 = MapTable.build(NAMES, URGENCY, [0.5], "layer")
    assert t1.version == 1 and t1.classes() == {
        "conv1/kernel": 0,
        "conv1/bias": 0,
        "fc1/kernel": 1,
        "fc2/kernel": 1,
    }
    t2 = t1.with_thresholds([0.4])
    assert t2.version == 2
    assert [e.id for e in t2.entries] == [e.id for e in t1.entries]
    assert t2.classes()["fc1/kernel"] == 0
    t3 = t2.with_thresholds([0.3, 0.6])
    assert t3.num_classes == 3 and [e.cls for e in t3.entries] == [0, 0, 1, 2]
    assert t1.class_of("fc1/kernel") == 1
    assert t1.class_of("global_step") == t1.default_class == 0


def test_json_round_trip_is_exact() -> None:
    t = MapTable.build(NAMES, URGENCY, [0.2, 0.6], "tic", version=7, default_class=1)
    back = MapTable.from_json(t.to_json())
    assert back == t
    data = json.loads(t.to_json())
    assert data["format"] == "geryon.map_table" and data["num_classes"] == 3
    assert data["entries"][2] == {"id": 2, "name": "fc1/kernel", "urgency": 0.5, "class": 1}


def _table_dict() -> dict:
    return MapTable.build(NAMES, URGENCY, [0.5], "layer").to_dict()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other"), r"map_table.format"),
        (lambda d: d.update(format_version=2), r"map_table.format_version"),
        (lambda d: d.update(version=0), r"map_table.version: 0 is not an integer >= 1"),
        (lambda d: d.update(num_classes=3), r"map_table.num_classes"),
        (lambda d: d.update(thresholds=[0.7, 0.2]), "strictly increasing"),
        (lambda d: d.update(thresholds="0.5"), r"map_table.thresholds"),
        (lambda d: d.update(default_class=5), r"map_table.default_class"),
        (lambda d: d["entries"][1].update(name=""), r"map_table.entries\[1\].name"),
        (lambda d: d["entries"][0].update(urgency=2), r"map_table.entries\[0\].urgency"),
        (lambda d: d["entries"][3].update(id=0), r"map_table.entries\[3\].id: duplicate"),
        (lambda d: d["entries"][2].update({"class": 0}), r"map_table.entries\[2\].class: 0 disagrees"),
        (lambda d: d["entries"].append("x"), r"map_table.entries\[4\]: expected an object"),
    ],
)
def test_malformed_map_table_is_rejected_with_the_field(mutate, message) -> None:
    data = _table_dict()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        MapTable.from_dict(data)


def test_not_json_at_all() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        MapTable.from_json("{")


def test_a_least_urgent_default_stays_least_urgent_when_k_changes() -> None:
    t1 = MapTable.build(NAMES, URGENCY, [0.5], "layer", default_class=1)  # k = 2: class 1 is the least urgent
    assert t1.with_thresholds([0.3, 0.6]).default_class == 2
    assert t1.with_thresholds([0.3, 0.6]).with_thresholds([0.5]).default_class == 1
    t0 = MapTable.build(NAMES, URGENCY, [0.5], "layer", default_class=0)  # an explicit urgent default stays
    assert t0.with_thresholds([0.3, 0.6]).default_class == 0
