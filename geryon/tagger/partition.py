"""Partition plan: which shards every parameter becomes and which parameter server holds each one.

Geryon's rule (paper: "partition each parameter into multiple shards, one shard on each PS, then
slice so every slice is smaller than the slicing threshold"):

* a parameter of rank >= 1 becomes ``max(num_ps, s)`` shards along axis 0, where ``s`` is what
  TensorFlow's ``variable_axis_size_partitioner(max_shard_bytes=slice_bytes)`` (the engine of
  ``tf.distribute.experimental.partitioners.MaxSizePartitioner``) returns; the count is capped at
  ``shape[0]`` exactly as ``ParameterServerStrategy`` caps it;
* a rank-0 parameter (and one with ``shape[0] == 0``) stays one piece;
* ``slice_bytes=None`` disables slicing: every parameter becomes ``min(num_ps, shape[0])`` shards.

All sizes are in BYTES. The paper's "1024K" slicing threshold is ambiguous (1024 KiB, or 1024K
float32 elements = 4 MiB); Geryon never guesses and takes bytes explicitly (see `parse_size`).

The plan reproduces what ``ParameterServerStrategy`` does at run time when the job passes
``geryon.tagger.tf_partitioner.GeryonPartitioner`` as ``variable_partitioner``: TF's "div" split
(the first ``shape[0] % n`` shards get one extra row), shard names ``<name>/part_<i>`` and the
round-robin placement on ``/job:ps/task:<counter % num_ps>``. The strategy's counter starts at 0
and advances by one for every variable it places, i.e. once per shard of a sharded variable and
once per whole variable (including non-trainable ones such as optimizer slots, BatchNorm moving
statistics or a Keras ``SeedGenerator`` state), so `plan_partitions` must be given every variable
created under the strategy scope, in creation order.

This module must not import TensorFlow: it runs on hosts (switch rollout, CLI) that lack it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BYTES_PER_STRING",
    "PartitionPlan",
    "ShardPlan",
    "num_shards",
    "parse_size",
    "plan_partitions",
    "shard_rows",
]

# TF's partitioners estimate a tf.string element at 16 bytes (their `bytes_per_string` default).
BYTES_PER_STRING = 16

_SIZE_RE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")
# Keys are lower-case: the unit is matched case-insensitively.
_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}
_SIZE_FORMS = (
    "a positive integer number of bytes, optionally followed by a unit: "
    "K/KiB, M/MiB, G/GiB (powers of 1024) or kB/MB/GB (powers of 1000), "
    "e.g. '1048576', '1024K', '4MiB', '500kB'"
)


def parse_size(text: str) -> int:
    """Parse a byte size such as ``"1048576"``, ``"1024K"``, ``"4MiB"`` or ``"500kB"``.

    Units (matched case-insensitively, optional whitespace before the unit, integers only):

    * none or ``B``: bytes;
    * ``K``/``KiB``, ``M``/``MiB``, ``G``/``GiB``: binary, powers of 1024 (``"1024K"`` == 1 MiB);
    * ``kB``, ``MB``, ``GB``: decimal, powers of 1000.

    Because the match ignores case, ``"KB"`` is the DECIMAL kilobyte (1000 bytes), unlike ``"K"``
    (1024 bytes). The result is a number of bytes; it must be at least 1.

    Raises:
        TypeError: `text` is not a string.
        ValueError: `text` is not one of the forms above, or is zero.
    """
    if not isinstance(text, str):
        raise TypeError(f"size must be a string such as '1024K', got {type(text).__name__} {text!r}")
    match = _SIZE_RE.fullmatch(text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"invalid size {text!r}: expected {_SIZE_FORMS}")
    value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if value < 1:
        raise ValueError(f"invalid size {text!r}: must be at least 1 byte; expected {_SIZE_FORMS}")
    return value


def _check_int(value: Any, what: str, minimum: int) -> int:
    # operator.index accepts numpy integers too; bool is an int subclass but never a count.
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return number


def _check_shape(shape: Any) -> tuple[int, ...]:
    error = f"shape must be a fully defined sequence of non-negative integers, got {shape!r}"
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise ValueError(error)
    try:
        return tuple(_check_int(dim, "shape dimension", 0) for dim in shape)
    except ValueError:
        raise ValueError(error) from None


def _check_slice_bytes(slice_bytes: Any) -> int | None:
    if slice_bytes is None:
        return None
    return _check_int(slice_bytes, "slice_bytes (a size in bytes, or None for no slicing)", 1)


def _axis_size_shards(shape: tuple[int, ...], element_size: int, max_shard_bytes: int) -> int:
    """TF's ``variable_axis_size_partitioner`` along axis 0, float arithmetic included.

    The expressions mirror TF's own (``1.0 * (n / dim0) * size``, ``floor``, ``ceil``) so rounding
    agrees with it on every shape, not only on the exactly representable ones.
    """
    num_elements = math.prod(shape)
    if num_elements == 0:
        # TF divides by zero here; a row of zero bytes never needs slicing.
        return 1
    bytes_per_slice = 1.0 * (num_elements / shape[0]) * element_size
    slices_per_shard = max(1, math.floor(max_shard_bytes / bytes_per_slice))
    return math.ceil(1.0 * shape[0] / slices_per_shard)


def num_shards(shape: Sequence[int], element_size: int, num_ps: int, slice_bytes: int | None) -> int:
    """Number of shards (along axis 0) Geryon splits a parameter into.

    Args:
        shape: fully defined shape of the parameter.
        element_size: bytes per element (``dtype.size``; `BYTES_PER_STRING` for ``tf.string``).
        num_ps: number of parameter servers (>= 1).
        slice_bytes: slicing threshold in BYTES (>= 1), or None for no slicing.

    Returns:
        ``max(num_ps, MaxSizePartitioner(slice_bytes) shards)`` capped at ``shape[0]``; 1 for a
        rank-0 parameter or one with ``shape[0] == 0``. A single row larger than `slice_bytes`
        cannot be split further (only axis 0 is partitioned), so such shards exceed the threshold.

    Raises:
        ValueError: an argument is out of range (the message names it).
    """
    dims = _check_shape(shape)
    size = _check_int(element_size, "element_size (bytes per element)", 1)
    ps = _check_int(num_ps, "num_ps", 1)
    threshold = _check_slice_bytes(slice_bytes)
    if not dims or dims[0] == 0:
        # The strategy never partitions rank-0 variables, and rejects a partition count of 0.
        return 1
    shards = ps
    if threshold is not None:
        shards = max(shards, _axis_size_shards(dims, size, threshold))
    return min(shards, dims[0])


def shard_rows(dim0: int, n: int) -> list[int]:
    """Rows of each of `n` shards of a dimension of `dim0` rows, by TF's "div" strategy.

    The first ``dim0 % n`` shards get one extra row: ``shard_rows(13, 5) == [3, 3, 3, 2, 2]``.

    Raises:
        ValueError: ``dim0 < 0``, ``n < 1``, or ``n > dim0`` (which TF never produces: it caps the
            count at ``dim0``), except ``shard_rows(0, 1) == [0]``.
    """
    rows = _check_int(dim0, "dim0", 0)
    count = _check_int(n, "n (number of shards)", 1)
    if count > max(rows, 1):
        raise ValueError(f"n (number of shards) must be between 1 and dim0={rows}, got {count}")
    base, extra = divmod(rows, count)
    return [base + 1] * extra + [base] * (count - extra)


@dataclass(frozen=True)
class ShardPlan:
    """One shard of a parameter, as ``ParameterServerStrategy`` creates it.

    `name` is the TF variable name without ``:0``: ``<parent>/part_<index>`` for a sharded
    parameter, the parent name itself when it stays one piece. `offset` is the first row along
    axis 0; `bytes` the shard's size in bytes; `ps_task` the index in ``/job:ps/task:<ps_task>``.
    """

    parent: str
    index: int
    name: str
    shape: tuple[int, ...]
    offset: int
    bytes: int
    ps_task: int

    @property
    def device(self) -> str:
        return f"/job:ps/task:{self.ps_task}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "index": self.index,
            "name": self.name,
            "shape": list(self.shape),
            "offset": self.offset,
            "bytes": self.bytes,
            "ps_task": self.ps_task,
        }


@dataclass(frozen=True)
class PartitionPlan:
    """Shards of every parameter, in parameter creation order.

    `params[i]` holds the shards of the i-th parameter given to `plan_partitions`, in shard order.
    `slice_bytes` is the slicing threshold in BYTES, or None when slicing is off.
    """

    num_ps: int
    slice_bytes: int | None
    params: tuple[tuple[ShardPlan, ...], ...]

    def shards(self) -> Iterator[ShardPlan]:
        """Every shard, in the order the strategy creates them."""
        for shards in self.params:
            yield from shards

    @property
    def total_shards(self) -> int:
        return sum(len(shards) for shards in self.params)

    def bytes_per_ps(self) -> list[int]:
        """Bytes held by each parameter server, indexed by PS task."""
        totals = [0] * self.num_ps
        for shard in self.shards():
            totals[shard.ps_task] += shard.bytes
        return totals

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (sizes in bytes)."""
        return {
            "num_ps": self.num_ps,
            "slice_bytes": self.slice_bytes,
            "total_shards": self.total_shards,
            "bytes_per_ps": self.bytes_per_ps(),
            "params": [
                {"name": shards[0].parent, "shards": [shard.to_dict() for shard in shards]}
                for shards in self.params
            ],
        }


def plan_partitions(
    params: Sequence[tuple[str, Sequence[int], int]], num_ps: int, slice_bytes: int | None
) -> PartitionPlan:
    """Plan the shards of `params` and predict the PS of each one.

    Args:
        params: ``(name, shape, element_size)`` of EVERY variable created under the strategy
            scope, in creation order (the round-robin counter counts them all, trainable or not).
            `name` is the TF variable name without ``:0``; `element_size` is in bytes.
        num_ps: number of parameter servers in the cluster (>= 1).
        slice_bytes: slicing threshold in BYTES (>= 1), or None for no slicing.

    Raises:
        ValueError: an argument is out of range (the message names it and the parameter).
    """
    ps = _check_int(num_ps, "num_ps", 1)
    threshold = _check_slice_bytes(slice_bytes)
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise ValueError(f"params must be a sequence of (name, shape, element_size), got {params!r}")
    counter = 0  # ParameterServerStrategy's _variable_count: one tick per placed variable.
    planned: list[tuple[ShardPlan, ...]] = []
    for position, param in enumerate(params):
        if not isinstance(param, Sequence) or isinstance(param, (str, bytes)) or len(param) != 3:
            raise ValueError(f"params[{position}] must be (name, shape, element_size), got {param!r}")
        name, shape, element_size = param
        if not isinstance(name, str) or not name:
            raise ValueError(f"params[{position}]: name must be a non-empty string, got {name!r}")
        try:
            dims = _check_shape(shape)
            size = _check_int(element_size, "element_size (bytes per element)", 1)
            count = num_shards(dims, size, ps, threshold)
        except ValueError as error:
            raise ValueError(f"params[{position}] ({name!r}): {error}") from None
        row_counts = shard_rows(dims[0], count) if dims else [0]
        row_elements = math.prod(dims[1:])
        shards = []
        offset = 0
        for index, rows in enumerate(row_counts):
            shard_shape = (rows, *dims[1:]) if dims else ()
            shards.append(
                ShardPlan(
                    parent=name,
                    index=index,
                    name=f"{name}/part_{index}" if count > 1 else name,
                    shape=shard_shape,
                    offset=offset,
                    bytes=(rows * row_elements if dims else 1) * size,
                    ps_task=counter % ps,
                )
            )
            offset += rows
            counter += 1
        planned.append(tuple(shards))
    return PartitionPlan(num_ps=ps, slice_bytes=threshold, params=tuple(planned))
