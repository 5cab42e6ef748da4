"""In-cluster profile: a real PS cluster (demo task processes, one worker with TF's profiler server)
trained by the demo's own chief, traced by the CLI, turned into a profile; plus the trace parsing on
a trace written with TensorFlow's own XSpace protobuf and the CLI's bad flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from geryon.cluster.local import REPO_ROOT, local_cluster
from geryon.demo.localchief import training_chief
from geryon.threshold.incluster import OpTime, layer_of, main, op_times, profile_from_ops
from geryon.threshold.profile import Profile, ProfileError

pytest.importorskip("tensorflow")

SHAPE = (16, 16, 3)
BATCH = 8


def test_capture_in_running_cluster_gives_a_profile(tmp_path: Path) -> None:
    with (
        local_cluster(1, chief=True, profile_workers=True, timeout=150) as lc,
        training_chief(lc, tmp_path, model="tiny", input_shape=SHAPE, batch_size=BATCH),
    ):
        out = tmp_path / "profile.json"
        service = f"grpc://127.0.0.1:{lc.profiler_ports['worker:0']}"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "geryon.threshold.incluster",
                "--service",
                service,
                "--duration-ms",
                "2000",
                "--logdir",
                str(tmp_path / "trace"),
                "--model",
                "tiny",
                "--input-shape",
                "16,16,3",
                "--batch-size",
                str(BATCH),
                "--out",
                str(out),
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert cli.returncode == 0, cli.stderr[-3000:]
    profile = Profile.load(out)
    # The same profile layers the FLOPs- and CPU-profilers produce for this model.
    assert [layer.name for layer in profile.layers] == ["conv1_1", "conv2_1", "fc1", "logits"]
    assert profile.source == f"incluster:{service}"
    assert profile.meta["steps"] >= 3  # a 2 s window of a model this small holds many steps
    for layer in profile.layers:
        assert layer.forward_s > 0 and layer.backward_s > 0, layer
    # Per-step compute cannot exceed the window split over the steps times the worker's 2 threads.
    assert profile.compute_s < 2 * 2.0 / profile.meta["steps"] * 1.5
    assert Path(profile.meta["trace"]).is_file()


_FIT_TRACE = """
import os, sys
import tensorflow as tf, tf_keras
from geryon.cluster.models import build_tf_keras_model
model = build_tf_keras_model("tiny", (16, 16, 3))
model.compile(tf_keras.optimizers.legacy.SGD(0.01),
              tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2)
batch = (tf.random.uniform((8, 16, 16, 3)), tf.zeros((8,), tf.int64))
data = tf.data.Dataset.from_tensors(batch).repeat()
model.fit(data, steps_per_epoch=4, epochs=1, verbose=0)  # traced and warm before the capture
tf.profiler.experimental.start(sys.argv[1])
model.fit(data, steps_per_epoch=4, epochs=1, verbose=0)
tf.profiler.experimental.stop()
"""


def test_a_fit_trace_with_steps_per_execution_has_both_passes_per_layer(tmp_path: Path) -> None:
    """tf_keras' `fit` with steps_per_execution runs its steps in a `while` loop: its trace, read by
    the CLI, still gives every layer a forward and a backward time (issue 36: the fit path's
    profile read backward 0 s when the loop's prefix hid `gradient_tape`)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run(
        [sys.executable, "-c", _FIT_TRACE, str(tmp_path / "trace")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "profile.json"
    argv = ["--trace", str(tmp_path / "trace"), "--model", "tiny", "--input-shape", "16,16,3"]
    assert main([*argv, "--batch-size", str(BATCH), "--out", str(out)]) == 0
    profile = Profile.load(out)
    assert profile.meta["steps"] == 4  # 2 functions of 2 steps: every body op ran 4 times
    for layer in profile.layers:
        assert layer.forward_s > 0 and layer.backward_s > 0, layer


def _xspace(path: Path) -> None:
    """A trace shaped like the worker's (names and planes as TF 2.21 wrote them in a real capture)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU", id=0)
    names = {
        1: "tiny_1/conv1_1_1/Relu:_MklNativeFusedConv2D",
        2: "gradient_tape/tiny_1/conv1_1_1/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilter",
        3: "tiny_1/pool1_1/MaxPool2d:_MklNativeMaxPool",  # folded into conv1_1
        4: "tiny_1/logits_1/BiasAdd:_MklNativeFusedMatMul",
        5: "EagerService:Enqueue",  # not an op
        6: "ExecutorState::Process",  # not an op
        7: "mul_3:Mul",  # the update's learning-rate multiply: outside any layer
    }
    for mid, name in names.items():
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
    line = plane.lines.add(id=1, name="tf_Compute/1")
    durations_us = {1: 100, 2: 300, 3: 20, 4: 10, 5: 5000, 6: 1, 7: 7}
    t = 0
    for _step in range(4):
        for mid, us in durations_us.items():
            line.events.add(metadata_id=mid, offset_ps=t, duration_ps=us * 1_000_000)
            t += us * 1_000_000
    space.planes.add(name="Task Environment", id=1)
    path.write_bytes(space.SerializeToString())


def test_trace_to_profile(tmp_path: Path) -> None:
    from geryon.cluster.models import build_model

    trace = tmp_path / "host.xplane.pb"
    _xspace(trace)
    ops = op_times(trace)
    assert "EagerService" not in ops and "ExecutorState" not in ops
    assert ops["mul_3"] == OpTime(pytest.approx(28e-6), 4)  # type: ignore[arg-type]
    profile = profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=BATCH, source="incluster:test")
    by_name = {layer.name: layer for layer in profile.layers}
    assert by_name["conv1_1"].forward_s == pytest.approx(120e-6)  # conv + its folded pool
    assert by_name["conv1_1"].backward_s == pytest.approx(300e-6)
    assert by_name["logits"].forward_s == pytest.approx(10e-6)
    assert by_name["fc1"].forward_s == 0
    assert profile.meta["steps"] == 4
    assert profile.meta["unattributed_s_per_step"] == pytest.approx(7e-6)


def test_partial_steps_at_the_capture_edges_do_not_scale_a_pass() -> None:
    """A capture that starts inside a step's backward and ends inside a later step's forward holds
    the forward ops 4 times and the backward ops 3 times: each op counts per its own executions,
    so a 100 us conv forward and its 300 us backward read 100 and 300 us per step (dividing every
    op's total by the median count, 4, read the backward as 225 us)."""
    from geryon.cluster.models import build_model

    ops = {
        "tiny_1/conv1_1_1/Relu": OpTime(4 * 100e-6, 4),
        "tiny_1/logits_1/BiasAdd": OpTime(4 * 10e-6, 4),
        "tiny_1/fc1_1/MatMul": OpTime(4 * 50e-6, 4),
        "gradient_tape/tiny_1/conv1_1_1/Conv2DBackpropFilter": OpTime(3 * 300e-6, 3),
        "once": OpTime(90e-6, 1),  # outside any layer, on one step of 4: its share, 22.5 us
    }
    profile = profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=BATCH, source="incluster:test")
    by_name = {layer.name: layer for layer in profile.layers}
    assert profile.meta["steps"] == 4
    assert by_name["conv1_1"].forward_s == pytest.approx(100e-6)
    assert by_name["conv1_1"].backward_s == pytest.approx(300e-6)
    assert profile.meta["unattributed_s_per_step"] == pytest.approx(22.5e-6)


def test_layer_scopes() -> None:
    leaves = {"conv1_1": 0, "conv1": 1, "fc1": 2}
    assert layer_of("tiny_1/conv1_1_1/Relu", leaves) == (0, False)
    assert layer_of("tiny_1/conv1_1/Relu", leaves) == (0, False)  # exact name wins over stripping
    assert layer_of("gradient_tape/tiny_1/fc1_1/MatMul/MatMul", leaves) == (2, True)
    assert layer_of("sparse_categorical_crossentropy/Sum", leaves) is None
    assert layer_of("fc1", leaves) is None  # an op named like a layer is not inside its scope


def test_ops_of_a_step_loop_body_keep_their_layer_and_pass() -> None:
    """Names as a 2-step tf_keras 2.21 `fit` (steps_per_execution=2) traced them: the loop body's
    prefix comes before `gradient_tape`, which therefore is not the first scope (before: every
    backward op read as forward, and the fit path's profile had a backward pass of 0 s)."""
    leaves = {"conv1_2": 0, "fc1": 1}
    body = "while/body/_1/"
    assert layer_of(body + "while/vggmini/conv1_2/Relu", leaves) == (0, False)
    assert layer_of(body + "gradient_tape/while/vggmini/conv1_2/ReluGrad", leaves) == (0, True)
    assert layer_of(body + "gradient_tape/while/vggmini/fc1/MatMul/MatMul_1", leaves) == (1, True)
    assert layer_of(body + "while/SGD/SGD/update_3/ResourceApplyGradientDescent", leaves) is None


def test_trace_of_another_model_is_a_clear_error() -> None:
    from geryon.cluster.models import build_model

    ops = {"other_1/convA_1/Relu": OpTime(1e-3, 4), "gradient_tape/other_1/head/MatMul": OpTime(1e-3, 4)}
    with pytest.raises(ProfileError, match="no op of model 'tiny'"):
        profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=1, source="x")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "tiny", "--batch-size", "8", "--out", "p.json"], "one of the arguments"),
        (
            ["--trace", "t", "--service", "grpc://h:1", "--model", "tiny", "--batch-size", "8", "--out", "p"],
            "not allowed",
        ),
        (["--trace", "t", "--model", "nope", "--batch-size", "8", "--out", "p.json"], "invalid choice"),
        (["--trace", "t", "--model", "tiny", "--batch-size", "0", "--out", "p.json"], "integer >= 1"),
        (
            ["--trace", "t", "--model", "tiny", "--batch-size", "8", "--input-shape", "16,16", "--out", "p"],
            "H,W,C",
        ),
    ],
)
def test_bad_flags_exit_2(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(flags)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_values_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "tiny", "--batch-size", "8"]
    assert main(["--service", "localhost:1", *base, "--out", str(tmp_path / "p.json")]) == 2
    assert "grpc://HOST:PORT" in capsys.readouterr().err
    assert main(["--trace", str(tmp_path), *base, "--out", str(tmp_path / "p.json")]) == 2
    assert "no *.xplane.pb" in capsys.readouterr().err
    assert main(["--trace", str(tmp_path), *base, "--out", str(tmp_path / "absent" / "p.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert (
        main(["--trace", str(tmp_path), *base, "--input-shape", "2,2,3", "--out", str(tmp_path / "p")]) == 2
    )
    assert "--input-shape" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def _write_trace(path: Path, lines: list[tuple[int, list[tuple[str, int, int]]]]) -> Path:
    """An XSpace trace written with TensorFlow's own protobuf: one host plane, one line (thread) per
    (start_ns, [(event name, offset_ps, duration_ps), ...])."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU", id=0)
    ids: dict[str, int] = {}
    for thread, (start_ns, events) in enumerate(lines):
        line = plane.lines.add(id=thread, name=f"tf_Compute/{thread}", timestamp_ns=start_ns)
        for name, offset_ps, duration_ps in events:
            mid = ids.setdefault(name, len(ids) + 1)
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = name
            line.events.add(metadata_id=mid, offset_ps=offset_ps, duration_ps=duration_ps)
    path.write_bytes(space.SerializeToString())
    return path


def test_overlap_across_threads_is_counted_once(tmp_path: Path) -> None:
    """Two threads each running a 100 us op over the same 50 us: 150 us of wall time, 200 us summed."""
    from geryon.threshold.incluster import read_trace, union_length

    assert union_length([(0, 10), (5, 20), (30, 40), (32, 35)]) == 30
    assert union_length([]) == 0
    trace = _write_trace(
        tmp_path / "two.xplane.pb",
        [
            (0, [("tiny_1/conv1_1_1/Relu:_MklNativeFusedConv2D", 0, 100_000_000)]),
            (50_000, [("gradient_tape/tiny_1/fc1_1/MatMul:MatMul", 0, 100_000_000)]),
        ],
    )
    ops, overlap = read_trace(trace)
    assert overlap == pytest.approx(150 / 200)
    from geryon.cluster.models import build_model

    profile = profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=1, source="x", overlap=overlap)
    by_name = {layer.name: layer for layer in profile.layers}
    assert by_name["conv1_1"].forward_s == pytest.approx(75e-6)
    assert by_name["fc1"].backward_s == pytest.approx(75e-6)
    assert profile.compute_s == pytest.approx(150e-6)  # the wall time the two ops took
    assert profile.meta["overlap"] == pytest.approx(0.75)
    with pytest.raises(ProfileError, match=r"overlap: expected a factor in \(0, 1\]"):
        profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=1, source="x", overlap=1.5)


def test_transfer_kernels_in_a_loop_body_are_not_layer_compute(tmp_path: Path) -> None:
    """A step loop's _Send carries its layer's scope (a fit-path cluster trace); it stays out of the
    layer and is counted among the unattributed ops."""
    from geryon.cluster.models import build_model
    from geryon.threshold.incluster import TRANSFERS, read_trace

    names = [
        "while/body/_1/while/tiny_1/conv1_1_1/Relu:_MklNativeFusedConv2D",
        "while/body/_1/gradient_tape/while/tiny_1/conv1_1_1/ReluGrad/_42:_Send",
        "while/body/_1/while/tiny_1/fc1_1/MatMul/ReadVariableOp/_7:_Recv",
    ]
    events = [(name, i * 200_000_000, 100_000_000) for i, name in enumerate(names)]
    ops, overlap = read_trace(_write_trace(tmp_path / "loop.xplane.pb", [(0, events)]))
    assert set(ops) == {names[0].split(":")[0], TRANSFERS} and ops[TRANSFERS].count == 2
    profile = profile_from_ops(ops, build_model("tiny", SHAPE), batch_size=1, source="x", overlap=overlap)
    by_name = {layer.name: layer for layer in profile.layers}
    assert by_name["conv1_1"].forward_s == pytest.approx(100e-6)
    assert by_name["conv1_1"].backward_s == 0 and by_name["fc1"].forward_s == 0
    assert profile.compute_s == pytest.approx(100e-6)
    assert profile.meta["unattributed_s_per_step"] == pytest.approx(200e-6)
