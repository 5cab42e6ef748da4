"""A ParameterServerStrategy whose variables the tagger has classified, with run-time thresholds.

    from geryon.tf.strategy import strategy
    g = strategy(cluster_resolver, make_model, thresholds=[0.5], input_shape=(32, 32, 3))
    model = g.model                      # built in the strategy's scope by make_model()
    coordinator = ClusterCoordinator(g.tf_strategy)
    ...                                  # the usual custom training loop, unchanged
    g.set_thresholds([0.7])              # version + 1 on every task; the next step uses it

(`adopt(tf_strategy, model, ...)` does the same for a strategy and model the caller made; TF1
between-graph training uses geryon.tf.tf1.Tf1Classes.) Every ps and worker task must run a server
from geryon.tf.server(), which loads the extension.

How a new map_table reaches every task: a custom op (GeryonSetMapTable, native/rendezvous/ops.cc)
run eagerly from the coordinator on each task's CPU device: locally on the coordinator, remotely on
each worker and each PS. TF's own control plane carries it, in order with the coordinator's other
requests, so there is no extra port, protocol or agent, and the data plane needs no control
messages. The graph pass names each Send/Recv pair by parameter id at instantiation, and classes
are looked up per tensor when it is sent, so new thresholds need no re-tracing.

The threshold searcher (geryon.threshold.search) plugs in through `ThresholdHook`.

Order inside a class (issue 14): every task's data plane serves the pending responses of each
connection most urgent first (the parameter's rank in the forward pass's consumption order, carried
in the map_table), in chunks so a more urgent response preempts a large one. `g.set_order("arrival")`
switches every task back to first-ready-first-sent (the paper's Geryon, a baseline), and
`g.set_chunk_bytes(n)` changes the chunk size; both ride the same custom-op path as map_tables.
`g.set_sender_order("host" | "connection")`: one urgency order per process and class across its
connections (the default), or each connection on its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from geryon.tagger.map_table import MapTable, validate_thresholds
from geryon.tf.bindings import install_capture_hook, register_variables
from geryon.tf.map_table_native import consumption_ranks, to_native, urgency_ranks

__all__ = [
    "CHUNK_BYTES_RANGE",
    "ORDERS",
    "SENDER_ORDERS",
    "GeryonStrategy",
    "InstallError",
    "TaskTable",
    "ThresholdHook",
    "adopt",
    "install_map_table",
    "native_ops",
    "read_map_tables",
    "read_orders",
    "set_chunk_bytes",
    "set_order",
    "set_sender_order",
    "strategy",
    "task_devices",
]

# The data plane's orders inside a class and the chunk size's bounds (transport.h).
ORDERS = ("urgency", "arrival")
CHUNK_BYTES_RANGE = (4 * 1024, 1 << 30)
SENDER_ORDERS = ("host", "connection")

_ops_lock = threading.Lock()
_ops: Any = None


class InstallError(RuntimeError):
    """A map_table version could not be installed on every task (the message says which)."""


def native_ops() -> Any:
    """The extension's custom ops (GeryonSetMapTable, ...), building and loading it if needed."""
    global _ops
    with _ops_lock:
        if _ops is None:
            import tensorflow as tf

            from geryon.tf.library import load

            # tf.load_library (what load() uses to register the protocol) returns no op wrappers;
            # loading the same file again as an op library does, without running its init twice.
            _ops = tf.load_op_library(str(load().path))
        return _ops


def task_devices(cluster_spec: Any) -> dict[str, str]:
    """Task name -> its CPU device, for every ps and worker task; "coordinator" -> "" (local)."""
    jobs = cluster_spec.as_dict()
    devices = {"coordinator": ""}
    for job in ("ps", "worker"):
        tasks = jobs.get(job, [])
        indices = sorted(tasks) if isinstance(tasks, dict) else range(len(tasks))
        for i in indices:
            devices[f"{job}:{i}"] = f"/job:{job}/replica:0/task:{i}/device:CPU:0"
    return devices


def _on_every_task(what: str, devices: dict[str, str], run: Callable[[], Any]) -> dict[str, Any]:
    """`run()` on every task's device; InstallError names the tasks it failed on, and why."""
    import tensorflow as tf

    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, device in devices.items():
        try:
            with tf.device(device):
                results[name] = run()
        except (tf.errors.OpError, ValueError) as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "registered" in message and "Geryon" in message:
                message = "the Geryon extension is not loaded there; start that task with geryon.tf.server()"
            failed[name] = message
    if failed:
        raise InstallError(
            f"{what} failed on {sorted(failed)}: "
            + "; ".join(f"{n}: {m}" for n, m in sorted(failed.items()))
            + f" (succeeded on {sorted(results)})"
        )
    return results


def install_map_table(
    table: MapTable, devices: dict[str, str], ranks: Mapping[int, int] | None = None
) -> dict[str, int]:
    """Installs `table` on every task in `devices` (name -> device, "" = here); returns name -> version.

    `ranks`: parameter id -> urgency rank (default: from the table's urgencies, see to_native).

    The text is validated here first, so a task can only fail to install it when it is unreachable
    (or runs a newer version); then InstallError names the tasks that failed. Installing the same
    version again is harmless, so a failed install is retried by installing it again.
    """
    text = to_native(table, ranks=ranks)
    ops = native_ops()
    return _on_every_task(
        f"installing map_table version {table.version}", devices, lambda: int(ops.geryon_set_map_table(text))
    )


@dataclass(frozen=True)
class TaskTable:
    """The map_table a task runs now, read back through GeryonMapTable."""

    version: int
    num_classes: int
    default_class: int
    classes: tuple[int, ...]  # index: parameter id


def read_map_tables(devices: dict[str, str]) -> dict[str, TaskTable]:
    """The map_table every task runs now; InstallError names tasks that cannot be read."""
    ops = native_ops()

    def read() -> TaskTable:
        version, k, default, classes = ops.geryon_map_table()
        return TaskTable(int(version), int(k), int(default), tuple(int(c) for c in classes.numpy()))

    return _on_every_task("reading the map_table", devices, read)


def check_order(order: Any) -> str:
    if order not in ORDERS:
        raise ValueError(f"order: {order!r} is not one of {', '.join(ORDERS)}")
    return str(order)


def check_chunk_bytes(chunk_bytes: Any) -> int:
    lo, hi = CHUNK_BYTES_RANGE
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or not lo <= chunk_bytes <= hi:
        raise ValueError(f"chunk_bytes: {chunk_bytes!r} is not an int in [{lo}, {hi}] (4 KiB to 1 GiB)")
    return chunk_bytes


def set_order(order: str, devices: dict[str, str]) -> dict[str, str]:
    """Sets the data plane's order inside a class ("urgency" | "arrival") on every task in `devices`.

    Validated here first (ValueError naming `order`, nothing sent); InstallError names unreachable tasks.
    """
    order = check_order(order)
    ops = native_ops()
    return _on_every_task(
        f"setting order {order}", devices, lambda: ops.geryon_set_order(order).numpy().decode()
    )


def set_chunk_bytes(chunk_bytes: int, devices: dict[str, str]) -> dict[str, int]:
    """Sets the chunk size of responses sent in urgency order (4 KiB..1 GiB) on every task in `devices`."""
    chunk_bytes = check_chunk_bytes(chunk_bytes)
    ops = native_ops()
    return _on_every_task(
        f"setting chunk_bytes {chunk_bytes}", devices, lambda: int(ops.geryon_set_chunk_bytes(chunk_bytes))
    )


def check_sender_order(sender_order: Any) -> str:
    if sender_order not in SENDER_ORDERS:
        raise ValueError(f"sender_order: {sender_order!r} is not one of {', '.join(SENDER_ORDERS)}")
    return str(sender_order)


def set_sender_order(sender_order: str, devices: dict[str, str]) -> dict[str, str]:
    """One urgency order per process and class ("host") or per connection ("connection"), on every task.

    Validated here first (ValueError naming `sender_order`, nothing sent); InstallError names
    unreachable tasks.
    """
    sender_order = check_sender_order(sender_order)
    ops = native_ops()
    return _on_every_task(
        f"setting sender_order {sender_order}",
        devices,
        lambda: ops.geryon_set_sender_option("sender_order", sender_order).numpy().decode(),
    )


def read_orders(devices: dict[str, str]) -> dict[str, tuple[str, int]]:
    """(order, chunk bytes) in force on every task."""
    ops = native_ops()

    def read() -> tuple[str, int]:
        order, chunk = ops.geryon_data_plane_order()
        return order.numpy().decode(), int(chunk)

    return _on_every_task("reading the data plane's order", devices, read)


@dataclass
class GeryonStrategy:
    """The TF strategy, the model built in its scope, its tagging and the map_table in force."""

    tf_strategy: Any
    model: Any
    tagging: Any  # geryon.tagger.Tagging
    map_table: MapTable
    devices: dict[str, str]
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def scope(self) -> Any:
        return self.tf_strategy.scope()

    @property
    def thresholds(self) -> tuple[float, ...]:
        return self.map_table.thresholds

    @property
    def ranks(self) -> dict[int, int]:
        """Parameter id -> urgency rank (`urgency_order_ranks`)."""
        return urgency_order_ranks(self.tagging, self.map_table)

    def set_order(self, order: str) -> dict[str, str]:
        """Order inside a class on every task's data plane; returns task -> order in force.

        "urgency" (the default): most urgent pending response first, large ones in chunks; "arrival":
        first ready, first sent (the paper's Geryon, a baseline). ValueError for another value
        (nothing sent); InstallError names unreachable tasks.
        """
        with self._lock:
            return set_order(order, self.devices)

    def set_chunk_bytes(self, chunk_bytes: int) -> dict[str, int]:
        """Chunk size (4 KiB..1 GiB, default 256 KiB) of responses sent in urgency order, on every task."""
        with self._lock:
            return set_chunk_bytes(chunk_bytes, self.devices)

    def set_sender_order(self, sender_order: str) -> dict[str, str]:
        """ "host" (default): before a response or chunk starts, each task's writer yields to a more
        urgent pending response of the same class on its other connections; "connection": each
        connection orders only its own. Returns task -> setting in force."""
        with self._lock:
            return set_sender_order(sender_order, self.devices)

    def orders(self) -> dict[str, tuple[str, int]]:
        """(order, chunk bytes) every task runs now."""
        return read_orders(self.devices)

    def set_thresholds(self, thresholds: Iterable[float]) -> MapTable:
        """Installs the next map_table version for `thresholds` on every task; returns it.

        Raises ValueError (bad thresholds: nothing is sent) or InstallError (a task is unreachable;
        `map_table` already names the new version, so calling again re-sends it to every task).
        """
        with self._lock:
            table = self.map_table.with_thresholds(thresholds)
            self.map_table = table
            install_map_table(table, self.devices, self.ranks)
            return table

    def reinstall(self) -> dict[str, int]:
        """Sends the current version to every task again, e.g. to a task that restarted (it runs the
        built-in table, the default class for everything, until it gets one). Tasks that have it
        already accept it unchanged."""
        with self._lock:
            return install_map_table(self.map_table, self.devices, self.ranks)

    def task_tables(self) -> dict[str, TaskTable]:
        """What every task runs now (for checks and dashboards)."""
        return read_map_tables(self.devices)


def least_urgent_default(thresholds: Sequence[float], default_class: int | None) -> int:
    """`default_class`, or when None the least urgent of the len(thresholds) + 1 classes."""
    return len(thresholds) if default_class is None else default_class


def strategy(
    cluster_resolver: Any,
    model_fn: Callable[[], Any],
    thresholds: Sequence[float] | None = None,
    *,
    urgency: str = "layer",
    input_shape: Sequence[int] | None = None,
    default_class: int | None = None,
    variable_partitioner: Any = None,
    op_times: Any = None,
) -> GeryonStrategy:
    """A ParameterServerStrategy, the model `model_fn()` builds in its scope, tagged and installed.

    `thresholds`: k-1 increasing values in [0, 1] (default: one threshold, 0.5, two classes).
    `urgency`: the tagger's urgency function ("layer", "tic", or "tac" with `op_times`: an OpTimes or
    the path of a geryon.op_times file, TicTac's time oracle); `input_shape`: the model's input shape
    without the batch dimension, when the model is not built yet. Tensors that carry no parameter, and
    those the graph pass cannot trace to one, take `default_class` (default: the least urgent class, so that
    what the pass misses never competes with the most urgent parameters; their bytes are counted per
    flow on both ends, `FlowCounter.unresolved_bytes`, and the host agent shows them: see
    geryon.tf.agent_report).
    """
    import tensorflow as tf

    validate_thresholds(thresholds if thresholds is not None else [0.5])  # fail before any work
    times = load_op_times(urgency, op_times)
    native_ops()  # the graph pass must be registered before the first step is instantiated
    tf_strategy = tf.distribute.experimental.ParameterServerStrategy(
        cluster_resolver, variable_partitioner=variable_partitioner
    )
    with tf_strategy.scope():
        model = model_fn()
        if not getattr(model, "trainable_variables", None) and input_shape is not None:
            model.build((None, *input_shape))  # here, so the variables are placed on the PSes
    return adopt(
        tf_strategy,
        model,
        thresholds,
        urgency=urgency,
        input_shape=input_shape,
        default_class=default_class,
        op_times=times,
    )


def adopt(
    tf_strategy: Any,
    model: Any,
    thresholds: Sequence[float] | None = None,
    *,
    urgency: str = "layer",
    input_shape: Sequence[int] | None = None,
    default_class: int | None = None,
    op_times: Any = None,
) -> GeryonStrategy:
    """Classifies a model already built in `tf_strategy`'s scope and installs its map_table.

    For code that makes its own ParameterServerStrategy. Call it before the training step is first
    traced: functions traced earlier carry no parameter ids, and their tensors take the default class.
    """
    from geryon.tagger import tag_model
    from geryon.tagger.tf_graph import parameters_of

    ts = validate_thresholds(thresholds if thresholds is not None else [0.5])
    times = load_op_times(urgency, op_times)
    if not getattr(model, "trainable_variables", None):
        raise ValueError(
            "model: it has no trainable variables to classify; build it in the strategy's scope first"
        )
    install_capture_hook()
    native_ops()
    # The public `cluster_resolver` property is None for ParameterServerStrategy in TF 2.21.
    resolver = getattr(tf_strategy, "_cluster_resolver", None) or tf_strategy.cluster_resolver
    if resolver is None:
        raise ValueError("tf_strategy: expected a ParameterServerStrategy made with a cluster resolver")
    devices = task_devices(resolver.cluster_spec())
    # Start above every version a task already runs (an earlier run of this coordinator, a PS that
    # outlived it): tasks refuse to go back to an older version.
    first = max(t.version for t in read_map_tables(devices).values()) + 1
    if times is None:
        tagging = tag_model(model, urgency=urgency, input_shape=input_shape)
    else:  # TAC needs the traced graph and the op times: tag by layer, then order by TAC
        tagging = tag_model(model, urgency="layer", input_shape=input_shape).with_tac(times)
    table = tagging.map_table(ts, version=first, default_class=least_urgent_default(ts, default_class))
    ids = {e.name: e.id for e in table.entries}
    params, variables = parameters_of(model.trainable_variables)
    register_variables((v, ids[p.name]) for p, v in zip(params, variables, strict=True))
    ranks = urgency_order_ranks(tagging, table)
    register_variables(layer_state_ids(model, params, ids, ranks))
    install_map_table(table, devices, ranks)
    return GeryonStrategy(tf_strategy, model, tagging, table, devices)


def load_op_times(urgency: str, op_times: Any) -> Any:
    """The OpTimes that urgency "tac" needs (None for the other functions); ValueError naming the argument."""
    from geryon.tagger.tac import OpTimes

    if urgency != "tac":
        if op_times is not None:
            raise ValueError(f"op_times: only urgency 'tac' uses op times, not {urgency!r}")
        return None
    if op_times is None:
        raise ValueError(
            "op_times: urgency 'tac' needs TicTac's time oracle: an OpTimes or the path of a geryon.op_times "
            "file (geryon tag --urgency tac --op-times FILE, docs/scheduling.md)"
        )
    return op_times if isinstance(op_times, OpTimes) else OpTimes.load(op_times)


def urgency_order_ranks(tagging: Any, table: MapTable) -> dict[int, int]:
    """Parameter id -> rank in the data plane's send order inside a class.

    Under "layer" and "tic" urgency falls along the forward pass's consumption order, so the rank is
    the consumption position (ties inside a layer keep id order). TAC reorders parameters against
    consumption (a heavy branch first), so its rank follows the urgency the table carries.
    """
    if tagging.urgency_function == "tac":
        return urgency_ranks(table)
    return consumption_ranks(tagging.consumption.order)


def layer_state_ids(
    model: Any, params: Sequence[Any], ids: Mapping[str, int], ranks: Mapping[int, int]
) -> list[tuple[Any, int]]:
    """(variable, id) for the model's non-trainable variables that belong to a layer with parameters.

    A layer's state that the forward pass reads and the step updates (BatchNorm's moving mean and
    variance) travels every step like a parameter but is no parameter of the tagger's. It takes the id
    of its layer's most urgent parameter (the first one the forward pass consumes), so its pulls and
    updates ride that layer's class and rank instead of the default class. State of a layer without
    parameters (a seed generator's, a counter) stays unregistered: it takes the default class.
    """
    from geryon.tagger.tf_graph import parameters_of

    state = list(getattr(model, "non_trainable_variables", None) or ())
    if not state:
        return []
    first_of_layer: dict[str, int] = {}
    for p in params:
        pid = ids[p.name]
        best = first_of_layer.get(p.layer)
        if best is None or ranks.get(pid, pid) < ranks.get(best, best):
            first_of_layer[p.layer] = pid
    state_params, handles = parameters_of(state)
    return [
        (handle, first_of_layer[sp.layer])
        for sp, handle in zip(state_params, handles, strict=True)
        if sp.layer in first_of_layer
    ]


class ThresholdHook:
    """Connects a threshold searcher to a training loop: call `begin()` and `end()` around each step.

        hook = ThresholdHook(searcher, g)
        for _ in range(steps):
            hook.begin()                 # installs the searcher's next thresholds if they changed
            coordinator.schedule(step, ...); coordinator.join()
            hook.end()                   # reports the step's wall time (or pass iteration_time=)

    `searcher` is anything with `next_threshold()` and `report(thresholds, seconds)`, such as
    geryon.threshold.search.make_searcher(...). A searcher made with `chunk_sizes` (issue 40 item 3:
    the threshold and the chunk size inside a class searched together at run time) is driven by its
    `next_trial()`: `begin()` also puts the trial's chunk size in force on every task
    (`set_chunk_bytes`) when it changed, and `end()` reports it. `reporter` (a
    geryon.tf.agent_report.AgentReporter): `end()` also reports the iteration time and thresholds to
    the host agent, with this process's unresolved flows (the ps and worker tasks report theirs
    themselves: GERYON_AGENT_JOB).
    """

    def __init__(self, searcher: Any, geryon_strategy: GeryonStrategy, reporter: Any = None) -> None:
        self.searcher = searcher
        self.strategy = geryon_strategy
        self.reporter = reporter
        # Joint over chunk sizes: the searcher says so by its options (geryon.threshold.search).
        options = getattr(searcher, "options", None)
        self.searches_chunk = isinstance(options, dict) and options.get("chunk_sizes") is not None
        self.chunk_bytes: int | None = None  # the chunk size this hook last put in force
        self._started: float | None = None
        self._running: tuple[float, ...] | None = None

    def begin(self) -> tuple[float, ...]:
        if self.searches_chunk:
            trial = self.searcher.next_trial()
            wanted = tuple(float(t) for t in trial.thresholds)
            if trial.chunk_bytes != self.chunk_bytes:
                self.strategy.set_chunk_bytes(int(trial.chunk_bytes))
                self.chunk_bytes = int(trial.chunk_bytes)
        else:
            wanted = tuple(float(t) for t in self.searcher.next_threshold())
        if wanted != self.strategy.thresholds:
            self.strategy.set_thresholds(wanted)
        self._running = self.strategy.thresholds
        self._started = time.perf_counter()
        return self._running

    def end(self, iteration_time: float | None = None) -> None:
        if self._started is None or self._running is None:
            raise RuntimeError("ThresholdHook.end() called without begin()")
        seconds = time.perf_counter() - self._started if iteration_time is None else iteration_time
        if self.searches_chunk:
            self.searcher.report(self._running, seconds, chunk_bytes=self.chunk_bytes)
        else:
            self.searcher.report(self._running, seconds)
        if self.reporter is not None:
            self.reporter.report(iteration_time_s=seconds, thresholds=self._running)
        self._started = None
