"""Per-layer times measured on this machine, on real Keras models."""

from __future__ import annotations

import io
import math
import socket
from pathlib import Path
from typing import Any

import pytest

from geryon.progress import Progress
from geryon.threshold.profile import Profile, ProfileError
from geryon.threshold.profiler import measure_profile, measure_train_step
from geryon.threshold.profiles import profile_from_model

keras = pytest.importorskip("keras")
layers = keras.layers


def convnet() -> Any:
    # Big enough that every parameter layer takes milliseconds on a CPU, small enough for a test.
    return keras.Sequential(
        [
            keras.Input(shape=(48, 48, 3)),
            layers.Conv2D(32, 3, activation="relu", name="c1"),
            layers.BatchNormalization(name="bn"),
            layers.MaxPooling2D(name="pool"),
            layers.Conv2D(64, 3, activation="relu", name="c2"),
            layers.Flatten(name="flat"),
            layers.Dense(256, activation="relu", name="d1"),
            layers.Dropout(0.5, name="drop"),
            layers.Dense(10, name="d2"),
        ],
        name="convnet",
    )


def quiet() -> Progress:
    return Progress("test", enabled=False)


def test_measured_convnet(tmp_path: Path) -> None:
    model = convnet()
    log = io.StringIO()
    profile = measure_profile(
        model, batch_size=32, iterations=7, warmup=2, progress=Progress("geryon profile", stream=log)
    )
    assert profile.source == f"measured:{socket.gethostname()}"
    assert profile.batch_size == 32
    # Same layers (forward order, folding) and the same parameters as the FLOPs-derived profile.
    flops_profile = profile_from_model(model, batch_size=32, device="k40")
    assert [la.name for la in profile.layers] == ["c1", "bn", "c2", "d1", "d2"]
    assert [la.name for la in profile.layers] == [la.name for la in flops_profile.layers]
    assert [la.flops for la in profile.layers] == [la.flops for la in flops_profile.layers]
    assert profile.params == flops_profile.params
    for layer in profile.layers:
        assert math.isfinite(layer.forward_s) and layer.forward_s >= 0
        assert math.isfinite(layer.backward_s) and layer.backward_s >= 0
    # The convolutions and the big dense layer do real work in both directions.
    for layer in profile.layers[:4]:
        assert layer.forward_s > 0 and layer.backward_s > 0, layer
    assert "measuring 8 Keras layers of convnet at batch 32" in log.getvalue()
    assert "8/8 layers (d2)" in log.getvalue()

    # Layers timed alone add up to roughly a whole training step of the same model, measured here.
    step = measure_train_step(model, batch_size=32, iterations=7, warmup=2)
    ratio = profile.compute_s / step
    assert 0.3 <= ratio <= 3.0, (profile.compute_s, step)

    path = tmp_path / "convnet.json"
    profile.save(path)
    assert Profile.load(path) == profile


def test_branches_shared_layers_and_nested_models() -> None:
    inner_in = keras.Input(shape=(16, 16, 8))
    inner = keras.Model(inner_in, layers.Conv2D(8, 3, padding="same", name="ic")(inner_in), name="inner")
    shared = layers.Conv2D(8, 3, padding="same", name="shared")
    x_in = keras.Input(shape=(16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same", name="stem")(x_in)
    a = shared(x)
    b = shared(inner(x))
    x = layers.Add(name="add")([a, b])
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(x_in, layers.Dense(4, name="head")(x), name="branchy")

    profile = measure_profile(model, batch_size=8, iterations=3, warmup=1, progress=quiet())
    names = [la.name for la in profile.layers]
    assert names == [la.name for la in profile_from_model(model, batch_size=8).layers]
    assert set(names) == {"stem", "shared", "inner/ic", "head"}
    assert all(la.forward_s >= 0 and la.backward_s >= 0 for la in profile.layers)
    assert profile.compute_s > 0


@pytest.mark.slow
def test_builtin_model_by_name() -> None:
    profile = measure_profile("alexnet", batch_size=2, iterations=2, warmup=1, progress=quiet())
    assert profile.model == "alexnet"
    assert [la.name for la in profile.layers] == [
        "conv1",
        "conv2",
        "conv3",
        "conv4",
        "conv5",
        "fc6",
        "fc7",
        "fc8",
    ]
    assert sum(p.bytes for p in profile.params) == 62_378_344 * 4
    # fc6 multiplies a 9216x4096 matrix: never free.
    assert profile.layers[5].forward_s > 0 and profile.layers[5].backward_s > 0
    assert profile.meta["iterations"] == 2 and profile.meta["warmup"] == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size: expected an integer >= 1, got 0"),
        ({"batch_size": 2, "iterations": 0}, "iterations: expected an integer >= 1"),
        ({"batch_size": 2, "warmup": -1}, "warmup: expected an integer >= 0"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        measure_profile(convnet(), progress=quiet(), **kwargs)


def test_unknown_model() -> None:
    with pytest.raises(ProfileError, match="unknown model 'resnet51'"):
        measure_profile("resnet51", batch_size=2, progress=quiet())
