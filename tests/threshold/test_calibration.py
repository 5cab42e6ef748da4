"""load_knobs: the JSON a PS-cost bench writes, read back checked; the cited throughputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from geryon.threshold.calibration import (
    ACHIEVED,
    KNOBS,
    CalibrationError,
    achieved,
    knobs_document,
    load_knobs,
    paper_compute,
)

GOOD = {
    "aggregate_s_per_byte": 1.2e-10,
    "update_s_per_byte": 4.1e-10,
    "per_message_s": 1.2e-4,
    "per_slice_s": 1.4e-4,
    "loopback_s_per_byte": 9.1e-10,
}


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(doc))
    return path


def test_round_trip_through_the_document_a_bench_writes(tmp_path: Path) -> None:
    path = _write(tmp_path, knobs_document(GOOD, {"runs": 3, "host": "x"}))
    assert load_knobs(path) == GOOD
    assert tuple(load_knobs(path)) == KNOBS


@pytest.mark.parametrize("key", KNOBS)
def test_missing_key_is_named(tmp_path: Path, key: str) -> None:
    knobs = {k: v for k, v in GOOD.items() if k != key}
    path = _write(tmp_path, {"format": "geryon.ps-costs", "version": 1, "knobs": knobs, "meta": {}})
    with pytest.raises(CalibrationError, match=rf"missing key.*{key}"):
        load_knobs(path)


def test_extra_key_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {"format": "geryon.ps-costs", "version": 1, "knobs": {**GOOD, "latency_s": 1.0}})
    with pytest.raises(CalibrationError, match=r"unknown key.*latency_s"):
        load_knobs(path)
    path = _write(tmp_path, {"format": "geryon.ps-costs", "version": 1, "knobs": GOOD, "extra": 1})
    with pytest.raises(CalibrationError, match=r"unknown key.*extra"):
        load_knobs(path)


@pytest.mark.parametrize("bad", [-1e-9, math.inf, math.nan, "1e-9", True, None])
def test_bad_values_are_named(tmp_path: Path, bad: Any) -> None:
    knobs = {**GOOD, "per_slice_s": bad}
    # json.dumps writes inf/nan as Infinity/NaN, which json.loads reads back: the check must catch them.
    path = _write(tmp_path, {"format": "geryon.ps-costs", "version": 1, "knobs": knobs})
    with pytest.raises(CalibrationError, match=r"knobs\.per_slice_s: expected a finite number >= 0"):
        load_knobs(path)


def test_wrong_format_unreadable_and_not_json(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="format"):
        load_knobs(_write(tmp_path, {"format": "geryon.profile", "version": 1, "knobs": GOOD}))
    with pytest.raises(CalibrationError, match="cannot read"):
        load_knobs(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_knobs(tmp_path / "bad.json")
    with pytest.raises(CalibrationError, match="knobs_document"):
        knobs_document({**GOOD, "update_s_per_byte": -1.0}, {})


def test_cited_throughputs() -> None:
    r50 = achieved("K80", "resnet50")
    assert (r50.batch_size, r50.images_per_s) == (64, 51.9)
    assert r50.step_s == pytest.approx(64 / 51.9)
    assert all(
        "tensorflow.org/performance/benchmarks" in a.source or "alexnet_benchmark.py" in a.source
        for a in ACHIEVED.values()
    )
    # The one TensorFlow figure on a K40: AlexNet forward-backward, 480 ms per batch of 128.
    assert achieved("k40", "alexnet").step_s == pytest.approx(0.480)
    # No ResNet-50 figure on a K40 is published: asking for one is an error that lists what is cited.
    with pytest.raises(CalibrationError, match="k80/resnet50"):
        achieved("k40", "resnet50")


def test_paper_compute_carries_the_cited_fraction_of_peak() -> None:
    from geryon.threshold.profiles import DEVICES

    # ResNet-50: the K80 row of the same Keras model: 51.9 img/s x 23.45 GFLOP (3 x 7.82 forward).
    r50 = paper_compute("ResNet50")
    assert r50.cited.device == "k80"
    assert r50.cited_flops_per_image == pytest.approx(23.45e9, rel=1e-3)
    assert r50.efficiency == pytest.approx(51.9 * 23.45e9 / DEVICES["k80"], rel=1e-3)
    assert "GK210" in r50.assumption
    # AlexNet: TensorFlow's K40c figure (480 ms per 128), counted over that benchmark's own conv-only
    # AlexNet, which has fewer FLOPs than the paper's model; "k80" takes tf_cnn_benchmarks' row.
    alex = paper_compute("alexnet")
    assert (alex.cited.device, alex.cited.step_s) == ("k40", pytest.approx(0.480))
    assert "alexnet_benchmark" in alex.assumption
    assert 0 < alex.efficiency < paper_compute("alexnet", "k80").efficiency <= 1
    # VGG-19 has no cited figure: VGG16's efficiency, said so.
    vgg = paper_compute("vgg19")
    assert vgg.cited.model == "vgg16"
    assert vgg.efficiency == pytest.approx(paper_compute("vgg16").efficiency)
    assert "VGG16's efficiency" in vgg.assumption
    # YOLO neither (issue 38 item 3): VGG16's efficiency too, stated as an assumption.
    yolo = paper_compute("yolo")
    assert yolo.cited.model == "vgg16" and yolo.efficiency == pytest.approx(vgg.efficiency)
    assert "YOLO at VGG16's efficiency (assumed" in yolo.assumption
    with pytest.raises(CalibrationError, match="basis"):
        paper_compute("vgg19", "peak")
    with pytest.raises(CalibrationError, match="cited: "):
        paper_compute("mobilenet")


def test_the_per_step_fixed_cost_is_an_optional_knob(tmp_path: Path) -> None:
    from geryon.threshold.simknobs import PsCosts

    path = _write(tmp_path, knobs_document({**GOOD, "step_fixed_s": 0.012}, {}))
    assert load_knobs(path) == {**GOOD, "step_fixed_s": 0.012}
    assert PsCosts.load(str(path)).per_message_s == GOOD["per_message_s"]  # not a PS cost: left out
    with pytest.raises(CalibrationError, match=r"knobs\.step_fixed_s: expected a finite number >= 0"):
        knobs_document({**GOOD, "step_fixed_s": -0.1}, {})


def test_fixed_cost_per_worker_count(tmp_path: Path) -> None:
    from geryon.threshold.calibration import step_fixed_by_workers

    good = knobs_document({**GOOD, "step_fixed_s": 0.02}, {"step_fixed_by_workers": {"1": 0.01, "2": 0.02}})
    assert step_fixed_by_workers(_write(tmp_path, good)) == {1: 0.01, 2: 0.02}
    assert step_fixed_by_workers(_write(tmp_path, knobs_document(GOOD, {}))) == {}
    for table, message in (
        ({"one": 0.01}, "key 'one': expected a worker count >= 1"),
        ({"1": -1}, r"step_fixed_by_workers\.1: expected a finite number >= 0"),
        ([0.01], "expected an object of worker count -> seconds"),
    ):
        path = _write(tmp_path, knobs_document(GOOD, {"step_fixed_by_workers": table}))
        with pytest.raises(CalibrationError, match=message):
            step_fixed_by_workers(path)
