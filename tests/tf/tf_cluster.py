"""A real multi-process TensorFlow cluster on localhost: ps and worker servers in their own processes.

    with TfCluster(num_ps=1, num_workers=2, protocol="grpc+geryon") as cluster:
        result = cluster.run_chief('''
            strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
            ...
            emit({"loss": ...})
        ''')
        counters = cluster.counters()  # per-flow counters of every server process

Every server is a separate Python process (`python -c`), killed by its PID when the block ends. The
chief body runs in one more process with the globals ``tf``, ``cluster_spec``, ``cluster_resolver``
(rpc_layer = the protocol), ``ARGS`` and ``emit(dict)``. Servers using `grpc+geryon` write their flow
counters to a JSON file every 0.2 s, which `counters()` reads. Ports: each task's gRPC port P is
picked free with P + DATA_OFFSET free too (the data plane listens there).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from geryon.tf.ports import free_port_pairs

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_TF = str(Path(__file__).resolve().parent)
DATA_OFFSET = -7000
_MARKER = "GERYON_TF_CLUSTER_RESULT "

_SERVER = r"""
import json, os, sys, time
import tensorflow as tf
spec = json.loads(os.environ["GERYON_TF_CLUSTER"])
protocol = spec["protocol"]
device = None
if os.environ.get("GERYON_TEST_DEVICE") == "1":  # the GERYONTEST PluggableDevice, before the server
    from geryon.tf import test_device as device
    device.load()
if protocol == "grpc+geryon":
    import geryon.tf
    server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), spec["job"], spec["index"])
else:
    server = tf.distribute.Server(tf.train.ClusterSpec(spec["cluster"]), job_name=spec["job"],
                                  task_index=spec["index"], protocol=protocol, start=True)
out = spec["counters"]
if os.environ.get("GERYON_SANITIZER") == "address":  # LeakSanitizer on request: TfCluster.close()
    import ctypes, signal
    def _leak_check(*_):
        ctypes.CDLL(None).__lsan_do_recoverable_leak_check()
        open(out + ".leakcheck", "w").close()
    signal.signal(signal.SIGUSR1, _leak_check)
print("READY", flush=True)
while True:
    if protocol == "grpc+geryon":
        rows = [c.__dict__ for c in geryon.tf.flow_counters()]
        with open(out + ".tmp", "w") as f:
            json.dump(rows, f)
        os.replace(out + ".tmp", out)
        with open(out + ".staging.tmp", "w") as f:
            json.dump(geryon.tf.staging_stats(), f)
        os.replace(out + ".staging.tmp", out + ".staging")
    if device is not None:
        with open(out + ".device.tmp", "w") as f:
            json.dump(device.counters(), f)
        os.replace(out + ".device.tmp", out + ".device")
    time.sleep(0.2)
"""

_CHIEF = r"""
import json, os, sys, traceback
spec = json.loads(os.environ["GERYON_TF_CLUSTER"])
def emit(result):
    sys.stdout.write("\n" + spec["marker"] + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)
try:
    import tensorflow as tf
    if os.environ.get("GERYON_TEST_DEVICE") == "1":  # so the placer knows the device type's kernels
        from geryon.tf import test_device
        test_device.load()
    if spec["protocol"] == "grpc+geryon":
        import geryon.tf
        geryon.tf.load()
    cluster_spec = tf.train.ClusterSpec(spec["cluster"])
    cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster_spec, rpc_layer=spec["protocol"])
    ARGS = spec["args"]
    exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
    print("tf_cluster: the chief body finished without emit()", file=sys.stderr)
except BaseException:
    traceback.print_exc()
sys.stdout.flush(); sys.stderr.flush()
os._exit(1)
"""


class TfClusterError(RuntimeError):
    pass


def pick_ports(count: int, offset: int = DATA_OFFSET) -> list[int]:
    """`count` distinct free ports P with P + offset free as well."""
    try:
        return free_port_pairs(count, offset)
    except RuntimeError as e:
        raise TfClusterError(str(e)) from None


class TfCluster:
    def __init__(
        self,
        num_ps: int = 1,
        num_workers: int = 2,
        protocol: str = "grpc+geryon",
        env: dict[str, str] | None = None,
        job_env: dict[str, dict[str, str]] | None = None,
        startup_timeout: float = 90,
        job_netns: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """`job_netns`: job -> (network namespace, address) to run that job's tasks in (default: the
        current namespace on 127.0.0.1); the namespaces are the caller's, made and removed by it."""
        self.protocol = protocol
        self.tmp = Path(tempfile.mkdtemp(prefix="geryon-tf-cluster-"))
        ports = pick_ports(num_ps + num_workers + 1)
        self.job_netns = job_netns or {}
        host = {job: self.job_netns.get(job, ("", "127.0.0.1"))[1] for job in ("chief", "worker", "ps")}
        self.cluster = {
            "chief": [f"{host['chief']}:{ports[0]}"],
            "worker": [f"{host['worker']}:{p}" for p in ports[1 : 1 + num_workers]],
            "ps": [f"{host['ps']}:{p}" for p in ports[1 + num_workers :]],
        }
        self.env = dict(os.environ)
        self.env.update(
            TF_CPP_MIN_LOG_LEVEL="2",
            KERAS_BACKEND="tensorflow",
            GERYON_DATA_PORT_OFFSET=str(DATA_OFFSET),
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
            **(env or {}),
        )
        self.job_env = job_env or {}
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.startup_timeout = startup_timeout

    def task_counters_path(self, task: str) -> Path:
        return self.tmp / f"counters-{task.replace(':', '')}.json"

    def __enter__(self) -> TfCluster:
        try:
            for job in ("ps", "worker"):
                for index in range(len(self.cluster[job])):
                    self.start_task(job, index)
            deadline = time.monotonic() + self.startup_timeout
            for name, proc in self.procs.items():
                assert proc.stdout is not None
                line = ""
                while time.monotonic() < deadline and proc.poll() is None:
                    line = proc.stdout.readline()
                    if line.startswith("READY"):
                        break
                if not line.startswith("READY"):
                    raise TfClusterError(f"{name} did not start: {self.stderr(name)}")
        except BaseException:
            self.close()
            raise
        return self

    def start_task(self, job: str, index: int) -> None:
        name = f"{job}{index}"
        spec = {
            "cluster": self.cluster,
            "job": job,
            "index": index,
            "protocol": self.protocol,
            "counters": str(self.task_counters_path(name)),
        }
        env = dict(self.env, GERYON_TF_CLUSTER=json.dumps(spec), **self.job_env.get(job, {}))
        err = (self.tmp / f"{name}.stderr").open("w")
        self.procs[name] = subprocess.Popen(
            [*self._netns_prefix(job), sys.executable, "-c", _SERVER],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )

    def _netns_prefix(self, job: str) -> list[str]:
        # `ip netns exec` execs the command: the PID we hold (and kill) is the Python process itself.
        return ["ip", "netns", "exec", self.job_netns[job][0]] if job in self.job_netns else []

    def stderr(self, name: str) -> str:
        path = self.tmp / f"{name}.stderr"
        return path.read_text()[-4000:] if path.exists() else ""

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        if self.env.get("GERYON_SANITIZER") == "address":
            self._leak_check()
        for name in list(self.procs):
            self.kill(name)

    def _leak_check(self) -> None:
        # Under the AddressSanitizer build (tests/tf/test_sanitizers.py) every live server looks for
        # leaks before it is killed (a SIGKILLed process runs no exit-time check), up to 60 s.
        live = {n: p for n, p in self.procs.items() if p.poll() is None}
        for proc in live.values():
            os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 60
        for name, proc in live.items():
            done = Path(f"{self.task_counters_path(name)}.leakcheck")
            while not done.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def counters(self, name: str) -> list[dict[str, Any]]:
        path = self.task_counters_path(name)
        return json.loads(path.read_text()) if path.exists() else []

    def staging_stats(self, name: str) -> dict[str, Any]:
        """geryon.tf.staging_stats() of a grpc+geryon server (written with its flow counters)."""
        path = Path(f"{self.task_counters_path(name)}.staging")
        return json.loads(path.read_text()) if path.exists() else {}

    def device_counters(self, name: str) -> dict[str, int]:
        """The GERYONTEST device's copy counters in a server started with env GERYON_TEST_DEVICE=1."""
        path = Path(f"{self.task_counters_path(name)}.device")
        return json.loads(path.read_text()) if path.exists() else {}

    def run_chief(
        self, body: str, timeout: float = 180, args: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Runs `body` as the coordinator (job chief) and returns what it emitted."""
        spec = {"cluster": self.cluster, "protocol": self.protocol, "marker": _MARKER, "args": args or {}}
        body_path = self.tmp / "chief_body.py"
        body_path.write_text(textwrap.dedent(body))
        runner = self.tmp / "chief.py"
        runner.write_text(_CHIEF)
        env = dict(self.env, GERYON_TF_CLUSTER=json.dumps(spec), **self.job_env.get("chief", {}))
        proc = subprocess.Popen(
            [*self._netns_prefix("chief"), sys.executable, str(runner), str(body_path)],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            raise TfClusterError(f"chief timed out after {timeout} s: {stderr[-4000:]}") from None
        for line in reversed(stdout.splitlines()):
            if line.startswith(_MARKER):
                result: dict[str, Any] = json.loads(line[len(_MARKER) :])
                return result
        raise TfClusterError(f"chief exited {proc.returncode} without a result: {stderr[-6000:]}")


def run_script(
    script: str, timeout: float, env: dict[str, str] | None = None, keep_stderr: bool = False
) -> dict[str, Any]:
    """Runs a test's TF script in its own process (`python -c`; TF's C++ logging quiet; TESTS_TF names
    this folder, for the script's `sys.path.insert(0, os.environ["TESTS_TF"])` before it imports
    tf_cluster; then `env`) and returns the JSON of its last stdout line, with its stderr under
    "stderr" if `keep_stderr`. Fails the test with the end of the stderr when the script exits non-zero."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TESTS_TF": TESTS_TF, **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    facts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    if keep_stderr:
        facts["stderr"] = result.stderr
    return facts


def local_servers(
    ports: Sequence[int],
    ps_offset: int = DATA_OFFSET,
    worker_offset: int = DATA_OFFSET,
    host: str = "127.0.0.1",
) -> tuple[Any, list[Any]]:
    """For test scripts that run TF in their own process: grpc+geryon servers here, a PS on ports[0]
    and a worker on each further port (task i on ports[1 + i]), the PS's data plane at its port +
    `ps_offset`, the workers' at theirs + `worker_offset` (where a worker also looks for the PS's).
    Returns the cluster spec and the servers, PS first (keep them: a collected server stops)."""
    import tensorflow as tf

    import geryon.tf

    spec = tf.train.ClusterSpec({"ps": [f"{host}:{ports[0]}"], "worker": [f"{host}:{p}" for p in ports[1:]]})
    servers = [geryon.tf.server(spec, "ps", 0, data_port_offset=ps_offset)]
    servers += [
        geryon.tf.server(spec, "worker", i, data_port_offset=worker_offset) for i in range(len(ports) - 1)
    ]
    return spec, servers


def proxy_listener(ps_offset: int, worker_offset: int, tries: int = 50) -> tuple[int, int, socket.socket]:
    """For test scripts that put a proxy or a hand-written producer between a worker and the PS's data
    plane (servers from local_servers(..., ps_offset, worker_offset)): a PS and a worker gRPC port
    whose data ports at `ps_offset` and at `worker_offset` are free (the worker looks for the PS's data
    plane at the PS's port + `worker_offset`), and a socket listening there, for the proxy to accept."""
    for _ in range(tries):
        ps_port, worker_port = pick_ports(2, ps_offset)
        probes = []
        try:
            for port in (ps_port + worker_offset, worker_port + worker_offset):
                probe = socket.socket()
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
        break
    else:
        raise TfClusterError(f"no free port pair with both offsets {ps_offset} and {worker_offset} free")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", ps_port + worker_offset))
    listener.listen(8)
    return ps_port, worker_port, listener


def preempting_step(
    sess: Any, late: Any, urgent: Any, sent: Callable[[], int], head_start: int = 8 << 20
) -> tuple[Any, Any]:
    """For TF1 test scripts about order on the data plane: one step in which the fetch `late` runs in a
    thread and, once `sent()` (bytes the producers have sent) has grown by `head_start` (or after 60 s),
    the fetch `urgent` runs here while `late` is still on the wire. Returns both fetched values."""
    values: dict[str, Any] = {}
    start = sent()
    thread = threading.Thread(target=lambda: values.update(late=sess.run(late)))
    thread.start()
    deadline = time.time() + 60
    while sent() < start + head_start and time.time() < deadline:
        time.sleep(0.0005)
    values["urgent"] = sess.run(urgent)
    thread.join()
    return values.get("late"), values["urgent"]


def refusals(calls: dict[str, Callable[[], object]], error: type[Exception]) -> dict[str, str | None]:
    """For test scripts that check that bad settings are refused: per name, the message of the `error`
    that call() raised (an OpError's `message`, else str()), None where it raised nothing."""
    out: dict[str, str | None] = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = None
        except error as e:
            out[name] = getattr(e, "message", str(e))
    return out


def step_outcome(sess: Any, fetch: Any, timeout_ms: int) -> str:
    """For TF1 test scripts whose step is meant to fail: runs `fetch` under a deadline of `timeout_ms`
    and returns "ran", or the name of the OpError's type it failed with (DeadlineExceededError,
    UnavailableError, ...), which is what such tests assert on."""
    import tensorflow as tf

    try:
        sess.run(fetch, options=tf.compat.v1.RunOptions(timeout_in_ms=timeout_ms))
        return "ran"
    except tf.errors.OpError as e:
        return type(e).__name__


def pull_once(host: str = "127.0.0.1") -> tuple[float, int, list[Any]]:
    """For test scripts that run TF in their own process: a grpc+geryon PS and worker server here, on
    `host`, and one TF1 step in which the worker reads a 1000-float variable of the PS (one pull on
    the data plane, class 0 unless a map_table says otherwise; its flow stays open). Returns the sum
    read (1000.0), the PS's data port and the servers (keep them: a collected server stops)."""
    import tensorflow as tf

    ps_port, worker_port = pick_ports(2)
    _, servers = local_servers([ps_port, worker_port], host=host)
    tf.compat.v1.disable_eager_execution()
    with tf.device("/job:ps/task:0"):
        v = tf.Variable(tf.ones([1000]))
    with tf.device("/job:worker/task:0"):
        total = tf.reduce_sum(tf.identity(v))
    with tf.compat.v1.Session(servers[1].target) as sess:
        sess.run(v.initializer)
        value = float(sess.run(total))
    return value, ps_port + DATA_OFFSET, servers


def classifier_step(strategy: Any, model: Any, optimizer: Any) -> Any:
    """For chief bodies (imported as tests.tf.tf_cluster; the regression step, mse_step, is in
    bench/benchlib.py, which a bench shares): a tf.function step(x, y) that trains the classifier
    `model` (it gives logits) under the parameter-server `strategy` on one batch, loss the sparse
    categorical cross-entropy of labels y, the gradients applied by `optimizer`; schedule it with a
    ClusterCoordinator. It returns the loss."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x: Any, y: Any) -> Any:
        def replica(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica, args=(x, y))

    return step


# The chief body the tests and the benchmark train with: a small CNN under ParameterServerStrategy,
# fixed seeds, and one step at a time on fixed batches, so the loss trajectory does not depend on
# which worker runs a step. ARGS: steps; optional progress_file (steps done, written after each
# step), max_seconds (stop early), garbage_ports (data ports that get garbage bytes after step 1).
CNN_BODY = r"""
import json, socket, time
import numpy as np
import keras
from tests.tf.tf_cluster import classifier_step

keras.utils.set_random_seed(1)
strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([
        keras.Input((12, 12, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10),
    ])
    optimizer = keras.optimizers.SGD(0.05)
rng = np.random.default_rng(0)
steps = ARGS["steps"]
xs = rng.normal(size=(steps, 16, 12, 12, 1)).astype("float32")
ys = rng.integers(0, 10, size=(steps, 16)).astype("int64")
step = classifier_step(strategy, model, optimizer)

model_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
losses, started = [], time.time()
try:
    for i in range(steps):
        result = coordinator.schedule(step, args=(tf.constant(xs[i]), tf.constant(ys[i])))
        losses.append(float(result.fetch()))
        if ARGS.get("progress_file"):
            with open(ARGS["progress_file"], "w") as f:
                f.write(str(i + 1))
        if i == 0:
            for port in ARGS.get("garbage_ports", []):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(b"\xde\xad\xbe\xef" * 64)
        if time.time() - started > ARGS.get("max_seconds", 1e9):
            break
except Exception as error:
    emit({"losses": losses, "error": f"{type(error).__name__}: {error}", "error_at": time.time(),
          "model_bytes": model_bytes})
emit({"losses": losses, "model_bytes": model_bytes, "seconds": time.time() - started})
"""


def data_port(address: str) -> int:
    return int(address.rsplit(":", 1)[1]) + DATA_OFFSET


# A TF1 model with a tensor the graph pass cannot trace to a parameter, for the scripts that count
# unresolved bytes (test_transport.py, test_unresolved_counts.py): spliced into a script after `tf` is
# imported, it defines v1, graph, w, w2, made, x, total and init. `made` is stateful (not folded away)
# and has no parameter behind it: its edge to the worker is unresolved.
UNTRACEABLE_MODEL = r"""
v1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    with v1.device("/job:ps/task:0"):
        with v1.variable_scope("first"):  # the tagger's layers are variable scopes
            w = v1.get_variable("w", [1000, 1], use_resource=True, initializer=v1.ones_initializer())
        with v1.variable_scope("second"):
            w2 = v1.get_variable("w", [1, 1000], use_resource=True, initializer=v1.ones_initializer())
        made = tf.random.uniform([250]) + 1.0  # stateful: not folded away; no parameter behind it
    with v1.device("/job:worker/task:0"):
        x = v1.placeholder(tf.float32, [1, 1000], name="x")  # the model's input (the tagger needs one)
        total = tf.reduce_sum(tf.matmul(tf.matmul(x, w), w2)) + tf.reduce_sum(made)
    init = v1.global_variables_initializer()
"""


@contextlib.contextmanager
def agent_services(
    cluster: dict[str, list[str]] | None = None, job_id: str = "ju"
) -> Iterator[tuple[Any, str, str]]:
    """A real agent's services (geryon.agent.service.Services, its API socket, its metrics URL): the API on
    a private unix socket, metrics on a free loopback port; with `cluster`, job `job_id` registered
    with those tasks. Stopped, and its folder removed, when the block ends."""
    import shutil  # here, not above: TF scripts import this module without tests/ on their path

    import grpc
    from live_agent import View

    from geryon.agent.proto import agent_pb2 as pb
    from geryon.agent.proto import agent_pb2_grpc as pb_grpc
    from geryon.agent.service import start_services

    d = Path(f"/tmp/gfunres{time.monotonic_ns()}")
    d.mkdir(mode=0o700)
    sock = str(d / "agent.sock")
    svc = start_services(View(["lo"]), api_socket=sock, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", 0))
    assert svc.metrics_addr is not None
    try:
        if cluster is not None:
            with grpc.insecure_channel(f"unix:{sock}") as ch:
                tasks = {r: pb.TaskAddresses(addresses=a) for r, a in cluster.items()}
                pb_grpc.AgentStub(ch).RegisterJob(
                    pb.RegisterJobRequest(job_id=job_id, cluster=tasks), timeout=5
                )
        yield svc, sock, f"http://127.0.0.1:{svc.metrics_addr[1]}"
    finally:
        svc.stop()
        shutil.rmtree(d, ignore_errors=True)
