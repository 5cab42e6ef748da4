"""TF1 between-graph training (`replica_device_setter` + sessions): which edges carry which parameter.

A TF1 session runs the graph pass once per partition, in the process that runs that partition, so
no pass sees both ends of a Send/Recv pair and none is renamed (renaming one end would hang the
step). The edge name still names its producer (``edge_<n>_<producer node>``), and both ends agree on
it, so the map_table carries *producer bindings* instead: the node names, taken from the client
graph, whose outputs are a parameter's value (its reads on the PS) or its gradient (what its update
op consumes, sent by the worker). The rendezvous resolves an unannotated edge through them.

    classes = Tf1Classes(graph, cluster_spec, thresholds=[0.5])
    classes.install("grpc://localhost:2222")     # before the first training step
    ...
    classes.set_thresholds("grpc://localhost:2222", [0.3])

Between-graph workers build the same graph, so their node names, and the bindings, are the same.
A name bound to more than one parameter (a learning rate feeding every update) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from geryon.tagger.map_table import MapTable
from geryon.tf.map_table_native import consumption_ranks, to_native
from geryon.tf.strategy import InstallError, native_ops, task_devices

__all__ = ["Tf1Classes", "producer_bindings"]

_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
# Ops through which a variable's value leaves its PS (the read side of a pull).
_READ_OPS = frozenset({"ReadVariableOp", "Identity", "ResourceGather", "ResourceGatherNd", "Snapshot"})
_UPDATE_PREFIXES = (
    "Apply",
    "ResourceApply",
    "SparseApply",
    "ResourceSparseApply",
    "AssignSub",
    "AssignAdd",
    "ResourceScatter",
    "ScatterSub",
    "ScatterAdd",
)


def producer_bindings(graph: Any, variable_ids: dict[str, int]) -> dict[str, int]:
    """Producer node name -> parameter id, for the variable ops named in `variable_ids`.

    Pulls: the variable's reads (through Identity). Pushes: the tensors its update ops consume
    (besides the variable itself), and the Identity chain behind them, where the gradient may
    cross from the worker.
    """
    found: dict[str, set[int]] = {}

    def bind(name: str, param_id: int) -> None:
        found.setdefault(name, set()).add(param_id)

    def variable_of(op: Any) -> Any:
        # The variable op behind an update's first input (a ref, a handle, or a read of it).
        for _ in range(8):
            if op.type in _VARIABLE_OPS:
                return op
            if op.type not in _READ_OPS or not op.inputs:
                return None
            op = op.inputs[0].op
        return None

    for op in graph.get_operations():
        if op.type in _VARIABLE_OPS and op.name in variable_ids:
            param_id = variable_ids[op.name]
            frontier = [op]
            while frontier:
                for out in frontier.pop().outputs:
                    for consumer in out.consumers():
                        if consumer.type in _READ_OPS:
                            bind(consumer.name, param_id)
                            frontier.append(consumer)
        if op.type.startswith(_UPDATE_PREFIXES) and op.inputs:
            variable = variable_of(op.inputs[0].op)
            if variable is None or variable.name not in variable_ids:
                continue
            param_id = variable_ids[variable.name]
            for tensor in list(op.inputs)[1:]:
                producer = tensor.op
                bind(producer.name, param_id)
                while producer.type == "Identity" and producer.inputs:
                    producer = producer.inputs[0].op
                    bind(producer.name, param_id)
    return {name: next(iter(ids)) for name, ids in found.items() if len(ids) == 1}


class Tf1Classes:
    """The map_table of a TF1 graph, with the producer bindings its sessions' edges resolve through."""

    def __init__(
        self,
        graph: Any,
        cluster_spec: Any,
        thresholds: Sequence[float] = (0.5,),
        *,
        urgency: str = "layer",
        default_class: int | None = None,
    ) -> None:
        import tensorflow as tf

        from geryon.tagger import tag_model
        from geryon.tagger.tf_graph import parameters_of

        self.tagging = tag_model(graph, urgency=urgency)
        # Unbound edges (no parameter, or one the bindings miss) take the least urgent class by default.
        ts = list(thresholds)
        default = len(ts) if default_class is None else default_class
        self.map_table: MapTable = self.tagging.map_table(ts, default_class=default)
        with graph.as_default():
            _, variables = parameters_of(tf.compat.v1.trainable_variables())
        ids = {e.name: e.id for e in self.map_table.entries}
        params = self.tagging.params
        self.bindings = producer_bindings(
            graph, {v.op.name: ids[p.name] for p, v in zip(params, variables, strict=True)}
        )
        self.devices = {name: d for name, d in task_devices(cluster_spec).items() if d}

    def install(self, target: str) -> dict[str, int]:
        """Installs the current map_table on every ps and worker task, through a session on `target`."""
        import tensorflow as tf

        text = to_native(self.map_table, self.bindings, consumption_ranks(self.tagging.consumption.order))
        ops = native_ops()
        graph = tf.Graph()
        with graph.as_default():
            versions = {}
            for name, device in self.devices.items():
                with tf.device(device):  # the text and the op on one task: nothing crosses tasks
                    versions[name] = ops.geryon_set_map_table(tf.constant(text))
        # Only the tasks it installs on: a session otherwise waits for every task of the cluster
        # spec, including a chief that runs no server.
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker"])
        try:
            with tf.compat.v1.Session(target, graph=graph, config=config) as session:
                return {name: int(v) for name, v in session.run(versions).items()}
        except tf.errors.OpError as e:
            raise InstallError(
                f"installing map_table version {self.map_table.version} on {sorted(self.devices)} failed: "
                f"{str(e).splitlines()[0]}"
            ) from None

    def set_thresholds(self, target: str, thresholds: Iterable[float]) -> MapTable:
        """The next version for `thresholds`, installed on every task; the next step uses it."""
        self.map_table = self.map_table.with_thresholds(thresholds)
        self.install(target)
        return self.map_table
