"""Run a script against a real, in-process TensorFlow parameter-server cluster, in a subprocess.

In-process ``tf.distribute.Server`` instances cannot be shut down, and a process that connected to
a cluster keeps gRPC threads alive, so every cluster lives in its own short-lived subprocess that
exits with ``os._exit`` once it has reported. Usage::

    result = run_in_ps_cluster(
        '''
        strategy = tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)
        with strategy.scope():
            v = tf.Variable(tf.zeros([4]))
        emit({"device": v.device})
        ''',
        num_ps=2,
    )

The script body runs with these globals: ``tf``; ``cluster_spec`` (a ``tf.train.ClusterSpec`` of
``worker`` and ``ps`` tasks on 127.0.0.1); ``cluster_resolver`` (a ``SimpleClusterResolver`` over
it, ``rpc_layer="grpc"``, ready for ``ParameterServerStrategy``: the calling process becomes the
coordinator); ``NUM_PS``, ``NUM_WORKERS``; ``ARGS`` (the JSON-decoded `args`); and
``emit(result: dict)``, which prints the result as JSON and ends the process. Stdout of the body
is free for debugging: only the line written by ``emit`` is parsed.

Addresses: the cluster spec names only 127.0.0.1, and the coordinator joins as ``localhost``. TF's
gRPC server itself listens on ``0.0.0.0:<port>`` (hard-coded in grpc_server_lib.cc, no option to
change it), so for the few seconds a cluster lives its ports are open on every interface.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["PsClusterError", "run_in_ps_cluster"]

REPO_ROOT = Path(__file__).resolve().parents[1]
_MARKER = "GERYON_PS_CLUSTER_RESULT "
# Exit code for "a picked port was taken before the server bound it": worth one more try.
_PORT_RACE_EXIT = 75
_PORT_RETRIES = 2
_STDERR_TAIL = 6000

_RUNNER = r'''
import json
import os
import socket
import sys
import traceback

_SPEC = json.loads(os.environ["GERYON_PS_CLUSTER_SPEC"])
_MARKER = _SPEC["marker"]


def emit(result):
    """Report `result` (a JSON-serialisable dict) to the parent and end the process now."""
    if not isinstance(result, dict):
        raise TypeError(f"emit() takes a dict, got {type(result).__name__}")
    line = _MARKER + json.dumps(result)
    sys.stderr.flush()
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()
    # Skip interpreter shutdown: in-process servers and the coordinator's threads never stop.
    os._exit(0)


def _free_ports(count):
    # Hold every socket until all are picked, so the ports are distinct.
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _main():
    import tensorflow as tf

    num_ps, num_workers = _SPEC["num_ps"], _SPEC["num_workers"]
    ports = _free_ports(num_ps + num_workers)
    cluster_spec = tf.train.ClusterSpec({
        "worker": [f"127.0.0.1:{port}" for port in ports[:num_workers]],
        "ps": [f"127.0.0.1:{port}" for port in ports[num_workers:]],
    })
    servers = []
    try:
        for job, count in (("worker", num_workers), ("ps", num_ps)):
            for index in range(count):
                servers.append(tf.distribute.Server(
                    cluster_spec, job_name=job, task_index=index, protocol="grpc", start=True))
    except Exception as error:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(_SPEC["port_race_exit"] if "Could not start" in str(error) else 1)
    namespace = {
        "__name__": "__ps_cluster_body__",
        "tf": tf,
        "cluster_spec": cluster_spec,
        "cluster_resolver": tf.distribute.cluster_resolver.SimpleClusterResolver(
            cluster_spec, rpc_layer="grpc"),
        "NUM_PS": num_ps,
        "NUM_WORKERS": num_workers,
        "ARGS": _SPEC["args"],
        "emit": emit,
        "_servers": servers,
    }
    body_path = sys.argv[1]
    with open(body_path) as body:
        code = compile(body.read(), body_path, "exec")
    exec(code, namespace)
    print("ps_cluster: the script body finished without calling emit(result)", file=sys.stderr)


try:
    _main()
except BaseException:
    traceback.print_exc()
sys.stdout.flush()
sys.stderr.flush()
os._exit(1)
'''


class PsClusterError(RuntimeError):
    """The cluster subprocess failed, timed out, or reported no result."""


def run_in_ps_cluster(
    script_body: str,
    num_ps: int,
    num_workers: int = 1,
    timeout: float = 120,
    args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Start `num_ps` ps and `num_workers` worker servers in a subprocess, run `script_body` there.

    Args:
        script_body: Python source (dedented here) run as the coordinator; see the module
            docstring for its globals. It must end by calling ``emit(result_dict)``.
        num_ps: number of ``ps`` tasks (>= 1).
        num_workers: number of ``worker`` tasks (>= 1; ParameterServerStrategy needs one).
        timeout: seconds for the whole run, retries included; the subprocess is killed after it.
        args: JSON-serialisable values handed to the body as ``ARGS``.

    Returns:
        The dict the body passed to ``emit``.

    Raises:
        ValueError: an argument is out of range.
        PsClusterError: the subprocess failed, timed out or exited without emitting; the message
            carries the tail of its stderr.
    """
    if num_ps < 1 or num_workers < 1:
        raise ValueError(
            f"num_ps and num_workers must be >= 1, got num_ps={num_ps}, num_workers={num_workers}"
        )
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    spec = {
        "num_ps": num_ps,
        "num_workers": num_workers,
        "args": dict(args or {}),
        "marker": _MARKER,
        "port_race_exit": _PORT_RACE_EXIT,
    }
    env = dict(os.environ)
    env.update(
        GERYON_PS_CLUSTER_SPEC=json.dumps(spec),
        TF_CPP_MIN_LOG_LEVEL="2",
        KERAS_BACKEND="tensorflow",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p),
    )
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="geryon-ps-cluster-") as tmp:
        runner, body = Path(tmp, "runner.py"), Path(tmp, "body.py")
        runner.write_text(_RUNNER)
        body.write_text(textwrap.dedent(script_body))
        for attempt in range(_PORT_RETRIES + 1):
            returncode, stdout, stderr = _run_once(
                [sys.executable, str(runner), str(body)], env, deadline - time.monotonic(), timeout
            )
            if returncode != _PORT_RACE_EXIT or attempt == _PORT_RETRIES:
                break
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARKER):
            result: dict[str, Any] = json.loads(line[len(_MARKER) :])
            return result
    raise PsClusterError(
        f"cluster script exited with code {returncode} without emitting a result; "
        f"stderr tail:\n{stderr[-_STDERR_TAIL:]}"
    )


def _run_once(
    command: list[str], env: dict[str, str], remaining: float, timeout: float
) -> tuple[int, str, str]:
    if remaining <= 0:
        raise PsClusterError(f"cluster script timed out after {timeout} s (no time left to retry)")
    proc = subprocess.Popen(
        command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL to this PID only: the servers live inside it
        _, stderr = proc.communicate()
        raise PsClusterError(
            f"cluster script (pid {proc.pid}) timed out after {timeout} s and was killed; "
            f"stderr tail:\n{stderr[-_STDERR_TAIL:]}"
        ) from None
    return proc.returncode, stdout, stderr
