"""The native extension as this process holds it: loading (build if needed, version check, protocol
registration), its per-flow counters and class marks through ctypes. A leaf of geryon.tf: the
package re-exports it, and report, strategy and agent_report import it without a circle."""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tf.build import BUILD_INFO, BuildError
from geryon.tf.build import build as build_library

PROTOCOL = "grpc+geryon"
# The data plane of a task listens on its gRPC port + this offset (env GERYON_DATA_PORT_OFFSET), or
# on a later candidate when that port is taken (see native/rendezvous/README.md).
DEFAULT_DATA_PORT_OFFSET = 1000
MAX_CLASSES = 8
# SO_PRIORITY of classes 0..7 unless told otherwise (the native library's defaults too). Without the
# host agent the qdisc is pfifo_fast (or `prio` with its default priomap), whose prio2band table
# (net/sched/sch_generic.c) is 1 2 2 2 1 2 0 0 1 ...: priority 6 (TC_PRIO_INTERACTIVE) is band 0, 0
# (unmarked traffic) band 1, 2 (TC_PRIO_BULK) band 2. So class 0 goes first, class 1 with unmarked
# traffic, the rest after it. DSCP >> 3 (EF 46 -> 5, AF31 26 -> 3) would put every class in band 2,
# below unmarked traffic.
DEFAULT_CLASS_PRIORITY = (6, 0, 2, 2, 2, 2, 2, 2)


class VersionMismatch(BuildError):
    """The native library was built for another TensorFlow release than the one imported."""


@dataclass(frozen=True)
class Library:
    path: Path
    tf_version: str
    ops: ModuleType  # what tf.load_library returned: the library's custom ops, if any
    cdll: ctypes.CDLL


@dataclass(frozen=True)
class FlowCounter:
    """One flow of this process: `consumer` flows receive tensors, `producer` flows send them."""

    role: str
    local_task: str
    peer_task: str
    klass: int
    dscp: int
    local_port: int
    peer_port: int
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    queue_ns: int  # producer: time responses waited for the socket; consumer: request round trips
    connections: int
    errors: int
    aborted: int  # consumer: receives ended by a step abort or cancellation before their tensor came
    # responses whose edge carries no parameter id (the graph pass could not trace it, or it carries no
    # parameter); they take the map_table's default class (the least urgent by default). Both roles: the
    # consumer tells the producer in its request, so a flow's two ends count the same responses.
    unresolved_bytes: int = 0
    unresolved_messages: int = 0
    # producer (issue 14): ns in the ordered queue's code (insert, pick), chunk frames sent, and
    # preemptions (another response went out while a chunked one was half sent)
    order_ns: int = 0
    chunks_sent: int = 0
    preemptions: int = 0
    # producer, host order: times a writer yielded to a more urgent response of its class on another
    # connection of this process, and the ns it waited
    host_waits: int = 0
    host_wait_ns: int = 0
    # issue 16: consumer: cancel frames sent for aborted receives; producer: responses dropped (queued
    # or half sent in chunks) because their consumer cancelled them
    cancels_sent: int = 0
    cancelled: int = 0
    # producer (issue 16): steps aborted (as TF's Worker::AbortStep does) because this flow's consumer
    # went away, or cancelled a request, while a request of that step still waited for its tensor
    steps_aborted: int = 0
    # consumer (issue 16): requests that went out with another thread's write (one sendmsg for several)
    requests_combined: int = 0
    # producer, burst hold: gap waits that ran out (held responses went up to hold_gap_us late), and
    # gap waits skipped because the burst already had as many requests as the connection's last ones
    gap_waits: int = 0
    gap_skips: int = 0
    # producer: the chunk size in force when the last chunk frame started (chunk_bytes, more on a
    # connection that drains faster than 10 Gbit/s under the sender option chunk_scale=link), and the
    # last drain rate measured in bytes/s (0: none yet)
    chunk_bytes_last: int = 0
    drain_bytes_per_s: int = 0

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> FlowCounter:
        fields = dict(item)
        fields["klass"] = fields.pop("class")
        return cls(**fields)


_lock = threading.Lock()
_loaded: Library | None = None


def _check_version(found: str, expected: str, path: Path) -> None:
    if found != expected:
        raise VersionMismatch(
            f"{path} was built for TensorFlow {found}, but TensorFlow {expected} is imported; "
            "rebuild it with `geryon native build` (its internal C++ ABI differs between releases)"
        )


def is_loaded() -> bool:
    """Whether this process loaded the extension (load() ran)."""
    return _loaded is not None


def load(library: Path | None = None, progress: Progress | None = None) -> Library:
    """Builds (if needed) and loads the extension once per process; registers `grpc+geryon`."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        from geryon.tfenv import import_tensorflow

        tf = import_tensorflow()
        if library is not None:
            path = Path(library)
        else:
            from geryon.tf import sanitizers

            # GERYON_SANITIZER=address|thread: the instrumented variant (native/rendezvous/README.md).
            sanitizer = sanitizers.active()
            if sanitizer is not None:
                sanitizers.check_preloaded(sanitizer)
            path = build_library(progress=progress, sanitizer=sanitizer)
        info_path = path.parent / BUILD_INFO
        # Check before loading: a library for another release may not even survive its static init.
        if info_path.exists():
            _check_version(json.loads(info_path.read_text())["tf_version"], tf.__version__, path)
        ops = tf.load_library(str(path))
        cdll = ctypes.CDLL(str(path))
        cdll.geryon_rendezvous_tf_version.restype = ctypes.c_char_p
        _check_version(cdll.geryon_rendezvous_tf_version().decode(), tf.__version__, path)
        cdll.geryon_flow_counters.restype = ctypes.c_long
        cdll.geryon_flow_counters.argtypes = [ctypes.c_char_p, ctypes.c_long]
        cdll.geryon_staging_stats.restype = ctypes.c_long
        cdll.geryon_classification_report.restype = ctypes.c_long
        cdll.geryon_classification_report.argtypes = [ctypes.c_char_p, ctypes.c_long]
        cdll.geryon_staging_stats.argtypes = [ctypes.c_char_p, ctypes.c_long]
        cdll.geryon_set_class_marks.argtypes = [
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
        ]
        cdll.geryon_class_marks.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int),
        ]
        cdll.geryon_remark_open_flows.restype = ctypes.c_int
        cdll.geryon_open_flows.restype = ctypes.c_int
        cdll.geryon_class_for_edge.argtypes = [ctypes.c_char_p]
        cdll.geryon_bench_class_lookup_ns.restype = ctypes.c_double
        cdll.geryon_bench_class_lookup_ns.argtypes = [ctypes.c_char_p, ctypes.c_long]
        cdll.geryon_map_table_live_snapshots.restype = ctypes.c_int64
        _loaded = Library(path=path, tf_version=tf.__version__, ops=ops, cdll=cdll)
        return _loaded


def flow_counters() -> list[FlowCounter]:
    """Per-flow counters of this process (bytes, messages, time in queue), one entry per flow."""
    return [FlowCounter.from_json(item) for item in json.loads(c_text(load().cdll.geryon_flow_counters))]


def staging_stats() -> dict[str, Any]:
    """Device-tensor staging of this process: staged receives and sends, copy failures, receives
    aborted while their host->device copy ran (aborted_during_copy), and per
    accelerator device its pool (limit, cached and in-use bytes, hits, misses, evictions, over_bound)."""
    result: dict[str, Any] = json.loads(c_text(load().cdll.geryon_staging_stats))
    return result


def c_text(fn: Any) -> str:
    """The text a C function of the library writes as fn(buf, size) -> the size it needs: asked once
    for the size, then again with a buffer that large, and again if it grew meanwhile (flows, pools
    or edges added by other threads)."""
    size = fn(None, 0)
    while True:
        buf = ctypes.create_string_buffer(size + 1)
        needed = fn(buf, size + 1)
        if needed <= size:
            return str(buf.value.decode())
        size = needed


def set_class_marks(dscp: Sequence[int], priority: Sequence[int] | None = None, *, live: bool = False) -> int:
    """DSCP (0-63) and SO_PRIORITY (0-7) of classes 0..n-1, for flows opened later; with `live`, the
    flows open now are re-marked too (a setsockopt per socket: the segments they send from then on
    carry the new marks; no reconnect, no step disturbed). Returns the number of open flows
    re-marked (0 without `live`).

    The priority defaults to DEFAULT_CLASS_PRIORITY (by class, not derived from the DSCP): see there."""
    dscp = list(dscp)
    prio = list(priority) if priority is not None else list(DEFAULT_CLASS_PRIORITY[: len(dscp)])
    if not 1 <= len(dscp) <= MAX_CLASSES:
        raise UsageError(f"dscp: give 1 to {MAX_CLASSES} values (one per class), got {len(dscp)}")
    if len(prio) != len(dscp):
        raise UsageError(f"priority: give one value per class ({len(dscp)}), got {len(prio)}")
    for name, values, top in (("dscp", dscp, 63), ("priority", prio, 7)):
        for cls, value in enumerate(values):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
                raise UsageError(f"{name}[{cls}] must be an int in 0..{top}, got {value!r}")
    array = ctypes.c_int * len(dscp)
    if load().cdll.geryon_set_class_marks(array(*dscp), array(*prio), len(dscp)) != 0:
        raise UsageError(f"the library refused the class marks dscp={dscp} priority={prio}")
    return int(load().cdll.geryon_remark_open_flows()) if live else 0


def open_flows() -> int:
    """The number of this process' open data-plane flows (consumer and producer sockets)."""
    return int(load().cdll.geryon_open_flows())


def class_marks() -> list[tuple[int, int]]:
    """(DSCP, SO_PRIORITY) of every class 0..7 as the data plane marks new flows."""
    cdll = load().cdll
    out = []
    for cls in range(MAX_CLASSES):
        dscp, prio = ctypes.c_int(), ctypes.c_int()
        cdll.geryon_class_marks(cls, ctypes.byref(dscp), ctypes.byref(prio))
        out.append((dscp.value, prio.value))
    return out
