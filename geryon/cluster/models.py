"""The models `geryon demo` and `geryon bench` train, built with random weights (nothing downloaded).

"vggmini" is the default: VGG's shape at CIFAR size (32x32x3). Three blocks of two 3x3 convs (32, 64,
128 channels; 1.15 MB of parameters) and two FC layers (2048 -> 512 -> 512 -> 10; 5.3 MB), so, as in
VGG-19 (86% of its bytes in FC layers), the late layers hold most of the bytes (82% here) while the
conv layers do almost all of the compute. That split is what Geryon exploits: the small conv
parameters the forward pass needs first get through ahead of the FC bulk.

"tiny" is the same shape scaled down for the CI run (`--quick`); the keras.applications models run at
small inputs (their FC head is dropped when the input size differs from ImageNet's, so a
global-average-pool + dense head is put on top to keep a classifier).
"""

from __future__ import annotations

from typing import Any

# name -> (one-line description); kept free of TF imports so the CLI validates names cheaply.
MODELS: dict[str, str] = {
    "vggmini": "VGG-style CNN for CPU: 3 blocks of 2 convs (32/64/128), FC 2048-512-512-10; 6.4 MB, 82% FC",
    "tiny": "vggmini scaled down for CI: 2 blocks of 1 conv (8/16), FC 256-128-10 at 16x16x3; 0.14 MB",
    "vgg16": "keras.applications.VGG16 at a small input, CIFAR-style FC head 512-512-10 (59 MB of conv)",
    "resnet50": "keras.applications.ResNet50 at a small input, global pool + dense head",
    "mobilenetv2": "keras.applications.MobileNetV2 at a small input, global pool + dense head",
}

DEFAULT_MODEL = "vggmini"
# The models with a tf_keras twin (build_tf_keras_model) for `--api fit`: tf_keras.applications'
# models are not the Keras 3 ones layer for layer, so only the demo's own CNNs are paired.
FIT_MODELS = ("vggmini", "tiny")
# Input shape per model when none is given (small, for CPU).
DEFAULT_INPUT: dict[str, tuple[int, int, int]] = {
    "vggmini": (32, 32, 3),
    "tiny": (16, 16, 3),
    "vgg16": (32, 32, 3),
    "resnet50": (32, 32, 3),
    "mobilenetv2": (32, 32, 3),
}


class ModelError(ValueError):
    """An unknown model name or an input shape the model cannot take (message names the field)."""


def check_model(name: str, input_shape: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """Validates the name and shape without importing TensorFlow; returns the shape to use."""
    if name not in MODELS:
        raise ModelError(f"--model {name!r}: expected one of {', '.join(MODELS)}")
    shape = tuple(input_shape) if input_shape is not None else DEFAULT_INPUT[name]
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ModelError(f"--input-shape {shape!r}: expected H,W,C positive integers")
    minimum = {"vggmini": 8, "tiny": 4, "vgg16": 32, "resnet50": 32, "mobilenetv2": 32}[name]
    if shape[0] < minimum or shape[1] < minimum:
        raise ModelError(
            f"--input-shape {shape[0]},{shape[1]},{shape[2]}: {name} needs at least {minimum}x{minimum}"
        )
    return shape


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int = 10) -> Any:
    """A Keras model for `name`, random weights, built for `input_shape` (no batch dimension)."""
    shape = check_model(name, input_shape)
    import keras
    from keras import layers

    if name in FIT_MODELS:
        return _vgg(keras, name, shape, num_classes)
    builders = {
        "vgg16": keras.applications.VGG16,
        "resnet50": keras.applications.ResNet50,
        "mobilenetv2": keras.applications.MobileNetV2,
    }
    if name == "vgg16":
        # The CIFAR variant of VGG's head (512-512): 4096-wide layers would be 134 MB at 32x32,
        # minutes per step at the testbed's rates.
        base = builders[name](weights=None, input_shape=shape, include_top=False)
        x = layers.Flatten(name="flatten")(base.output)
        x = layers.Dense(512, activation="relu", name="fc1")(x)
        x = layers.Dense(512, activation="relu", name="fc2")(x)
    else:
        base = builders[name](weights=None, input_shape=shape, include_top=False)
        x = layers.GlobalAveragePooling2D(name="avg_pool")(base.output)
    out = layers.Dense(num_classes, name="predictions")(x)
    return keras.Model(base.input, out, name=name)


def build_tf_keras_model(name: str, input_shape: tuple[int, int, int], num_classes: int = 10) -> Any:
    """The tf_keras twin of build_model(name) for `--api fit` (FIT_MODELS only): the same layers with
    the same names and shapes, so the tagger puts every parameter in the same class."""
    shape = check_model(name, input_shape)
    if name not in FIT_MODELS:
        raise ModelError(f"--model {name!r}: --api fit trains one of {', '.join(FIT_MODELS)}")
    import tf_keras

    return _vgg(tf_keras, name, shape, num_classes)


def _vgg(k: Any, name: str, shape: tuple[int, ...], num_classes: int) -> Any:
    """vggmini or tiny in the Keras module `k` (keras or tf_keras: the same layer API)."""
    layers = k.layers
    blocks, per_block, fc = ((32, 64, 128), 2, (512, 512)) if name == "vggmini" else ((8, 16), 1, (128,))
    stack: list[Any] = [k.Input(shape)]
    for i, width in enumerate(blocks):
        for j in range(per_block):
            stack.append(
                layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i + 1}_{j + 1}")
            )
        stack.append(layers.MaxPooling2D(2, name=f"pool{i + 1}"))
    stack.append(layers.Flatten(name="flatten"))
    for i, width in enumerate(fc):
        stack.append(layers.Dense(width, activation="relu", name=f"fc{i + 1}"))
    stack.append(layers.Dense(num_classes, name="logits"))
    return k.Sequential(stack, name=name)
