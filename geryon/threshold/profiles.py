"""Layer profiles of real Keras models, with compute times derived from FLOPs and a device throughput.

The parameters come from the tagger (exact shapes, Keras paths as names, urgency from the tagging). The
compute layers are the model's Keras layers that own trainable parameters, in the order the forward
pass first consumes their parameters (the tagger's consumption order). Parameter-free layers
(activations, pooling, padding, adds, dropout) are folded into the nearest preceding parameter layer
of the model's topological order; the ones before the first parameter layer (input, padding) fold
into the first. Why fold: in the iteration-time model a layer waits for its own parameters to arrive,
and a parameter-free layer has none to wait for; folded, its compute still runs right after its
predecessor (same forward and backward timeline), and a transfer order of the parameter layers
cannot make it wait for the link. It also keeps ResNet-50 at 107 layers instead of 177.

FLOPs count one multiply-add as 2 floating point operations, so a device's peak FLOP/s applies
directly (VGG-19: 39.3e9 FLOPs per 224x224 image, i.e. the 19.6e9 multiply-adds that He et al. quote
as "FLOPs"). The forward FLOPs of a layer come from its configuration and its input/output shapes in
the model's graph; backward is 2x forward (a gradient for the input and one for the weights, each
about as costly as the forward pass). Time = FLOPs / (peak FLOP/s x efficiency); the efficiency
factor (default 1.0: peak) is the fraction of peak the kernels reach, and lands in the source string.

Only functional and Sequential Keras models (nested ones included) have per-layer shapes to count;
a subclassed model gets a clear error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from geryon.threshold.profile import LayerSpec, ParamSpec, Profile, ProfileError

# Peak fp32 throughput in FLOP/s (2 per FMA), boost clock, from the vendors' data sheets.
DEVICES: dict[str, float] = {
    "k40": 4.29e12,  # Tesla K40 (the paper's testbed, K40c)
    "k80": 4.37e12,  # one GK210 of a Tesla K80 board
    "p100": 9.3e12,  # Tesla P100 PCIe
    "v100": 15.7e12,  # Tesla V100 SXM2 (the paper's Fig. 4b)
    "t4": 8.1e12,
    "a100": 19.5e12,  # without TF32 tensor cores
    "h100": 67.0e12,  # H100 SXM
}

BACKWARD_FACTOR = 2.0

# FLOPs per output element of element-wise layers, by Keras class name.
_PER_ELEMENT: dict[str, float] = {
    "ReLU": 1,
    "LeakyReLU": 1,
    "PReLU": 2,
    "ELU": 1,
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "Dropout": 1,  # training: multiply by the mask
    "SpatialDropout1D": 1,
    "SpatialDropout2D": 1,
    "SpatialDropout3D": 1,
    "GaussianDropout": 1,
    "GaussianNoise": 1,
    "Rescaling": 2,
    "Normalization": 2,
    # Training-mode normalization: mean 1, variance 2, normalize 2, scale and shift 2.
    "BatchNormalization": 7,
    "LayerNormalization": 7,
    "GroupNormalization": 7,
    "UnitNormalization": 3,
}
# Layers that only move or pick data.
_FREE = frozenset(
    {
        "InputLayer",
        "Flatten",
        "Reshape",
        "Permute",
        "RepeatVector",
        "Identity",
        "ZeroPadding1D",
        "ZeroPadding2D",
        "ZeroPadding3D",
        "Cropping1D",
        "Cropping2D",
        "Cropping3D",
        "Concatenate",
        "Embedding",
        "UpSampling1D",
        "UpSampling2D",
        "UpSampling3D",
    }
)
# FLOPs per output element of an activation function.
_ACTIVATION: dict[str, float] = {"linear": 0, "softmax": 5, "log_softmax": 5}


@dataclass(frozen=True)
class KerasLeaf:
    """One leaf Keras layer and its calls in the model's graph: per call, input and output shapes."""

    name: str  # unique path in the model (nested models: outer/inner)
    layer: Any
    calls: tuple[tuple[tuple[tuple[int | None, ...], ...], tuple[tuple[int | None, ...], ...]], ...]


@dataclass(frozen=True)
class ModelStructure:
    """How a Keras model maps onto profile layers: what both FLOPs counting and the profiler need."""

    model: str
    leaves: tuple[KerasLeaf, ...]  # topological order
    # Per profile layer, in forward order: indices into `leaves`, the parameter layer first.
    groups: tuple[tuple[int, ...], ...]
    params: tuple[ParamSpec, ...]
    urgency_function: str
    input_shape: tuple[int, ...]
    keras_model: Any = field(default=None, compare=False, repr=False)

    def group_names(self) -> list[str]:
        return [self.leaves[g[0]].name for g in self.groups]

    def folded(self) -> dict[str, list[str]]:
        """Parameter layer -> the parameter-free layers folded into it (only non-empty ones)."""
        return {
            self.leaves[g[0]].name: [self.leaves[i].name for i in g[1:]] for g in self.groups if len(g) > 1
        }


def profile_from_model(
    model_or_spec: Any,
    *,
    batch_size: int = 32,
    device: str | float = "k40",
    efficiency: float = 1.0,
    input_shape: Sequence[int] | None = None,
    urgency: str = "layer",
) -> Profile:
    """A profile of a Keras model (or a built-in name / ``module:callable``) timed from its FLOPs.

    `device` is a name from DEVICES or a peak throughput in FLOP/s; `efficiency` in (0, 1] is the
    fraction of that peak the kernels reach.
    """
    _check_batch(batch_size)
    name, peak = resolve_device(device)
    _check_efficiency(efficiency)
    _check_urgency(urgency)
    if isinstance(model_or_spec, str):
        shape = _check_input_shape(input_shape)
        structure, per_sample = _cached_flops(model_or_spec, shape, urgency)
    else:
        structure = model_structure(model_or_spec, input_shape=input_shape, urgency=urgency)
        per_sample = tuple(group_flops(structure))
    flops = [f * batch_size for f in per_sample]
    rate = peak * efficiency
    layers = tuple(
        LayerSpec(layer_name, f / rate, BACKWARD_FACTOR * f / rate, f)
        for layer_name, f in zip(structure.group_names(), flops, strict=True)
    )
    source = f"flops:{name}@{_short(peak)}" + (f",eff={efficiency:g}" if efficiency != 1.0 else "")
    meta = {
        "input_shape": list(structure.input_shape),
        "device": name,
        "peak_flops_per_s": peak,
        "efficiency": efficiency,
        "backward_factor": BACKWARD_FACTOR,
        "flops_per_sample": sum(per_sample),
        "flop_convention": "2 per multiply-add",
        "estimated_layers": sorted(_estimated(structure)),
        "folded": structure.folded(),
    }
    return Profile(
        structure.model, batch_size, layers, structure.params, structure.urgency_function, source, meta
    )


def retime(profile: Profile, *, device: str | float, efficiency: float = 1.0) -> Profile:
    """The same profile timed for another device from the FLOPs each layer records."""
    name, peak = resolve_device(device)
    _check_efficiency(efficiency)
    missing = [i for i, layer in enumerate(profile.layers) if layer.flops is None]
    if missing:
        raise ProfileError(
            f"profile.layers[{missing[0]}].flops: needed to re-time a profile, but "
            f"{len(missing)} layer(s) have none (a measured profile: use Profile.scaled instead)"
        )
    rate = peak * efficiency
    layers = tuple(
        replace(layer, forward_s=layer.flops / rate, backward_s=BACKWARD_FACTOR * layer.flops / rate)
        for layer in profile.layers
        if layer.flops is not None
    )
    meta = {**profile.meta, "device": name, "peak_flops_per_s": peak, "efficiency": efficiency}
    source = f"flops:{name}@{_short(peak)}" + (f",eff={efficiency:g}" if efficiency != 1.0 else "")
    return Profile(
        profile.model, profile.batch_size, layers, profile.params, profile.urgency_function, source, meta
    )


def resolve_device(device: str | float) -> tuple[str, float]:
    """(name, peak FLOP/s) for a DEVICES name or a throughput number."""
    if isinstance(device, str):
        key = device.strip().lower()
        if key not in DEVICES:
            raise ProfileError(
                f"device {device!r}: unknown; allowed: {', '.join(DEVICES)}, or a throughput in FLOP/s"
            )
        return key, DEVICES[key]
    if (
        isinstance(device, bool)
        or not isinstance(device, int | float)
        or not math.isfinite(device)
        or device <= 0
    ):
        raise ProfileError(f"device: expected a device name or a throughput in FLOP/s > 0, got {device!r}")
    return "custom", float(device)


def clear_cache() -> None:
    _cached_flops.cache_clear()


# --- structure: Keras layers -> profile layers -------------------------------------------------------


def model_structure(
    model_or_spec: Any, *, input_shape: Sequence[int] | None = None, urgency: str = "layer"
) -> ModelStructure:
    """Builds (for a spec) and tags a Keras model, and groups its layers into profile layers."""
    from geryon.tagger import tag_model
    from geryon.tagger.models import ModelLoadError, build_model

    shape = _check_input_shape(input_shape)
    _check_urgency(urgency)
    if isinstance(model_or_spec, str):
        try:
            model = build_model(model_or_spec, shape)
        except ModelLoadError as e:
            raise ProfileError(f"model: {e}") from None
        except Exception as e:  # a user's callable, or Keras rejecting the input shape
            raise ProfileError(
                f"model {model_or_spec!r} could not be built: {type(e).__name__}: {e}"
            ) from None
        name = model_or_spec
    else:
        model = model_or_spec
        name = getattr(model, "name", None) or type(model).__name__
    if not (hasattr(model, "layers") and hasattr(model, "trainable_variables")):
        raise ProfileError(
            f"model {name!r}: expected a functional or Sequential Keras model, got {type(model).__name__}"
        )
    leaves = _leaves(model, name)
    model_inputs = getattr(model, "inputs", None) or []
    if len(model_inputs) != 1:
        raise ProfileError(f"model {name!r}: expected a model with one input, it has {len(model_inputs)}")
    dims = tuple(model_inputs[0].shape[1:])
    if any(d is None for d in dims):
        raise ProfileError(
            f"model {name!r}: its input shape {list(dims)} has unknown sizes; build it for a fixed shape"
        )
    model_shape = tuple(int(d) for d in dims)
    if shape is not None and shape != model_shape:
        raise ProfileError(
            f"input_shape: {list(shape)} differs from the model's input {list(model_shape)}; "
            "build the model for that shape instead"
        )
    try:
        tagging = tag_model(model, urgency)
    except ValueError as e:
        raise ProfileError(f"model {name!r}: {e}") from None
    if any(p.parent is not None for p in tagging.params):
        raise ProfileError(
            f"model {name!r}: its variables are shards; profile the unsharded model (the simulator "
            "partitions parameters itself)"
        )

    owner_of_path: dict[str, int] = {}
    for i, leaf in enumerate(leaves):
        for v in leaf.layer.trainable_variables:
            owner_of_path[v.path] = i
    unknown = [p.name for p in tagging.params if p.name not in owner_of_path]
    if unknown:
        raise ProfileError(f"model {name!r}: parameters not owned by any leaf layer: {unknown[:5]}")

    # Parameter layers in the order the forward pass first consumes one of their parameters;
    # layers whose parameters are never read go last, in model order.
    position: dict[int, int] = {}
    consumed = tagging.consumption.consumer
    for rank, p in enumerate(tagging.consumption.order):
        if consumed[p] is not None:
            position.setdefault(owner_of_path[tagging.params[p].name], rank)
    param_leaves = sorted(
        set(owner_of_path.values()), key=lambda i: (i not in position, position.get(i, 0), i)
    )
    # Fold each parameter-free layer into the nearest preceding parameter layer (model order).
    members: dict[int, list[int]] = {i: [i] for i in param_leaves}
    current: int | None = None
    leading: list[int] = []
    for i in range(len(leaves)):
        if i in members:
            current = i
        elif current is None:
            leading.append(i)
        else:
            members[current].append(i)
    members[param_leaves[0]].extend(leading)
    groups = tuple(tuple(members[i]) for i in param_leaves)

    index_of_leaf = {leaf: j for j, leaf in enumerate(param_leaves)}
    params = tuple(
        ParamSpec(p.name, p.shape, p.element_size, u, index_of_leaf[owner_of_path[p.name]])
        for p, u in zip(tagging.params, tagging.urgency, strict=True)
    )
    return ModelStructure(name, tuple(leaves), groups, params, tagging.urgency_function, model_shape, model)


def _leaves(model: Any, name: str, prefix: str = "", repeat: int = 1) -> list[KerasLeaf]:
    out: list[KerasLeaf] = []
    for layer in model.layers:
        calls = tuple(
            (
                tuple(_shape(t) for t in _flat(node.input_tensors)),
                tuple(_shape(t) for t in _flat(node.outputs)),
            )
            for node in layer._inbound_nodes
        )
        path = f"{prefix}{layer.name}"
        if hasattr(layer, "layers") and hasattr(layer, "inputs"):  # a nested functional model
            out.extend(_leaves(layer, name, f"{path}/", repeat * max(1, len(calls))))
            continue
        if not calls and layer.trainable_variables:
            raise ProfileError(
                f"model {name!r}: layer {path!r} has no calls in the model's graph; FLOPs need a "
                "functional or Sequential Keras model (for a subclassed one, use measure_profile "
                "on a functional equivalent)"
            )
        out.append(KerasLeaf(path, layer, calls * repeat))
    return out


def _flat(tensors: Any) -> list[Any]:
    if isinstance(tensors, list | tuple):
        return [t for item in tensors for t in _flat(item)]
    if isinstance(tensors, dict):
        return [t for item in tensors.values() for t in _flat(item)]
    return [tensors]


def _shape(tensor: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None else int(d) for d in tensor.shape)


# --- FLOPs ------------------------------------------------------------------------------------------


def group_flops(structure: ModelStructure) -> list[float]:
    """Forward FLOPs of one sample per profile layer."""
    per_leaf = [
        sum(layer_flops(leaf.layer, ins, outs) for ins, outs in leaf.calls) for leaf in structure.leaves
    ]
    return [float(sum(per_leaf[i] for i in g)) for g in structure.groups]


def layer_flops(
    layer: Any, inputs: Sequence[tuple[int | None, ...]], outputs: Sequence[tuple[int | None, ...]]
) -> float:
    """Forward FLOPs of one call of `layer` on one sample (batch dimension dropped)."""
    family = _family(layer)
    out = sum(_elements(s) for s in outputs)
    if family in ("BaseConv", "BaseDepthwiseConv", "BaseSeparableConv", "BaseConvTranspose"):
        in_shape, out_shape = inputs[0][1:], outputs[0][1:]
        first = getattr(layer, "data_format", "channels_last") == "channels_first"
        in_c = int(in_shape[0] if first else in_shape[-1])  # type: ignore[arg-type]
        out_spatial = _elements(out_shape[1:] if first else out_shape[:-1])
        kernel = math.prod(layer.kernel_size)
        if family == "BaseConv":
            macs = out_spatial * layer.filters * kernel * in_c // getattr(layer, "groups", 1)
        elif family == "BaseDepthwiseConv":
            macs = out_spatial * in_c * layer.depth_multiplier * kernel
        elif family == "BaseSeparableConv":
            depthwise = in_c * layer.depth_multiplier
            macs = out_spatial * depthwise * (kernel + layer.filters)
        else:  # transposed: every input element scatters a kernel into every output channel
            in_spatial = _elements(in_shape[1:] if first else in_shape[:-1])
            macs = in_spatial * in_c * kernel * layer.filters
        bias = out if getattr(layer, "use_bias", False) else 0
        return 2.0 * macs + bias + _activation_flops(layer, out)
    if family == "Dense":
        in_features = int(inputs[0][-1])  # type: ignore[arg-type]
        macs = out * in_features
        bias = out if layer.use_bias else 0
        return 2.0 * macs + bias + _activation_flops(layer, out)
    if family == "BasePooling":
        return float(out * math.prod(layer.pool_size))
    if family == "BaseGlobalPooling":
        return float(sum(_elements(s[1:]) for s in inputs))
    if family == "Merge":
        return float(out * max(0, len(inputs) - 1)) if type(layer).__name__ != "Concatenate" else 0.0
    if family == "Activation":
        return _activation_flops(layer, out)
    if family in _FREE:
        return 0.0
    if family in _PER_ELEMENT:
        return _PER_ELEMENT[family] * out
    return float(out)  # unknown: one FLOP per output element (listed in meta.estimated_layers)


_FAMILIES = (
    "BaseConv",
    "BaseDepthwiseConv",
    "BaseSeparableConv",
    "BaseConvTranspose",
    "BasePooling",
    "BaseGlobalPooling",
    "Merge",
)


def _family(layer: Any) -> str:
    """Keras keeps the layer families' base classes private, so match on class names in the MRO."""
    names = [k.__name__ for k in type(layer).__mro__]
    for family in _FAMILIES:
        if family in names:
            return family
    for name in names:
        if name in ("Dense", "Activation") or name in _FREE or name in _PER_ELEMENT:
            return name
    return names[0]


def _known(layer: Any) -> bool:
    family = _family(layer)
    return (
        family in _FAMILIES or family in ("Dense", "Activation") or family in _FREE or family in _PER_ELEMENT
    )


def _estimated(structure: ModelStructure) -> set[str]:
    return {type(leaf.layer).__name__ for leaf in structure.leaves if not _known(leaf.layer)}


def _activation_flops(layer: Any, elements: int) -> float:
    fn = getattr(layer, "activation", None)
    if fn is None:
        return 0.0
    name = getattr(fn, "__name__", "linear")
    return float(_ACTIVATION.get(name, 1) * elements)


def _elements(shape: Sequence[int | None]) -> int:
    return math.prod(1 if d is None else d for d in shape)


# --- validation and cache ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _cached_flops(
    spec: str, input_shape: tuple[int, ...] | None, urgency: str
) -> tuple[ModelStructure, tuple[float, ...]]:
    # Building and tagging a model takes seconds; its structure and FLOPs do not depend on the batch
    # or the device, so sweeps over those reuse one build.
    structure = model_structure(spec, input_shape=input_shape, urgency=urgency)
    return structure, tuple(group_flops(structure))


def _check_batch(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ProfileError(f"batch_size: expected an integer >= 1, got {batch_size!r}")


def _check_efficiency(efficiency: Any) -> None:
    if (
        isinstance(efficiency, bool)
        or not isinstance(efficiency, int | float)
        or not math.isfinite(efficiency)
        or not 0 < efficiency <= 1
    ):
        raise ProfileError(f"efficiency: expected a fraction of peak in (0, 1], got {efficiency!r}")


def _check_urgency(urgency: Any) -> None:
    from geryon.tagger.urgency import URGENCY_FUNCTIONS

    if urgency not in URGENCY_FUNCTIONS:
        allowed = ", ".join(sorted(URGENCY_FUNCTIONS))
        raise ProfileError(f"urgency {urgency!r}: unknown urgency function; allowed: {allowed}")


def _check_input_shape(input_shape: Sequence[int] | None) -> tuple[int, ...] | None:
    if input_shape is None:
        return None
    shape = tuple(input_shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ProfileError(f"input_shape: expected positive integers like (224, 224, 3), got {input_shape!r}")
    return shape


def _short(x: float) -> str:
    return f"{x:.3g}".replace("e+", "e")
