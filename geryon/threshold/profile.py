"""A model's layer profile: what the iteration-time model and the cluster simulator consume.

A profile lists the model's compute layers in forward order (the order the forward pass runs
them, which is the tagger's consumption order) with their forward and backward compute times, and
the model's parameters (exact sizes from the tagger) with their urgency and the layer that consumes
them. Pure data and validation: building a profile from a real model lives in the builders
(`geryon.threshold.profiles` and the profiler), so this module needs no TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from geryon.fields import read_json

FORMAT = "geryon.profile"
FORMAT_VERSION = 1


class ProfileError(ValueError):
    """A profile (or profile file) is malformed; the message names the field and what is allowed."""


@dataclass(frozen=True)
class LayerSpec:
    """One compute layer, in forward order. Times are seconds for one iteration of one worker."""

    name: str
    forward_s: float
    backward_s: float
    # Forward FLOPs of one iteration (the batch), when known: lets a profile be re-timed for
    # another device throughput without re-measuring.
    flops: float | None = None
    # The layers whose forward must end before this one's starts (indices into Profile.layers), when
    # the profile carries the model's dataflow (`geryon.threshold.forward_dag`); None: a chain, each
    # layer after the one before it. Either every layer has it or none does.
    after: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ParamSpec:
    """One logical parameter (a trainable variable before partitioning and slicing)."""

    name: str  # the tagger's key (Keras path)
    shape: tuple[int, ...]
    element_size: int  # bytes per element
    urgency: float  # in [0, 1]; 1 is the most urgent
    layer: int  # index into Profile.layers of the layer that consumes it first

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.element_size


@dataclass(frozen=True)
class Profile:
    model: str
    batch_size: int
    layers: tuple[LayerSpec, ...]
    params: tuple[ParamSpec, ...]
    urgency_function: str = "layer"
    # Where the compute times come from, e.g. "measured:<host>" or "flops:k40@4.3e12".
    source: str = "unknown"
    # Free-form extra facts (input shape, device, iterations measured); kept through save/load.
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate(self)

    # --- derived quantities -------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.params)

    @property
    def is_dag(self) -> bool:
        """Whether the forward pass is the model's dataflow (LayerSpec.after) rather than a chain."""
        return self.layers[0].after is not None

    @property
    def compute_s(self) -> float:
        """C: forward plus backward compute of one iteration."""
        return sum(layer.forward_s + layer.backward_s for layer in self.layers)

    def layer_bytes(self) -> list[int]:
        """Bytes of parameters consumed by each layer (0 for parameter-free layers)."""
        out = [0] * len(self.layers)
        for p in self.params:
            out[p.layer] += p.bytes
        return out

    def scaled(self, factor: float, source: str | None = None) -> Profile:
        """The same profile with every compute time multiplied by `factor` (> 0)."""
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise ProfileError(f"scale factor must be a positive number, got {factor!r}")
        layers = tuple(
            replace(layer, forward_s=layer.forward_s * factor, backward_s=layer.backward_s * factor)
            for layer in self.layers
        )
        return Profile(
            self.model,
            self.batch_size,
            layers,
            self.params,
            self.urgency_function,
            source or self.source,
            dict(self.meta),
        )

    # --- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model": self.model,
            "batch_size": self.batch_size,
            "urgency_function": self.urgency_function,
            "source": self.source,
            "meta": dict(self.meta),
            "layers": [
                {"name": la.name, "forward_s": la.forward_s, "backward_s": la.backward_s, "flops": la.flops}
                | ({} if la.after is None else {"after": list(la.after)})
                for la in self.layers
            ],
            "params": [
                {
                    "name": p.name,
                    "shape": list(p.shape),
                    "element_size": p.element_size,
                    "urgency": p.urgency,
                    "layer": p.layer,
                }
                for p in self.params
            ],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> Profile:
        if not isinstance(data, Mapping):
            raise ProfileError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ProfileError(f"{where}.format: expected {FORMAT!r}, got {data.get('format')!r}")
        if data.get("version") != FORMAT_VERSION:
            raise ProfileError(f"{where}.version: expected {FORMAT_VERSION}, got {data.get('version')!r}")
        known = {"format", "version", "model", "batch_size", "urgency_function", "source", "meta"}
        unknown = sorted(set(data) - known - {"layers", "params"})
        if unknown:
            raise ProfileError(f"{where}: unknown field(s) {', '.join(unknown)}")
        model = _require(data, "model", str, where)
        batch = _require(data, "batch_size", int, where)
        urgency_function = data.get("urgency_function", "layer")
        if not isinstance(urgency_function, str):
            raise ProfileError(f"{where}.urgency_function: expected a string")
        source = data.get("source", "unknown")
        if not isinstance(source, str):
            raise ProfileError(f"{where}.source: expected a string")
        meta = data.get("meta", {})
        if not isinstance(meta, Mapping):
            raise ProfileError(f"{where}.meta: expected an object")
        layers_raw = _require(data, "layers", list, where)
        params_raw = _require(data, "params", list, where)
        layers = []
        for i, raw in enumerate(layers_raw):
            w = f"{where}.layers[{i}]"
            if not isinstance(raw, Mapping):
                raise ProfileError(f"{w}: expected an object")
            _no_unknown(raw, {"name", "forward_s", "backward_s", "flops", "after"}, w)
            flops = raw.get("flops")
            if flops is not None:
                flops = _number(flops, f"{w}.flops")
            after = _after_field(raw.get("after"), w)
            layers.append(
                LayerSpec(
                    _require(raw, "name", str, w),
                    _number(_require(raw, "forward_s", (int, float), w), f"{w}.forward_s"),
                    _number(_require(raw, "backward_s", (int, float), w), f"{w}.backward_s"),
                    flops,
                    after,
                )
            )
        params = []
        for i, raw in enumerate(params_raw):
            w = f"{where}.params[{i}]"
            if not isinstance(raw, Mapping):
                raise ProfileError(f"{w}: expected an object")
            _no_unknown(raw, {"name", "shape", "element_size", "urgency", "layer"}, w)
            shape = _require(raw, "shape", list, w)
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
                raise ProfileError(f"{w}.shape: expected a list of integers, got {shape!r}")
            params.append(
                ParamSpec(
                    _require(raw, "name", str, w),
                    tuple(shape),
                    _require(raw, "element_size", int, w),
                    _number(_require(raw, "urgency", (int, float), w), f"{w}.urgency"),
                    _require(raw, "layer", int, w),
                )
            )
        return cls(model, batch, tuple(layers), tuple(params), urgency_function, source, dict(meta))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes atomically (temp file + rename), so a crash never leaves half a profile."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.to_json())
                f.write("\n")
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        return cls.from_dict(read_json(path, ProfileError, "profile"), where=str(path))


def _require(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ProfileError(f"{where}: missing field {key!r}")
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ProfileError(f"{where}.{key}: expected {names}, got {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProfileError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _no_unknown(data: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
        )


def _validate(p: Profile) -> None:
    if not isinstance(p.model, str) or not p.model:
        raise ProfileError("profile.model: expected a non-empty string")
    if isinstance(p.batch_size, bool) or not isinstance(p.batch_size, int) or p.batch_size < 1:
        raise ProfileError(f"profile.batch_size: expected an integer >= 1, got {p.batch_size!r}")
    if not p.layers:
        raise ProfileError("profile.layers: a profile needs at least one layer")
    for i, layer in enumerate(p.layers):
        for attr in ("forward_s", "backward_s"):
            v = getattr(layer, attr)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ProfileError(f"profile.layers[{i}].{attr}: expected a time in seconds >= 0, got {v!r}")
        if layer.flops is not None and not (math.isfinite(layer.flops) and layer.flops >= 0):
            raise ProfileError(f"profile.layers[{i}].flops: expected a number >= 0, got {layer.flops!r}")
    _validate_after(p.layers)
    names: set[str] = set()
    for i, param in enumerate(p.params):
        w = f"profile.params[{i}]"
        if not param.name:
            raise ProfileError(f"{w}.name: expected a non-empty string")
        if param.name in names:
            raise ProfileError(f"{w}.name: duplicate parameter {param.name!r}")
        names.add(param.name)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in param.shape):
            raise ProfileError(f"{w}.shape: dimensions must be integers >= 0, got {param.shape!r}")
        if isinstance(param.element_size, bool) or param.element_size < 1:
            raise ProfileError(
                f"{w}.element_size: expected bytes per element >= 1, got {param.element_size!r}"
            )
        if not (math.isfinite(param.urgency) and 0 <= param.urgency <= 1):
            raise ProfileError(f"{w}.urgency: expected a number in [0, 1], got {param.urgency!r}")
        if isinstance(param.layer, bool) or not 0 <= param.layer < len(p.layers):
            raise ProfileError(
                f"{w}.layer: expected a layer index in [0, {len(p.layers) - 1}], got {param.layer!r}"
            )


def _after_field(after: Any, where: str) -> tuple[int, ...] | None:
    if after is None:
        return None
    if not isinstance(after, list) or any(isinstance(a, bool) or not isinstance(a, int) for a in after):
        raise ProfileError(f"{where}.after: expected a list of layer indices, got {after!r}")
    return tuple(after)


def _validate_after(layers: Sequence[LayerSpec]) -> None:
    """Every layer's `after` or none; indices of other layers; no cycle (the forward pass must end)."""
    dag = layers[0].after is not None
    n = len(layers)
    for i, layer in enumerate(layers):
        w = f"profile.layers[{i}].after"
        if (layer.after is not None) != dag:
            raise ProfileError(
                f"{w}: layer 0 {'has' if dag else 'has no'} 'after' list and this layer "
                f"{'none' if dag else 'one'}: every layer has one, or none does"
            )
        for a in layer.after or ():
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < n or a == i:
                raise ProfileError(f"{w}: {a!r} is not the index of another layer in [0, {n - 1}]")
    if not dag:
        return
    # Kahn: a cycle leaves layers that never become ready.
    indegree = [len(set(layer.after or ())) for layer in layers]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, layer in enumerate(layers):
        for a in set(layer.after or ()):
            users[a].append(i)
    ready = [i for i in range(n) if not indegree[i]]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for u in users[i]:
            indegree[u] -= 1
            if not indegree[u]:
                ready.append(u)
    if seen < n:
        stuck = next(i for i in range(n) if indegree[i])
        raise ProfileError(f"profile.layers[{stuck}].after: the layers' 'after' lists form a cycle")


def synthetic(
    layer_bytes: Sequence[int],
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    model: str = "synthetic",
    batch_size: int = 1,
) -> Profile:
    """A chain model with one float32 parameter per layer of the given sizes (tests, sweeps).

    Urgency is the paper's layer urgency 1 - l/L (l counted from 0), so layer 0 is the most urgent.
    A layer of 0 bytes has no parameter.
    """
    n = len(layer_bytes)
    if not (len(forward_s) == len(backward_s) == n):
        raise ProfileError("synthetic: layer_bytes, forward_s and backward_s must have the same length")
    layers = tuple(
        LayerSpec(f"layer{i}", float(f), float(b))
        for i, (f, b) in enumerate(zip(forward_s, backward_s, strict=True))
    )
    params = []
    for i, size in enumerate(layer_bytes):
        if size < 0 or size % 4:
            raise ProfileError(f"synthetic: layer_bytes[{i}] must be a multiple of 4 bytes >= 0, got {size}")
        if size:
            params.append(ParamSpec(f"layer{i}/kernel", (size // 4,), 4, 1 - i / n, i))
    return Profile(model, batch_size, layers, tuple(params), "layer", "synthetic")
