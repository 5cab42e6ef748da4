"""`geryon simulate --profile TRACE_DIR`: a real TensorFlow profiler trace, captured by a real TF process
training the demo's tiny model for a few steps, read as the compute profile; and each bad trace or
missing flag named with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from geryon_cli import geryon

from geryon.cluster.local import REPO_ROOT

pytest.importorskip("tensorflow")

BATCH = 8
STEPS = 5
# Trains the demo's tiny model with the same loss and SGD as a worker's step, traced by TensorFlow's
# own profiler (tf.profiler.experimental.start/stop) over STEPS steps after 3 untraced ones.
CAPTURE = f"""
import sys
from geryon.tfenv import import_tensorflow
tf = import_tensorflow()
import keras
from geryon.cluster.models import build_model
model = build_model("tiny", (16, 16, 3))
opt = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def step():
    x = tf.random.normal(({BATCH}, 16, 16, 3))
    y = tf.random.uniform(({BATCH},), 0, 10, dtype=tf.int32)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

for _ in range(3):
    step()
tf.profiler.experimental.start(sys.argv[1])
for _ in range({STEPS}):
    step()
tf.profiler.experimental.stop()
"""


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("trace") / "logdir"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", CAPTURE, str(logdir)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(logdir.glob("plugins/profile/*/*.xplane.pb")), "TensorFlow wrote no trace"
    return logdir


def test_a_trace_directory_is_the_compute_profile(trace_dir: Path, tmp_path: Path) -> None:
    saved = tmp_path / "profile.json"
    r = geryon(
        "simulate",
        "--profile",
        str(trace_dir),
        "--model",
        "tiny",
        "--batch-size",
        str(BATCH),
        "--workers",
        "2",
        "--ps",
        "2",
        "--bandwidth",
        "200mbit",
        "--mode",
        "fifo",
        "network",
        "--save-profile",
        str(saved),
        "--json",
        "--quiet",
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    profile = json.loads(saved.read_text())
    assert out["profile_source"].startswith("incluster:") and out["profile_source"].endswith(".xplane.pb")
    assert out["batch_size"] == BATCH
    # The tiny model's four parameter layers, each with traced forward and backward time; the steps
    # counted from the trace are the traced ones.
    assert [layer["name"] for layer in profile["layers"]] == ["conv1_1", "conv2_1", "fc1", "logits"]
    assert all(layer["forward_s"] > 0 and layer["backward_s"] > 0 for layer in profile["layers"])
    assert profile["meta"]["steps"] == STEPS
    compute = sum(layer["forward_s"] + layer["backward_s"] for layer in profile["layers"])
    for mode in ("fifo", "network"):  # T >= C: the traced compute is in every simulated step
        assert out["modes"][mode]["iteration_s"] >= compute * 0.999, mode


def test_the_xplane_file_itself_is_accepted(trace_dir: Path) -> None:
    xplane = next(trace_dir.glob("plugins/profile/*/*.xplane.pb"))
    r = geryon(
        "simulate", "--profile", str(xplane), "--model", "tiny", "--batch-size", "8", "--workers", "2",
        "--ps", "2", "--json", "--quiet", cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--model: --profile '{t}' is a TensorFlow profiler trace: --model must name the demo model"),
        (["--model", "vgg19"], "one of vggmini, tiny, vgg16, resnet50, mobilenetv2; got 'vgg19'"),
        (["--model", "tiny"], "--batch-size: --profile '{t}' is a trace"),
        (["--model", "tiny", "--batch-size", "8", "--measure"], "--measure: not with --profile"),
    ],
)
def test_trace_flags_are_named(trace_dir: Path, extra: list[str], message: str) -> None:
    r = geryon("simulate", "--profile", str(trace_dir), *extra, "--quiet", cwd=REPO_ROOT, timeout=300)
    assert r.returncode == 2, r.stderr
    assert message.format(t=trace_dir) in r.stderr


def test_missing_empty_and_unreadable_traces_exit_2(tmp_path: Path) -> None:
    flags = ["--model", "tiny", "--batch-size", "8", "--quiet"]
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    r = geryon("simulate", "--profile", str(empty_dir), *flags, cwd=REPO_ROOT)
    assert r.returncode == 2 and f"--profile '{empty_dir}': no *.xplane.pb file there" in r.stderr

    missing = tmp_path / "gone.xplane.pb"
    r = geryon("simulate", "--profile", str(missing), *flags, cwd=REPO_ROOT)
    assert r.returncode == 2 and f"--profile '{missing}': no *.xplane.pb file there" in r.stderr

    garbage = tmp_path / "bad" / "host.xplane.pb"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\xff\xfe not a protobuf \x00\x01")
    r = geryon("simulate", "--profile", str(garbage.parent), *flags, cwd=REPO_ROOT)
    assert r.returncode == 2 and "--profile:" in r.stderr and "not a readable XSpace trace" in r.stderr

    nothing = tmp_path / "nothing" / "host.xplane.pb"
    nothing.parent.mkdir()
    nothing.write_bytes(b"")  # a valid, empty XSpace: a capture that caught no activity
    r = geryon("simulate", "--profile", str(nothing.parent), *flags, cwd=REPO_ROOT)
    assert r.returncode == 2 and "no TensorFlow op on a host plane (empty?)" in r.stderr

    r = geryon("simulate", "--workers", "2", "--quiet", cwd=REPO_ROOT)
    assert r.returncode == 2 and "--model or --profile: one is required" in r.stderr
    r = geryon(
        "simulate", "--profile", str(tmp_path / "p.json"), "--model", "vgg19", "--quiet", cwd=REPO_ROOT
    )
    assert r.returncode == 2 and "--model: not allowed with --profile" in r.stderr
