"""geryon.cluster.models: the demo's CNNs are VGG-shaped (conv compute early, FC bytes late)."""

from __future__ import annotations

import numpy as np
import pytest

from geryon.cluster.models import (
    DEFAULT_INPUT,
    MODELS,
    ModelError,
    build_model,
    build_tf_keras_model,
    check_model,
)


def test_names_and_shapes_are_checked_without_tensorflow() -> None:
    assert check_model("vggmini") == (32, 32, 3)
    assert set(DEFAULT_INPUT) == set(MODELS)
    with pytest.raises(ModelError, match="--model 'vgg99'"):
        check_model("vgg99")
    with pytest.raises(ModelError, match="needs at least 32x32"):
        check_model("mobilenetv2", (16, 16, 3))
    with pytest.raises(ModelError, match="H,W,C positive integers"):
        check_model("tiny", (16, 0, 3))  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "total_mb", "fc_share"), [("vggmini", 6.42, 0.82), ("tiny", 0.14, 0.96)])
def test_the_fc_layers_hold_most_of_the_bytes(name: str, total_mb: float, fc_share: float) -> None:
    model = build_model(name, DEFAULT_INPUT[name], num_classes=10)
    sizes = {v.path: int(np.prod(v.shape)) * 4 for v in model.trainable_variables}
    total = sum(sizes.values())
    fc = sum(b for path, b in sizes.items() if "/fc" in path or "/logits" in path)
    assert total / 1e6 == pytest.approx(total_mb, abs=0.01)
    assert fc / total == pytest.approx(fc_share, abs=0.02)
    assert model.output_shape == (None, 10)


def test_a_keras_application_gets_a_classifier_at_a_small_input() -> None:
    model = build_model("mobilenetv2", (32, 32, 3), num_classes=7)
    assert model.output_shape == (None, 7)
    assert model.layers[-1].name == "predictions"


def test_the_fit_paths_tf_keras_twin_is_tagged_as_the_keras_3_model() -> None:
    # --api fit (geryon.demo.fit) trains the twin: every parameter keeps its size, kind, urgency and
    # consumption order, so the thresholds put it in the class the custom loop's model gives it.
    from geryon.demo.chief import param_rows

    shape = DEFAULT_INPUT["tiny"]
    keras3 = param_rows(build_model("tiny", shape), shape)
    twin = param_rows(build_tf_keras_model("tiny", shape), shape)
    assert [r["name"] for r in twin] == [r["name"].removeprefix("tiny/") for r in keras3]
    assert [{**r, "name": None} for r in twin] == [{**r, "name": None} for r in keras3]
    with pytest.raises(ModelError, match="--api fit trains one of vggmini, tiny"):
        build_tf_keras_model("resnet50", (32, 32, 3))
