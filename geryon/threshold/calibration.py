"""Measured cost knobs for the simulator, and cited achieved throughputs for the paper's hardware.

`bench/bench_ps_costs.py` measures five costs of parameter-server training on this machine and
writes them as JSON (format ``geryon.ps-costs``)::

    {"format": "geryon.ps-costs", "version": 1,
     "knobs": {"aggregate_s_per_byte": ..., "update_s_per_byte": ..., "per_message_s": ...,
               "per_slice_s": ..., "loopback_s_per_byte": ...},
     "meta": {...how, where, how many runs...}}

`load_knobs(path)` reads that file back as a plain ``dict[str, float]`` with those five keys (and
the optional ``step_fixed_s`` when the file has it), checked: a missing or extra key, or a value
that is negative, non-finite or not a number, is a `CalibrationError` naming the key. What each knob means:

- ``aggregate_s_per_byte``: a PS summing one more worker's gradient into the accumulator (a float32
  add over the tensor), seconds per gradient byte;
- ``update_s_per_byte``: the optimizer update of a variable (momentum SGD: accumulator and
  variable), seconds per variable byte;
- ``per_message_s``: one gRPC round trip for a tiny tensor (a 4-byte RecvTensor), the fixed cost a
  message pays whatever its size;
- ``per_slice_s``: the fixed cost of one more slice of a variable (its own read op, RecvTensor and
  concat on the worker), measured as the difference between pulling a variable in k slices and in
  one; it *includes* the per-message cost of the extra message, so a simulator adds one or the
  other per slice, never both;
- ``loopback_s_per_byte``: bulk gRPC transfer time over loopback on this machine (what one byte
  costs the CPUs to copy through the stack, a floor under any emulated link).
- ``step_fixed_s`` (optional, `OPTIONAL_KNOBS`; `bench/bench_step_cost.py` adds it): what one
  synchronous training round of the demo's chief costs beyond compute and transfer (ClusterCoordinator
  dispatch and join, the closure's remote function call, op launches): the round time extrapolated
  to a batch of 0 (no compute), minus the simulated transfer of the same cluster (with the knobs
  above, so per-message costs are not counted twice). Predictions add it to every step.

The paper's hardware cannot be measured here, so its compute comes from TensorFlow's own published
training throughputs (`ACHIEVED`), not from peak FLOP/s: those include everything a real training
step spends (kernel efficiency, launch overheads, the input pipeline on synthetic data).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from geryon.fields import read_json

FORMAT = "geryon.ps-costs"
FORMAT_VERSION = 1
KNOBS = ("aggregate_s_per_byte", "update_s_per_byte", "per_message_s", "per_slice_s", "loopback_s_per_byte")
# Written by a second bench (bench/bench_step_cost.py) into the same file, so a file without it still loads.
OPTIONAL_KNOBS = ("step_fixed_s",)


class CalibrationError(ValueError):
    """A calibration file is malformed; the message names the key and what is allowed."""


def load_knobs(path: str | os.PathLike[str]) -> dict[str, float]:
    """The five cost knobs of a ``geryon.ps-costs`` JSON file (see the module docstring)."""
    return knobs_from_dict(read_json(path, CalibrationError, "calibration"), where=str(path))


def knobs_from_dict(data: Any, where: str = "calibration") -> dict[str, float]:
    if not isinstance(data, Mapping):
        raise CalibrationError(f"{where}: expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise CalibrationError(f"{where}.format: expected {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != FORMAT_VERSION:
        raise CalibrationError(f"{where}.version: expected {FORMAT_VERSION}, got {data.get('version')!r}")
    extra = sorted(set(data) - {"format", "version", "knobs", "meta"})
    if extra:
        raise CalibrationError(
            f"{where}: unknown key(s) {', '.join(extra)}; allowed: format, version, knobs, meta"
        )
    if "meta" in data and not isinstance(data["meta"], Mapping):
        raise CalibrationError(f"{where}.meta: expected an object, got {type(data['meta']).__name__}")
    knobs = data.get("knobs")
    if not isinstance(knobs, Mapping):
        raise CalibrationError(f"{where}.knobs: expected an object with keys {', '.join(KNOBS)}")
    missing = [k for k in KNOBS if k not in knobs]
    if missing:
        raise CalibrationError(f"{where}.knobs: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(knobs) - set(KNOBS) - set(OPTIONAL_KNOBS))
    if unknown:
        raise CalibrationError(
            f"{where}.knobs: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(KNOBS + OPTIONAL_KNOBS)}"
        )
    out: dict[str, float] = {}
    for key in (*KNOBS, *(k for k in OPTIONAL_KNOBS if k in knobs)):
        value = knobs[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise CalibrationError(f"{where}.knobs.{key}: expected a finite number >= 0, got {value!r}")
        out[key] = float(value)
    return out


def step_fixed_by_workers(path: str | os.PathLike[str]) -> dict[int, float]:
    """`meta.step_fixed_by_workers` of a calibration file: bench/bench_step_cost.py's per-step fixed
    cost for each worker count it measured ({} when none). The knob `step_fixed_s` is the latest
    one measured, for worker counts not in this map."""
    data = read_json(path, CalibrationError, "calibration")
    meta = data.get("meta") if isinstance(data, Mapping) else None
    table = meta.get("step_fixed_by_workers", {}) if isinstance(meta, Mapping) else {}
    where = f"{path}.meta.step_fixed_by_workers"
    if not isinstance(table, Mapping):
        raise CalibrationError(f"{where}: expected an object of worker count -> seconds")
    out: dict[int, float] = {}
    for key, value in table.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) >= 1):
            raise CalibrationError(f"{where}: key {key!r}: expected a worker count >= 1")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise CalibrationError(f"{where}.{key}: expected a finite number >= 0, got {value!r}")
        out[int(key)] = float(value)
    return out


def knobs_document(knobs: Mapping[str, float], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object `load_knobs` reads (validated on the way out, so a bench never writes a bad one)."""
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "knobs": dict(knobs), "meta": dict(meta)}
    knobs_from_dict(doc, where="knobs_document")
    return doc


@dataclass(frozen=True)
class Achieved:
    """A published training throughput of one GPU: images per second at a batch size."""

    device: str
    model: str
    batch_size: int
    images_per_s: float
    source: str

    @property
    def step_s(self) -> float:
        """Seconds per training step (forward, backward, update) of one batch on that GPU."""
        return self.batch_size / self.images_per_s


# TensorFlow's published benchmarks (tf_cnn_benchmarks, synthetic data, 1 GPU, May 2017, TF b1e174e),
# "Benchmarks" guide, https://www.tensorflow.org/performance/benchmarks (kept in tensorflow/docs at
# site/en/r1/guide/performance/benchmarks.md). K80 rows: Google Compute Engine n1-standard-32-k80x8,
# variable_update=parameter_server; one "GPU" there is one GK210 of the dual-GPU K80 board. P100 rows:
# NVIDIA DGX-1. That guide has no K40 rows: the "K40, about 52 img/s at batch 64" that issue 15 quotes
# for ResNet-50 is this K80 (GK210) row. A K40 (one GK110B, 4.29 vs 4.37 TFLOP/s peak fp32) is the
# closest device there, so using the K80 rows for the paper's K40 testbed is an approximation, a
# choice and not a measurement.
# The one TensorFlow figure on a K40 is AlexNet's: the docstring of TensorFlow's own
# alexnet_benchmark.py (tensorflow/models, tutorials/image/alexnet/alexnet_benchmark.py; earlier
# tensorflow/models/image/alexnet) gives, across 100 steps at batch 128 on a Tesla K40c, forward
# 145 +/- 1.5 ms and forward-backward 480 +/- 48 ms per batch. Its forward-backward computes the
# gradients without an optimizer update, and its AlexNet has no LRN layers.
_TF_BENCH = "TensorFlow benchmarks guide (tensorflow.org/performance/benchmarks), synthetic data, 1 GPU"
ACHIEVED: dict[tuple[str, str], Achieved] = {
    ("k80", "resnet50"): Achieved("k80", "resnet50", 64, 51.9, f"{_TF_BENCH}, GCE K80"),
    ("k80", "vgg16"): Achieved("k80", "vgg16", 32, 35.4, f"{_TF_BENCH}, GCE K80"),
    ("k80", "alexnet"): Achieved("k80", "alexnet", 512, 656.0, f"{_TF_BENCH}, GCE K80"),
    ("k80", "inception_v3"): Achieved("k80", "inception_v3", 64, 30.5, f"{_TF_BENCH}, GCE K80"),
    ("k80", "resnet152"): Achieved("k80", "resnet152", 32, 20.0, f"{_TF_BENCH}, GCE K80"),
    ("p100", "resnet50"): Achieved("p100", "resnet50", 64, 219.0, f"{_TF_BENCH}, DGX-1 P100"),
    ("p100", "vgg16"): Achieved("p100", "vgg16", 64, 154.0, f"{_TF_BENCH}, DGX-1 P100"),
    ("p100", "alexnet"): Achieved("p100", "alexnet", 512, 2987.0, f"{_TF_BENCH}, DGX-1 P100"),
    ("p100", "inception_v3"): Achieved("p100", "inception_v3", 64, 142.0, f"{_TF_BENCH}, DGX-1 P100"),
    ("k40", "alexnet"): Achieved(
        "k40",
        "alexnet",
        128,
        128 / 0.480,
        "TensorFlow models alexnet_benchmark.py docstring: Tesla K40c, batch 128, forward-backward "
        "480 +/- 48 ms per batch (no optimizer update, no LRN)",
    ),
    ("p100", "resnet152"): Achieved("p100", "resnet152", 64, 91.8, f"{_TF_BENCH}, DGX-1 P100"),
}


def achieved(device: str, model: str) -> Achieved:
    """The cited throughput of `model` on `device`; a clear error listing what is cited otherwise."""
    key = (device.lower(), model.lower())
    if key not in ACHIEVED:
        cited = ", ".join(f"{d}/{m}" for d, m in sorted(ACHIEVED))
        raise CalibrationError(f"no cited throughput for device {device!r}, model {model!r}; cited: {cited}")
    return ACHIEVED[key]


# --- Compute for the paper's testbed (8 servers, one Tesla K40c each) ------------------------------
# A cited throughput is of the cited code's model, which is not always the paper's (AlexNet: TensorFlow's
# benchmarks use the 64-192-384-384-256 "one weird trick" variant, alexnet_benchmark.py that one's conv
# layers only, 64-192-384-256-256, no FC; the paper's is Krizhevsky's 96-256-384-384-256 with FC). So
# what carries over is the *fraction of peak FLOP/s* the cited run reached:
#     efficiency = FLOPs of the cited model's training step / (cited step time x cited device's peak)
# (FLOPs counted by geryon.threshold.profiles exactly as for every profile: backward = 2x forward), and
# the paper's model runs on the K40 at that efficiency. Assumptions, stated: (1) a model's layers all
# reach the same efficiency (its FLOP shares set the per-layer times); (2) K80 rows: one GK210 (half a
# K80) and one K40c, both Kepler with the same SM design and cuDNN kernels, reach the same fraction of
# their peak (profiles.DEVICES: k80 4.37, k40 4.29 TFLOP/s); (3) VGG-19 (no cited figure) runs at VGG16's
# efficiency: its FLOPs are 1.27x VGG16's, where Justin Johnson's cnn-benchmarks measured 1.21x
# (github.com/jcjohnson/cnn-benchmarks README: GTX 1080, cuDNN 5, Torch, 281.69 vs 232.55 ms per
# batch of 16), so VGG-19 may come out up to 5% slow.
BASES = ("k40", "k80")
# The cited code's model where it is not the Keras model of the same name (see _cited_alexnet).
CITED_ARCH = {("k80", "alexnet"): "tf_cnn_benchmarks", ("k40", "alexnet"): "alexnet_benchmark"}
VGG_NOTE = "VGG-19 at VGG16's efficiency (FLOPs 1.27x; cnn-benchmarks measured 1.21x)"
# No K40 or K80 training throughput of YOLO v1 is published that we found (its paper gives inference on
# a Titan X), so YOLO, like VGG-19 a plain stack of 3x3/1x1 convolutions with an FC head, takes VGG16's
# cited efficiency: an assumption, stated where it is used.
YOLO_NOTE = "YOLO at VGG16's efficiency (assumed: no published K40/K80 YOLO v1 training figure)"
LIKE_VGG16 = ("vgg19", "yolo")


@dataclass(frozen=True)
class PaperCompute:
    """The fraction of peak FLOP/s a cited training run reached, to time the paper's model on a K40."""

    model: str
    cited: Achieved
    cited_flops_per_image: float  # training FLOPs (forward + backward) of the cited code's model
    peak_flops_per_s: float  # of the cited device (profiles.DEVICES)
    assumption: str

    @property
    def efficiency(self) -> float:
        return self.cited_flops_per_image * self.cited.images_per_s / self.peak_flops_per_s


def paper_compute(model: str, basis: str = "k40") -> PaperCompute:
    """How the K40 compute of `model` follows from cited throughputs (see the comment above):
    `basis` "k40" takes TensorFlow's K40c AlexNet figure where it applies, "k80" the K80 rows only."""
    from geryon.threshold.profiles import DEVICES

    if basis not in BASES:
        raise CalibrationError(f"basis: expected one of {', '.join(BASES)}, got {basis!r}")
    m = model.lower()
    key = (
        ("k40", m)
        if basis == "k40" and ("k40", m) in ACHIEVED
        else ("k80", "vgg16" if m in LIKE_VGG16 else m)
    )
    cited = achieved(*key)
    notes = ["cited on a K40c" if key[0] == "k40" else "one GK210 of a K80 at a K40's efficiency"]
    if m == "vgg19":
        notes.append(VGG_NOTE)
    if m == "yolo":
        notes.append(YOLO_NOTE)
    if key in CITED_ARCH:
        notes.append(f"FLOPs of {CITED_ARCH[key]}'s AlexNet")
    return PaperCompute(m, cited, _training_flops(key), DEVICES[key[0]], "; ".join(notes))


def _training_flops(key: tuple[str, str]) -> float:
    """Forward + backward FLOPs per image of the model the cited figure ran."""
    from geryon.threshold.profiles import profile_from_model

    spec: Any = _cited_alexnet(CITED_ARCH[key]) if key in CITED_ARCH else key[1]
    profile = profile_from_model(spec, batch_size=1, device=1.0)
    return profile.compute_s  # at 1 FLOP/s, seconds = FLOPs


def _cited_alexnet(which: str) -> Any:
    """The AlexNet the cited code trains, as Keras layers (written from its description, for FLOPs):
    tf_cnn_benchmarks' models/alexnet_model.py (227x227 input; conv 64/11 stride 4 VALID, pool 3/2,
    192/5, pool, 384/3, 384/3, 256/3, pool, FC 4096, 4096, 1001 logits), and TensorFlow models'
    tutorials/image/alexnet/alexnet_benchmark.py (224x224; conv 64/11 stride 4 SAME, pool 3/2 VALID,
    192/5, pool, 384/3, 256/3, 256/3, pool5, no FC: its forward-backward is the conv part only)."""
    import keras
    from keras import layers

    tf_cnn = which == "tf_cnn_benchmarks"
    stack: list[Any] = [
        keras.Input(shape=(227, 227, 3) if tf_cnn else (224, 224, 3)),
        layers.Conv2D(64, 11, strides=4, padding="valid" if tf_cnn else "same", activation="relu"),
        layers.MaxPooling2D(3, strides=2),
        layers.Conv2D(192, 5, padding="same", activation="relu"),
        layers.MaxPooling2D(3, strides=2),
        layers.Conv2D(384, 3, padding="same", activation="relu"),
        layers.Conv2D(384 if tf_cnn else 256, 3, padding="same", activation="relu"),
        layers.Conv2D(256, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(3, strides=2),
    ]
    if tf_cnn:
        stack += [
            layers.Flatten(),
            layers.Dense(4096, activation="relu"),
            layers.Dense(4096, activation="relu"),
            layers.Dense(1001),
        ]
    return keras.Sequential(stack, name=f"alexnet_{which}")
