"""Models the CLI can tag by name, and loading a user's model from ``module:callable``.

Builders use `keras.applications` with ``weights=None``: random weights, no download.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# name -> (description, default input shape). Kept free of TF imports so the CLI can validate names
# before paying for `import tensorflow`.
BUILTIN_MODELS: dict[str, tuple[str, tuple[int, int, int]]] = {
    "alexnet": ("AlexNet, one tower (Krizhevsky et al. 2012), 227x227", (227, 227, 3)),
    "vgg16": ("keras.applications.VGG16", (224, 224, 3)),
    "vgg19": ("keras.applications.VGG19", (224, 224, 3)),
    "resnet50": ("keras.applications.ResNet50", (224, 224, 3)),
    "inceptionv3": ("keras.applications.InceptionV3", (299, 299, 3)),
    "mobilenetv2": ("keras.applications.MobileNetV2", (224, 224, 3)),
    "yolo": ("YOLO v1 (Redmon et al. 2016, Fig. 3: 24 conv + 2 FC), 448x448", (448, 448, 3)),
}


class ModelLoadError(ValueError):
    """The model spec names nothing loadable (message says what and what is allowed)."""


def is_module_spec(spec: str) -> bool:
    return ":" in spec


def check_model_spec(spec: str) -> None:
    """Cheap validation (no imports) of a model spec: a built-in name or ``module:callable``."""
    if is_module_spec(spec):
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ModelLoadError(f"model {spec!r}: expected module:callable, e.g. mypkg.models:build")
        return
    if spec not in BUILTIN_MODELS:
        allowed = ", ".join(sorted(BUILTIN_MODELS))
        raise ModelLoadError(f"unknown model {spec!r}; allowed: {allowed}, or module:callable")


def drops_classifier_head(spec: str, input_shape: tuple[int, ...] | None) -> bool:
    """keras.applications fix the input size of their FC head: another size builds them without it."""
    if spec not in BUILTIN_MODELS or spec in ("alexnet", "yolo") or input_shape is None:
        return False
    return tuple(input_shape) != BUILTIN_MODELS[spec][1]


def build_model(spec: str, input_shape: tuple[int, ...] | None = None) -> Any:
    """A Keras model (or a traced function / TF1 graph from a user's callable) for `spec`."""
    check_model_spec(spec)
    if is_module_spec(spec):
        return _load_callable(spec)()
    import keras

    shape = tuple(input_shape) if input_shape else BUILTIN_MODELS[spec][1]
    if spec == "alexnet":
        return alexnet(input_shape=shape)
    if spec == "yolo":
        return yolo(input_shape=shape)
    builders: dict[str, Callable[..., Any]] = {
        "vgg16": keras.applications.VGG16,
        "vgg19": keras.applications.VGG19,
        "resnet50": keras.applications.ResNet50,
        "inceptionv3": keras.applications.InceptionV3,
        "mobilenetv2": keras.applications.MobileNetV2,
    }
    # Keep the FC layers whenever the size allows: they are the point (the big, late parameters).
    include_top = not drops_classifier_head(spec, shape)
    return builders[spec](weights=None, input_shape=shape, include_top=include_top)


def alexnet(input_shape: tuple[int, ...] = (227, 227, 3), classes: int = 1000) -> Any:
    """One-tower AlexNet: 62.4M parameters, 93.99% of them in the FC layers (the paper's figure)."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Conv2D(96, 11, strides=4, activation="relu", name="conv1"),
            layers.MaxPooling2D(3, strides=2, name="pool1"),
            layers.Conv2D(256, 5, padding="same", activation="relu", name="conv2"),
            layers.MaxPooling2D(3, strides=2, name="pool2"),
            layers.Conv2D(384, 3, padding="same", activation="relu", name="conv3"),
            layers.Conv2D(384, 3, padding="same", activation="relu", name="conv4"),
            layers.Conv2D(256, 3, padding="same", activation="relu", name="conv5"),
            layers.MaxPooling2D(3, strides=2, name="pool5"),
            layers.Flatten(name="flatten"),
            layers.Dense(4096, activation="relu", name="fc6"),
            layers.Dropout(0.5, name="drop6"),
            layers.Dense(4096, activation="relu", name="fc7"),
            layers.Dropout(0.5, name="drop7"),
            layers.Dense(classes, activation="softmax", name="fc8"),
        ],
        name="alexnet",
    )


# YOLO v1's convolutions (Redmon, Divvala, Girshick, Farhadi, "You Only Look Once", CVPR 2016, Fig. 3):
# (kernel, filters, stride) per conv layer, "M" a 2x2 max pool with stride 2.
_YOLO_CONVS: tuple[tuple[int, int, int] | str, ...] = (
    (7, 64, 2), "M",
    (3, 192, 1), "M",
    (1, 128, 1), (3, 256, 1), (1, 256, 1), (3, 512, 1), "M",
    *((1, 256, 1), (3, 512, 1)) * 4, (1, 512, 1), (3, 1024, 1), "M",
    *((1, 512, 1), (3, 1024, 1)) * 2, (3, 1024, 1), (3, 1024, 2),
    (3, 1024, 1), (3, 1024, 1),
)  # fmt: skip


def yolo(
    input_shape: tuple[int, ...] = (448, 448, 3), grid: int = 7, boxes: int = 2, classes: int = 20
) -> Any:
    """YOLO v1 as its paper's Fig. 3 draws it: 24 conv layers (leaky ReLU 0.1), a 4096-unit FC layer
    with dropout 0.5, and the S x S x (B * 5 + C) = 7 x 7 x 30 output. 271.7M parameters at 448x448,
    77.86% of them in the two FC layers: the Geryon paper's figure for YOLO (Sec. III, Fig. 6)."""
    import keras
    from keras import layers

    stack: list[Any] = [keras.Input(shape=input_shape)]
    convs = pools = 0
    for item in _YOLO_CONVS:
        if item == "M":
            pools += 1
            stack.append(layers.MaxPooling2D(2, strides=2, name=f"pool{pools}"))
            continue
        assert not isinstance(item, str)
        kernel, filters, stride = item
        convs += 1
        stack += [
            layers.Conv2D(filters, kernel, strides=stride, padding="same", name=f"conv{convs}"),
            layers.LeakyReLU(negative_slope=0.1, name=f"leaky{convs}"),
        ]
    stack += [
        layers.Flatten(name="flatten"),
        layers.Dense(4096, name="fc1"),
        layers.LeakyReLU(negative_slope=0.1, name="leaky_fc1"),
        layers.Dropout(0.5, name="drop1"),
        layers.Dense(grid * grid * (boxes * 5 + classes), name="fc2"),
    ]
    return keras.Sequential(stack, name="yolo")


def _load_callable(spec: str) -> Callable[[], Any]:
    module_name, _, attr_path = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelLoadError(f"model {spec!r}: cannot import module {module_name!r} ({e})") from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelLoadError(
                f"model {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not callable(obj):
        raise ModelLoadError(f"model {spec!r}: {attr_path!r} is not callable")
    return obj
