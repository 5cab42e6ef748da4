"""`GeryonPartitioner`: the partition plan as a ``ParameterServerStrategy`` variable partitioner.

A job that passes ``variable_partitioner=GeryonPartitioner(num_ps, slice_bytes)`` to
``tf.distribute.experimental.ParameterServerStrategy`` gets exactly the shards that
`geryon.tagger.partition.plan_partitions` predicts, because both call `partition.num_shards`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from geryon.tagger.partition import BYTES_PER_STRING, num_shards

__all__ = ["GeryonPartitioner"]


class GeryonPartitioner(tf.distribute.experimental.partitioners.Partitioner):
    """Split each variable into ``max(num_ps, slices needed for slice_bytes)`` shards on axis 0.

    Args:
        num_ps: number of parameter servers (>= 1); normally the cluster's ``ps`` task count.
        slice_bytes: slicing threshold in BYTES (>= 1), or None for no slicing (one shard per PS).
            Use `geryon.tagger.partition.parse_size` to turn ``"1024K"`` into bytes.
        bytes_per_string: size assumed for a ``tf.string`` element, as TF's own partitioners do.
    """

    def __init__(
        self, num_ps: int, slice_bytes: int | None, bytes_per_string: int = BYTES_PER_STRING
    ) -> None:
        # Validate now (on a dummy shape) so a bad argument fails at construction, not at the
        # first variable deep inside strategy.scope().
        num_shards((1,), bytes_per_string, num_ps, slice_bytes)
        self._num_ps = num_ps
        self._slice_bytes = slice_bytes
        self._bytes_per_string = bytes_per_string

    @property
    def num_ps(self) -> int:
        return self._num_ps

    @property
    def slice_bytes(self) -> int | None:
        return self._slice_bytes

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        """Partition counts per axis: ``[n, 1, 1, ...]`` with ``n`` from `partition.num_shards`."""
        if axis != 0:
            # ParameterServerStrategy only partitions axis 0, and so does Geryon's plan.
            raise ValueError(f"GeryonPartitioner only partitions axis 0, got axis={axis}")
        shape = tf.TensorShape(shape)
        if not shape.is_fully_defined():
            raise ValueError(f"GeryonPartitioner needs a fully defined shape, got {shape}")
        dtype = tf.as_dtype(dtype)
        element_size = self._bytes_per_string if dtype.base_dtype == tf.string else dtype.size
        dims = tuple(shape.as_list())
        partitions = [1] * len(dims)
        if dims:
            partitions[0] = num_shards(dims, element_size, self._num_ps, self._slice_bytes)
        return partitions

    def __repr__(self) -> str:
        return f"GeryonPartitioner(num_ps={self._num_ps}, slice_bytes={self._slice_bytes})"
