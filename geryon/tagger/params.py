"""What the tagger knows about one parameter (a trainable variable, or one shard of a sharded one)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """A trainable variable (or one shard of it).

    `name` is the parameter's key in the map_table, unique within a model: the Keras variable path
    when there is one (``net/early/kernel``), else the TensorFlow variable name. `runtime_name` is the
    tf.Variable's own name without ``:0``; Keras 3 does not make it unique (two Dense layers of a
    subclassed model both own a ``net/kernel``), so it is kept for display and lookups only.
    """

    name: str
    runtime_name: str
    shape: tuple[int, ...]
    dtype: str
    element_size: int
    # Group used by the `layer` urgency: the Keras layer path, or the name scope for raw graphs.
    layer: str
    # For shards of a ShardedVariable: the parent variable's name and this shard's index.
    parent: str | None = None
    shard_index: int | None = None
    num_shards: int | None = None

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        return self.num_elements * self.element_size

    @property
    def logical_name(self) -> str:
        """The variable the user wrote: the parent for a shard, the name itself otherwise."""
        return self.parent if self.parent is not None else self.name


def scope_of(name: str) -> str:
    """The name scope of a variable name (``a/b/kernel`` -> ``a/b``); the name itself at top level."""
    head, sep, _ = name.rpartition("/")
    return head if sep else name
