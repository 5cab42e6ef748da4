"""Installed the way training hosts are installed: the wheel built from this checkout, installed into a
fresh virtualenv, builds the native extension and trains one step on `grpc+geryon` with no checkout in
sight (issue 36, item 5).

How TensorFlow gets into the fresh venv: through a `.pth` file naming the site-packages that hold this
environment's TensorFlow, not by `pip install tensorflow-cpu==2.21.0` into the venv. Measured on this
project's 2-core machine with pip's cache warm, `pip install 'geryon-0.1.0-py3-none-any.whl[tf]'` into a
fresh venv took 77 s and 1.6 GB of disk, and (worse) a TensorFlow in another directory gives other
include flags, so another cache key: a cold native build of several minutes on every run (the CI suite
already takes about 41 of its 90 minutes). This test takes 50-65 s with the cache warm (the wheel 3
s, the venv 3 s, `geryon native build` 10 s, the cluster's start and its step 34 s). With the `.pth`
line the venv sees the same TensorFlow (same flags) and the wheel ships byte-identical sources, so
`geryon native build` finds the library the checkout's tests built in the same cache
(GERYON_NATIVE_CACHE or ~/.cache/geryon/native): the test asserts that the key is the checkout's, and
builds once (minutes) when the cache is cold. A `.pth` line only adds that folder to sys.path (the .pth
files in it, such as the checkout's editable install, are not run), after the venv's own site-packages,
so `geryon` is imported from the venv: asserted in every process. What this does not cover is pip
resolving `geryon[tf]` from an index; the test checks that the wheel's metadata asks for
tensorflow-cpu==2.21.0 with the `tf` extra.

The wheel is built from the sdist (tests/wheel_build.py: setuptools' PEP 517 hook, then `pip wheel
--no-deps --no-build-isolation` of the unpacked sdist, no index needed) and installed with this
environment's pip (`pip --python <venv>`: no ensurepip, ten seconds saved). Every process runs with its
cwd in a temporary folder and without PYTHONPATH, so nothing of the checkout is importable.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from wheel_build import build_wheel

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_OFFSET = -7000  # as tests/tf/tf_cluster.py: away from the ports other tests pick

_SERVER = r"""
import json, os, sys, time
import tensorflow as tf
import geryon, geryon.tf
spec = json.loads(os.environ["GERYON_WHEEL_TASK"])
server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), spec["job"], spec["index"])
print("READY " + geryon.__file__, flush=True)
while True:
    rows = [c.__dict__ for c in geryon.tf.flow_counters()]
    with open(spec["counters"] + ".tmp", "w") as f:
        json.dump(rows, f)
    os.replace(spec["counters"] + ".tmp", spec["counters"])
    time.sleep(0.2)
"""

_CHIEF = r"""
import json, os
import keras
import numpy as np
import tensorflow as tf
import geryon, geryon.tf
library = geryon.tf.load()
spec = json.loads(os.environ["GERYON_WHEEL_TASK"])
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(spec["cluster"]), rpc_layer=geryon.tf.PROTOCOL)
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05)
rng = np.random.default_rng(0)
x = tf.constant(rng.normal(size=(32, 8)).astype("float32"))
y = tf.constant(rng.normal(size=(32, 1)).astype("float32"))

@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.run(replica, args=(x, y))

loss = float(coordinator.schedule(step, args=(x, y)).fetch())
print("RESULT " + json.dumps({"loss": loss, "geryon": geryon.__file__, "library": str(library.path),
                              "protocol": geryon.tf.PROTOCOL}), flush=True)
os._exit(0)
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH (it names the checkout) and without a virtualenv's marks."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow", **extra}


def _run(command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or _clean_env()
    )
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_builds_and_trains_on_grpc_geryon(tmp_path: Path) -> None:
    from geryon.tf.build import plan
    from geryon.tf.ports import free_port_pairs

    timings: dict[str, float] = {}
    started = time.monotonic()
    venv, outside = tmp_path / "venv", tmp_path / "host"
    outside.mkdir()
    # 1. The sdist, then the wheel from it (as `python -m build` does): the sdist must carry native/
    # for the wheel to ship it.
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    native = REPO_ROOT / "native"
    shipped = [*(native / "rendezvous").glob("*.cc"), *(native / "rendezvous").glob("*.h")]
    shipped += [native / "test_device" / "test_device.cc", *(native / "sanitizers").glob("*.supp")]
    for source in shipped:
        assert f"geryon/_native/{source.parent.name}/{source.name}" in names
    assert 'Requires-Dist: tensorflow-cpu==2.21.0; extra == "tf"' in metadata
    timings["wheel"] = time.monotonic() - started

    # 2. A fresh venv; TensorFlow through a .pth line (the module docstring says why).
    pip = [sys.executable, "-m", "pip"]
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=outside, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=outside,
            timeout=60,
        ).strip()
    )
    tf_spec = importlib.util.find_spec("tensorflow")
    assert tf_spec is not None and tf_spec.origin is not None
    tf_site = Path(tf_spec.origin).parents[1]
    (site / "zz_tensorflow_of_the_test_environment.pth").write_text(f"{tf_site}\n")
    _run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        cwd=outside,
        timeout=300,
    )
    timings["venv"] = time.monotonic() - started - timings["wheel"]

    # 3. `geryon native build` of the installed package: its own copy of the sources, the same key.
    show = "import geryon, geryon.tf.build as b; print(geryon.__file__); print(b.SOURCE_DIR)"
    where = _run([str(python), "-c", show], cwd=outside, timeout=120).split()
    assert Path(where[0]).is_relative_to(venv)
    assert Path(where[1]) == site / "geryon" / "_native" / "rendezvous"
    mark = time.monotonic()
    facts = json.loads(
        _run([str(venv / "bin" / "geryon"), "native", "build", "--json"], cwd=outside, timeout=1200)
    )
    timings["native build"] = time.monotonic() - mark
    expected = plan()  # the checkout's sources, this environment's TF and compiler
    assert facts["library"] == str(expected.output) and Path(facts["library"]).exists()
    assert facts["digest"] == expected.digest and facts["tf_version"] == expected.tf_version
    assert "server.cc" in facts["sources"]

    # 4. One PS and one worker (geryon.tf.server) and a chief training one step, all from the venv.
    mark = time.monotonic()
    ports = free_port_pairs(3, DATA_OFFSET)
    cluster = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{ports[1]}"],
        "ps": [f"127.0.0.1:{ports[2]}"],
    }
    env = _clean_env(GERYON_DATA_PORT_OFFSET=str(DATA_OFFSET), GERYON_AGENT_REPORT_S="off")
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for job in ("ps", "worker"):
            task = {"cluster": cluster, "job": job, "index": 0, "counters": str(tmp_path / f"{job}.json")}
            procs[job] = subprocess.Popen(
                [str(python), "-c", _SERVER],
                cwd=outside,
                env={**env, "GERYON_WHEEL_TASK": json.dumps(task)},
                stdout=subprocess.PIPE,
                stderr=(tmp_path / f"{job}.stderr").open("w"),
                text=True,
            )
        for job, proc in procs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()  # READY, or "" when the task died
            assert line.startswith("READY "), f"{job}: {(tmp_path / f'{job}.stderr').read_text()[-3000:]}"
            assert Path(line.split()[1]).is_relative_to(venv)
        task = {"cluster": cluster, "job": "chief", "index": 0}
        out = _run(
            [str(python), "-c", textwrap.dedent(_CHIEF)],
            cwd=outside,
            timeout=300,
            env={**env, "GERYON_WHEEL_TASK": json.dumps(task)},
        )
        result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
        time.sleep(0.6)  # the servers write their counters every 0.2 s
        worker_flows = json.loads((tmp_path / "worker.json").read_text())
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=30)
    timings["train"] = time.monotonic() - mark
    assert Path(result["geryon"]).is_relative_to(venv) and result["library"] == facts["library"]
    assert result["protocol"] == "grpc+geryon" and math.isfinite(result["loss"])
    # The worker pulled the variables from the PS on Geryon's flows, not on TF's gRPC.
    pulls = [f for f in worker_flows if f["role"] == "consumer" and "ps" in f["peer_task"]]
    assert pulls and sum(f["bytes_received"] for f in pulls) >= (8 * 16 + 16 + 16 + 1) * 4
    print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
