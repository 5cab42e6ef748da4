"""Profiles from real Keras models: exact parameters from the tagger, FLOPs from layer shapes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from geryon.threshold.model import in_order, iteration_time, reverse_order
from geryon.threshold.profile import Profile, ProfileError
from geryon.threshold.profiles import DEVICES, profile_from_model, resolve_device, retime

keras = pytest.importorskip("keras")
layers = keras.layers


def small_chain() -> Any:
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 3)),
            layers.Conv2D(4, 3, activation="relu", name="conv"),
            layers.MaxPooling2D(2, name="pool"),
            layers.Flatten(name="flat"),
            layers.Dense(5, name="dense"),
            layers.Activation("softmax", name="soft"),
        ],
        name="chain",
    )


def test_hand_counted_chain() -> None:
    # conv: 8x8x3 -> 6x6x4, 3x3x3 kernels: 36*4*27 = 3888 multiply-adds = 7776 FLOPs, + 144 bias
    #   + 144 relu = 8064; the folded pool: 3x3x4 outputs of 2x2 windows = 144; layer total 8208.
    # dense: 36 -> 5: 180 multiply-adds = 360, + 5 bias = 365; the folded softmax: 5 * 5 = 25; total 390.
    profile = profile_from_model(small_chain(), batch_size=2, device=1e6)
    assert [layer.name for layer in profile.layers] == ["conv", "dense"]
    assert [layer.flops for layer in profile.layers] == [2 * 8208, 2 * 390]
    assert profile.layers[0].forward_s == pytest.approx(2 * 8208 / 1e6)
    assert profile.layers[0].backward_s == pytest.approx(2 * 2 * 8208 / 1e6)
    assert profile.layers[1].forward_s == pytest.approx(2 * 390 / 1e6)
    assert profile.meta["folded"] == {"conv": ["pool", "flat"], "dense": ["soft"]}
    assert profile.meta["flops_per_sample"] == 8208 + 390
    assert profile.source == "flops:custom@1e06"
    # The tagger's exact parameters, keyed by Keras path, with the paper's layer urgency 1 - l/L.
    params = {p.name: p for p in profile.params}
    assert {name: (p.shape, p.layer) for name, p in params.items()} == {
        "chain/conv/kernel": ((3, 3, 3, 4), 0),
        "chain/conv/bias": ((4,), 0),
        "chain/dense/kernel": ((36, 5), 1),
        "chain/dense/bias": ((5,), 1),
    }
    assert params["chain/conv/kernel"].urgency == pytest.approx(0.5)
    assert params["chain/dense/kernel"].urgency == pytest.approx(0.0)
    assert profile.layer_bytes() == [(108 + 4) * 4, (180 + 5) * 4]


def test_branches_nested_models_and_shared_layers() -> None:
    inner_in = keras.Input(shape=(6, 6, 4))
    inner = keras.Model(
        inner_in, layers.SeparableConv2D(3, 3, padding="same", name="sep")(inner_in), name="inner"
    )
    shared = layers.Dense(3, name="shared")
    x_in = keras.Input(shape=(6, 6, 2))
    x = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False, name="dw")(x_in)
    x = layers.BatchNormalization(name="bn")(x)
    x = inner(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    a = shared(x)
    b = shared(a)
    out = layers.Add(name="add")([a, b])
    model = keras.Model(x_in, out, name="branchy")

    profile = profile_from_model(model, batch_size=1, device=1e9)
    assert [layer.name for layer in profile.layers] == ["dw", "bn", "inner/sep", "shared"]
    flops = [layer.flops for layer in profile.layers]
    # dw: 6x6 positions * 2 channels * multiplier 2 * 3x3 = 1296 multiply-adds, no bias.
    # (the input layer, free, folds into the first layer)
    assert flops[0] == 2 * 1296
    # bn: 7 FLOPs per element in training, 6*6*4 = 144 elements.
    assert flops[1] == 7 * 144
    # sep: depthwise 36*4*9 = 1296 + pointwise 36*4*3 = 432 multiply-adds, + 108 bias;
    # the folded global pool reads 108 elements.
    assert flops[2] == 2 * (1296 + 432) + 108 + 108
    # shared dense, called twice: 2 * (3*3 multiply-adds * 2 + 3 bias); the folded add: 3.
    assert flops[3] == 2 * (18 + 3) + 3


def test_layers_follow_the_tagger_consumption_order_on_resnet() -> None:
    profile = profile_from_model("resnet50", batch_size=32, device="v100")
    # Forward order from consumption: layer urgency (1 - l/L) falls strictly along the profile.
    urgency_by_layer = [
        max(p.urgency for p in profile.params if p.layer == i) for i in range(profile.num_layers)
    ]
    assert all(a > b for a, b in itertools.pairwise(urgency_by_layer))
    assert profile.layers[0].name == "conv1_conv"
    assert profile.layers[-1].name == "predictions"
    # The shortcut and the main path of a block are interleaved by depth, as the tagger says.
    names = [layer.name for layer in profile.layers]
    assert names.index("conv2_block1_0_conv") < names.index("conv2_block1_2_conv")
    assert profile.num_layers == 107  # 53 conv + 53 batch norm + the classifier
    # Trainable parameters of keras.applications.ResNet50.
    assert sum(p.bytes for p in profile.params) == 25_583_592 * 4
    # He et al.: 3.8e9 multiply-adds (their "FLOPs") per image, without BN/ReLU/adds; ours include those.
    assert 3.8e9 <= profile.meta["flops_per_sample"] / 2 <= 4.1e9


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "multiply_adds", "parameters"),
    [
        ("alexnet", 1.14e9, 62_378_344),
        ("vgg19", 19.6e9, 143_667_240),
        ("inceptionv3", 5.7e9, 23_817_352),
        ("mobilenetv2", 0.30e9, 3_504_872),
    ],
)
def test_builtin_models(spec: str, multiply_adds: float, parameters: int, tmp_path: Path) -> None:
    profile = profile_from_model(spec, batch_size=32, device="k40")
    assert profile.model == spec
    assert profile.source == "flops:k40@4.29e12"
    assert sum(p.bytes for p in profile.params) == parameters * 4
    per_image = profile.meta["flops_per_sample"] / 2
    # Convolutions and FC layers dominate; BN, activations and pooling add a few percent at most.
    assert multiply_adds * 0.99 <= per_image <= multiply_adds * 1.12
    assert sum(layer.flops or 0 for layer in profile.layers) == pytest.approx(32 * 2 * per_image)
    assert profile.compute_s == pytest.approx(3 * 32 * 2 * per_image / DEVICES["k40"])
    assert profile.meta["estimated_layers"] == []
    path = tmp_path / f"{spec}.json"
    profile.save(path)
    assert Profile.load(path) == profile
    # The model consumes it: in order beats reverse on a real profile at 10 Gbit/s.
    assert (
        iteration_time(profile, in_order(profile), 10e9).iteration_s
        <= iteration_time(profile, reverse_order(profile), 10e9).iteration_s
    )


def test_vgg19_matches_the_papers_setting() -> None:
    profile = profile_from_model("vgg19", batch_size=32, device="k40")
    # 19.6e9 multiply-adds per image, 2 FLOPs each, batch 32, on a 4.29 TFLOP/s K40.
    assert profile.layers[0].name == "block1_conv1"
    assert [layer.name for layer in profile.layers[-3:]] == ["fc1", "fc2", "predictions"]
    forward = sum(layer.forward_s for layer in profile.layers)
    assert forward == pytest.approx(19.6e9 * 2 * 32 / 4.29e12, rel=0.01)
    # The FC layers hold most of the bytes (the paper's motivation): fc1 alone is 102.8M parameters.
    assert profile.layer_bytes()[-3] == (25088 * 4096 + 4096) * 4


def test_cache_and_retime() -> None:
    k40 = profile_from_model("alexnet", batch_size=64, device="k40")
    v100 = profile_from_model("alexnet", batch_size=64, device="v100", efficiency=0.5)
    assert v100.source == "flops:v100@1.57e13,eff=0.5"
    assert v100.compute_s == pytest.approx(k40.compute_s * 4.29e12 / (15.7e12 * 0.5))
    again = retime(k40, device="v100", efficiency=0.5)
    assert again.source == v100.source
    assert [la.forward_s for la in again.layers] == pytest.approx([la.forward_s for la in v100.layers])
    assert again.params == k40.params
    doubled = profile_from_model("alexnet", batch_size=128, device="k40")
    assert doubled.compute_s == pytest.approx(2 * k40.compute_s)


def test_retime_needs_flops() -> None:
    from geryon.threshold.profile import synthetic

    with pytest.raises(ProfileError, match=r"profile\.layers\[0\]\.flops"):
        retime(synthetic([8], [1.0], [2.0]), device="k40")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size: expected an integer >= 1"),
        ({"batch_size": True}, "batch_size"),
        ({"device": "k41"}, "device 'k41': unknown; allowed: k40, k80, p100, v100"),
        ({"device": 0.0}, "device: expected a device name or a throughput"),
        ({"device": -4e12}, "device: expected"),
        ({"efficiency": 0}, r"efficiency: expected a fraction of peak in \(0, 1\]"),
        ({"efficiency": 1.5}, "efficiency"),
        ({"input_shape": (224, 0, 3)}, "input_shape: expected positive integers"),
        ({"urgency": "fifo"}, "urgency 'fifo': unknown urgency function; allowed: layer, tac, tic"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        profile_from_model("vgg19", **kwargs)


def test_unknown_model_and_wrong_input_shape() -> None:
    with pytest.raises(ProfileError, match="model: unknown model 'vgg20'; allowed: alexnet"):
        profile_from_model("vgg20")
    with pytest.raises(ProfileError, match=r"input_shape: \[10, 10, 3\] differs from the model's input"):
        profile_from_model(small_chain(), input_shape=(10, 10, 3))
    with pytest.raises(ProfileError, match="expected a functional or Sequential Keras model"):
        profile_from_model(object())
    with pytest.raises(ProfileError, match=r"model 'alexnet' could not be built: ValueError"):
        profile_from_model("alexnet", input_shape=(8, 8, 3))  # too small for an 11x11 stride-4 conv


def test_subclassed_model_gets_a_clear_error() -> None:
    class Net(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(name="net")
            self.fc = layers.Dense(3)

        def call(self, x: Any) -> Any:
            return self.fc(x)

    net = Net()
    net(keras.ops.zeros((1, 4)))
    with pytest.raises(ProfileError, match="functional or Sequential"):
        profile_from_model(net)


def test_resolve_device() -> None:
    assert resolve_device("K40") == ("k40", 4.29e12)
    assert resolve_device(2e12) == ("custom", 2e12)


def test_tic_urgency() -> None:
    profile = profile_from_model(small_chain(), batch_size=1, urgency="tic")
    assert profile.urgency_function == "tic"
    # A chain: TIC ranks like the layer urgency, the first layer's parameters most urgent.
    by_layer = {p.layer: p.urgency for p in profile.params}
    assert by_layer[0] > by_layer[1]
