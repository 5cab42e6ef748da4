"""Geryon's TensorFlow side: the `grpc+geryon` server protocol and its per-flow counters.

    import geryon.tf
    server = geryon.tf.server(cluster_spec, job_name="ps", task_index=0)  # instead of tf.distribute.Server
    resolver = SimpleClusterResolver(cluster_spec, rpc_layer=geryon.tf.PROTOCOL)  # the coordinator

`load()` builds the native extension if needed (cached; see geryon.tf.build), refuses a library built
for another TensorFlow release, and registers the protocol with TensorFlow. Counters and class marks
are read and set through the library's C functions with ctypes (no TF op needed, so they also work
outside a TF graph and cost no session run).
"""

from __future__ import annotations

import os
from typing import Any

from geryon.errors import UsageError

# The loader and its state live in geryon.tf.library (a leaf the package's own modules import);
# the package is the facade users import.
from geryon.tf.library import (
    DEFAULT_DATA_PORT_OFFSET,
    PROTOCOL,
    FlowCounter,
    Library,
    VersionMismatch,
    class_marks,
    flow_counters,
    is_loaded,
    load,
    open_flows,
    set_class_marks,
    staging_stats,
)
from geryon.tf.report import ClassificationReport, classification_report

__all__ = [
    "DEFAULT_DATA_PORT_OFFSET",
    "PROTOCOL",
    "ClassificationReport",
    "FlowCounter",
    "Library",
    "VersionMismatch",
    "class_marks",
    "classification_report",
    "flow_counters",
    "follow_band",
    "grpc_addresses",
    "is_loaded",
    "load",
    "open_flows",
    "server",
    "set_class_marks",
    "staging_stats",
]


def server(
    cluster_spec: Any,
    job_name: str,
    task_index: int,
    *,
    config: Any = None,
    start: bool = True,
    data_port_offset: int | None = None,
) -> Any:
    """`tf.distribute.Server` with the `grpc+geryon` protocol (tensors on Geryon's prioritized flows).

    `data_port_offset`: the data plane listens on gRPC port + offset, or on the next of its candidates
    (+ 1009, + 2018, ...) when that is taken; every task of a cluster must use the same offset
    (default 1000, or env GERYON_DATA_PORT_OFFSET).

    The task reports its flows' unresolved bytes to the agent on its host, to the registered job whose
    cluster spec lists this task, or to job GERYON_AGENT_JOB when set (geryon.tf.agent_report: nothing
    is sent without an agent; GERYON_AGENT_REPORT_S=off turns it off; a bad GERYON_AGENT_* value fails
    here, before the server starts).

    With GERYON_BANDS_ETCD and GERYON_JOB set, the task follows its job's band from the cluster
    controller (geryon.tf.band_follow): its classes' marks change live, on the flows open too, and
    TF's own gRPC connections to the cluster's tasks carry the band's class 0 marks.
    """
    if data_port_offset is not None:
        if not isinstance(data_port_offset, int) or data_port_offset == 0 or abs(data_port_offset) > 65535:
            raise UsageError(
                f"data_port_offset must be a non-zero int in -65535..65535, got {data_port_offset!r}"
            )
        os.environ["GERYON_DATA_PORT_OFFSET"] = str(data_port_offset)
    load()
    import tensorflow as tf

    from geryon.tf import band_follow
    from geryon.tf.agent_report import start_from_env

    # Its first report comes one interval later, from the running server's flows.
    start_from_env(_task_identity(tf, cluster_spec, job_name, task_index))
    # With GERYON_BANDS_ETCD set: the job's band from the cluster controller, applied live (TF's own
    # gRPC connections to the cluster's tasks too).
    band_follow.start_from_env(grpc_addresses(cluster_spec))
    return tf.distribute.Server(
        cluster_spec, job_name=job_name, task_index=task_index, protocol=PROTOCOL, config=config, start=start
    )


def follow_band(cluster_spec: Any) -> Any:
    """For a process that starts no geryon.tf.server() (the chief, the coordinator): follow the job's
    band as the environment says (GERYON_BANDS_ETCD, GERYON_JOB, ...; geryon.tf.band_follow), so its
    own gRPC connections to the cluster's tasks (the step calls) carry the band's class 0 marks.
    Returns the follower, or None when GERYON_BANDS_ETCD is unset. Call it after load()."""
    from geryon.tf import band_follow

    load()
    return band_follow.start_from_env(grpc_addresses(cluster_spec))


def grpc_addresses(cluster_spec: Any) -> list[str]:
    """Every task address of `cluster_spec` (a tf.train.ClusterSpec, or its dict form)."""
    spec = cluster_spec.as_dict() if hasattr(cluster_spec, "as_dict") else cluster_spec
    out: list[str] = []
    for tasks in dict(spec).values():
        out += list(tasks.values()) if isinstance(tasks, dict) else list(tasks)
    return [str(a) for a in out]


def _task_identity(tf: Any, cluster_spec: Any, job_name: str, task_index: int) -> Any:
    """This task's job, index and address in `cluster_spec` (the agent finds its job by them); None
    when the spec does not list it (TF's own server start then says what is wrong)."""
    from geryon.tf.agent_report import TaskIdentity

    try:
        address = tf.train.ClusterSpec(cluster_spec).task_address(job_name, task_index)
    except (TypeError, ValueError, KeyError):
        return None
    return TaskIdentity(job_name, int(task_index), address)
