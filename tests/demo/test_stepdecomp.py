"""A traced worker step split into pull wait, compute, tail and gap (geryon.demo.stepdecomp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from geryon.demo.stepdecomp import (
    LAYER_OP,
    PULL,
    STEP,
    UPDATE_DONE,
    Event,
    classify,
    decompose,
    read_events,
    summarize,
    union_length,
)


def step_events(t0: float) -> list[Event]:
    """One step at t0 as the demo's ps trace shows it: pulls for 0.4 s, compute from the last pull
    (two ops overlapping on 2 inter-op threads, then a 0.05 s hole), updates done at the end."""
    return [
        Event(STEP, t0, t0 + 0.9, "train_step"),
        Event(PULL, t0 + 0.01, t0 + 0.1, "conv1/kernel"),
        Event(PULL, t0 + 0.01, t0 + 0.4, "conv1/bias"),
        Event(LAYER_OP, t0 + 0.4, t0 + 0.5, "fwd"),
        Event(LAYER_OP, t0 + 0.45, t0 + 0.55, "bwd input"),
        Event(LAYER_OP, t0 + 0.6, t0 + 0.7, "bwd filter"),
        Event(UPDATE_DONE, t0 + 0.7, t0 + 0.8, "ps0"),
        Event(UPDATE_DONE, t0 + 0.8, t0 + 0.9, "ps1"),
    ]


def test_a_step_splits_into_its_terms() -> None:
    parts = decompose(step_events(10.0) + step_events(11.0))
    assert len(parts) == 2
    first = parts[0]
    assert first.step_s == pytest.approx(0.9)
    assert first.pulls == 2 and first.last_pull_s == pytest.approx(0.4)
    assert first.first_op_s == pytest.approx(0.4) and first.last_op_s == pytest.approx(0.7)
    # Busy: [0.4, 0.55] and [0.6, 0.7]; the 0.05 s hole is idle inside compute.
    assert first.busy_s == pytest.approx(0.25) and first.idle_in_compute_s == pytest.approx(0.05)
    assert first.tail_s == pytest.approx(0.2)
    assert (first.first_update_s, first.last_update_s) == pytest.approx((0.8, 0.9))
    assert first.gap_s == pytest.approx(0.1)  # 10.9 to 11.0
    assert parts[1].gap_s is None  # the trace's last step: no next one


def test_steps_without_layer_ops_and_events_outside_steps_are_left_out() -> None:
    # A step cut by the trace window (its ops before the window) and a pull between steps.
    events = [Event(STEP, 0.0, 0.5), Event(PULL, 0.6, 0.7), *step_events(1.0)]
    parts = decompose(events)
    assert len(parts) == 1 and parts[0].pulls == 2


def test_an_arrival_at_a_steps_exact_start_belongs_to_the_step_before() -> None:
    # Back-to-back steps (the simulator's iterations): the last push of one ends as the next starts.
    events = [*step_events(0.0), Event(UPDATE_DONE, 0.9, 0.9, "ps1"), *step_events(0.9)]
    first, second = decompose(events)
    assert first.last_update_s == pytest.approx(0.9)
    assert second.first_update_s == pytest.approx(0.8)  # its own, not the one at 0.9


def test_summarize_takes_medians_and_skips_missing_values() -> None:
    parts = decompose(step_events(0.0) + step_events(1.0) + step_events(2.5))
    s = summarize(parts)
    assert s["steps"] == 3
    assert s["step_s"] == pytest.approx(0.9)
    assert s["gap_s"] == pytest.approx((0.1 + 0.6) / 2)  # two gaps; the last step has none
    assert summarize([]) == {"steps": 0}


def test_union_counts_overlaps_once() -> None:
    assert union_length([(0.0, 1.0), (0.5, 1.5), (2.0, 3.0)]) == pytest.approx(2.5)
    assert union_length([]) == 0.0


def test_classify_reads_tensorflow_event_names() -> None:
    assert classify("EagerLocalExecute: __inference_train_step_928", {}) == STEP
    assert classify("EagerExecute", {}) is None
    done = "ExecutorState::ProcessAsync::Done"
    pull = {"kernel_type": "_Recv", "name": "vggmini_1/conv1_1_1/Reshape/concat/ReadVariableOp/_2"}
    assert classify(done, pull) == PULL
    assert classify(done, {**pull, "name": "vggmini_1/fc1_1/Cast/concat/ReadVariableOp_3/_60"}) == PULL
    assert classify(
        done, {"kernel_type": "_Recv", "name": "GroupCrossDeviceControlEdges_1/Identity/_159"}
    ) == (UPDATE_DONE)
    assert classify(done, {"kernel_type": "_Recv", "name": "input/_1"}) is None
    assert classify("vggmini_1/conv1_1_1/Relu:_MklNativeFusedConv2D", {}) == LAYER_OP
    assert (
        classify(
            "gradient_tape/vggmini_1/conv3_2_1/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilterWithBias",
            {},
        )
        == LAYER_OP
    )
    # A layer's gather of its pulled parts runs as they arrive: not compute.
    assert classify("vggmini_1/conv3_1_1/convolution/concat:ConcatV2", {}) is None
    assert classify("mul_24/_99:_Send", {}) is None  # an update's send, outside any layer
    assert classify("random_uniform/RandomUniform:RandomUniform", {}) is None


def test_a_bad_event_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"event\.kind"):
        Event("op", 0.0, 1.0)
    with pytest.raises(ValueError, match="before start_s"):
        Event(STEP, 1.0, 0.5, "backwards")


def test_read_events_takes_steps_ops_and_arrivals_from_an_xspace(tmp_path: Path) -> None:
    """A synthetic trace as TensorFlow writes it: a host plane with a step, a layer op and two
    ProcessAsync::Done arrivals (kernel type interned, node name inline), and a device plane that is
    not read. Read through geryon.threshold.incluster.host_events."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU", id=0)
    names = {
        1: "EagerLocalExecute: __inference_train_step_928",
        2: "vggmini_1/conv1_1_1/Relu:_MklNativeFusedConv2D",
        3: "ExecutorState::ProcessAsync::Done",
        4: "ThreadpoolListener::Region",
    }
    for mid, name in names.items():
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
    for sid, name in {1: "kernel_type", 2: "name", 3: "_Recv"}.items():
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = name
    line = plane.lines.add(id=0, name="tf_Compute", timestamp_ns=1_000)  # origin 1 us
    us = 1_000_000  # ps
    line.events.add(metadata_id=1, offset_ps=0, duration_ps=900 * us)
    line.events.add(metadata_id=2, offset_ps=400 * us, duration_ps=100 * us)
    line.events.add(metadata_id=4, offset_ps=10 * us, duration_ps=5 * us)
    for offset, node in (
        (100 * us, "vggmini_1/conv1_1_1/ReadVariableOp/_2"),
        (800 * us, "GroupCrossDeviceControlEdges_0/Identity/_9"),
    ):
        ev = line.events.add(metadata_id=3, offset_ps=offset, duration_ps=0)
        ev.stats.add(metadata_id=1, ref_value=3)
        ev.stats.add(metadata_id=2, str_value=node)
    device = space.planes.add(name="/device:GPU:0", id=1)
    device.event_metadata[1].id = 1
    device.event_metadata[1].name = names[1]
    device.lines.add(id=0, timestamp_ns=0).events.add(metadata_id=1, offset_ps=0, duration_ps=us)
    trace = tmp_path / "w.xplane.pb"
    trace.write_bytes(space.SerializeToString())

    events = read_events(trace)
    assert sorted((e.kind, e.name) for e in events) == sorted(
        [
            (STEP, names[1]),
            (LAYER_OP, names[2]),
            (PULL, "vggmini_1/conv1_1_1/ReadVariableOp/_2"),
            (UPDATE_DONE, "GroupCrossDeviceControlEdges_0/Identity/_9"),
        ]
    )
    step = next(e for e in events if e.kind == STEP)
    assert (step.start_s, step.end_s) == pytest.approx((1e-6, 901e-6))
    (part,) = decompose(events)
    assert part.last_pull_s == pytest.approx(100e-6) and part.first_op_s == pytest.approx(400e-6)
    assert part.last_update_s == pytest.approx(800e-6)


def test_read_events_names_an_unreadable_trace(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff not a protobuf")
    with pytest.raises(ValueError, match="not a readable XSpace trace"):
        read_events(bad)
