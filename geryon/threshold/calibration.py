"""Measured cost knobs for the simulator, and cited achieved throughputs for the paper's hardware.

`bench/bench_ps_costs.py` measures five costs of parameter-server training on this machine and
writes them as JSON (format ``geryon.ps-costs``)::

    {"format": "geryon.ps-costs", "version": 1,
     "knobs": {"aggregate_s_per_byte": ..., "update_s_per_byte": ..., "per_message_s": ...,
               "per_slice_s": ..., "loopback_s_per_byte": ...},
     "meta": {...how, where, how many runs...}}

`load_knobs(path)` reads that file back as a plain ``dict[str, float]`` with exactly those five
keys, checked: a missing or extra key, or a value that is negative, non-finite or not a number, is
a `CalibrationError` naming the key. What each knob means:

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
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise CalibrationError(
            f"{where}.knobs: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(KNOBS)}"
        )
    out: dict[str, float] = {}
    for key in KNOBS:
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
# How each model's compute is set from a cited achieved throughput (PaperCompute below), per "basis":
# - "k40": TensorFlow's own K40c figure where one exists (AlexNet, alexnet_benchmark.py), else as "k80";
# - "k80": TensorFlow's benchmarks guide K80 rows for every model.
# Assumption for using a K80 row on a K40: one GK210 (half a K80 board: 2496 cores, 875 MHz boost on
# GCE's autoboost) trains as fast as one GK110B K40c (2880 cores, 745-875 MHz). Both are Kepler, same
# SM design and cuDNN kernels; the K40 has 15% more cores at the same boost clock, so this may
# understate a K40 by up to 15% (a stated choice, not a measurement: factor K40_PER_GK210 = 1.0).
# VGG-19 has no row anywhere in TensorFlow's guide: its step is VGG16's times the VGG-19/VGG-16 ratio
# measured in Justin Johnson's cnn-benchmarks (github.com/jcjohnson/cnn-benchmarks, README, GTX 1080
# with cuDNN 5, Torch, batch 16, forward + backward: VGG-16 232.55 ms, VGG-19 281.69 ms, ratio 1.211).
K40_PER_GK210 = 1.0
VGG19_PER_VGG16 = 281.69 / 232.55
_CNN_BENCH = "jcjohnson/cnn-benchmarks README (GTX 1080, cuDNN 5): VGG-19 281.69 ms / VGG-16 232.55 ms"
BASES = ("k40", "k80")


@dataclass(frozen=True)
class PaperCompute:
    """The achieved training time per image of one model on the paper's K40, and how it was derived."""

    model: str
    cited: Achieved
    scale: float  # cited seconds per image x scale = the K40's seconds per image
    assumption: str

    @property
    def s_per_image(self) -> float:
        return self.scale / self.cited.images_per_s

    def step_s(self, batch_size: int) -> float:
        """One step at `batch_size`, assuming time per image does not depend on the batch (the cited
        batch is the paper's for ResNet-50 (64) and AlexNet (512) in the K80 rows, not for VGG (32))."""
        return batch_size * self.s_per_image


def paper_compute(model: str, basis: str = "k40") -> PaperCompute:
    """The K40 compute of `model` (alexnet, vgg19, resnet50, or a model with a K80 row) from cited
    throughputs; `basis` "k40" takes TensorFlow's K40c AlexNet figure, "k80" the K80 rows only."""
    if basis not in BASES:
        raise CalibrationError(f"basis: expected one of {', '.join(BASES)}, got {basis!r}")
    m = model.lower()
    if basis == "k40" and ("k40", m) in ACHIEVED:
        return PaperCompute(m, ACHIEVED[("k40", m)], 1.0, "cited on a K40c")
    gk210 = "one GK210 of a K80 taken as one K40 (K40_PER_GK210 = 1.0)"
    if m == "vgg19":
        return PaperCompute(
            m,
            achieved("k80", "vgg16"),
            VGG19_PER_VGG16 / K40_PER_GK210,
            f"VGG16 x {VGG19_PER_VGG16:.3f} ({_CNN_BENCH}); {gk210}",
        )
    return PaperCompute(m, achieved("k80", m), 1.0 / K40_PER_GK210, gk210)
