"""Chrome trace export: the format itself, and the timeline a real simulation records."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import defaultdict

import pytest

from geryon.threshold.profile import synthetic
from geryon.threshold.simulator import MODES, simulate
from geryon.threshold.trace import Span, chrome_trace, spans_from_chrome_trace, write_chrome_trace


def test_hosts_become_processes_tracks_become_threads_times_are_microseconds():
    spans = [
        Span("worker0", "gpu", "forward conv1", "forward", 0.5, 0.75, {"layer": 0}),
        Span("ps0", "to worker0 class 0", "conv1/kernel", "pull", 0.0, 0.5),
        Span("worker0", "to ps0 class 1", "fc/kernel", "push", 1.0, 2.0),
        Span("ps0", "to worker0 class 1", "fc/kernel", "pull", 0.0, 0.25),
    ]
    trace = chrome_trace(spans, metadata={"run": "x"})
    json.dumps(trace)  # plain JSON
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    processes = {e["args"]["name"]: e["pid"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["args"]["name"]): e["tid"] for e in meta if e["name"] == "thread_name"}
    assert processes == {"worker0": 1, "ps0": 2}
    assert threads == {
        (1, "gpu"): 1,
        (2, "to worker0 class 0"): 1,
        (1, "to ps0 class 1"): 2,
        (2, "to worker0 class 1"): 2,
    }
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    forward = next(e for e in events if e["name"] == "forward conv1")
    assert forward == {
        "name": "forward conv1",
        "cat": "forward",
        "ph": "X",
        "ts": 500000.0,
        "dur": 250000.0,
        "pid": 1,
        "tid": 1,
        "args": {"layer": 0},
    }
    assert trace["otherData"] == {"run": "x"}
    back = sorted(spans_from_chrome_trace(trace), key=lambda s: (s.host, s.track, s.start_s))
    want = sorted(spans, key=lambda s: (s.host, s.track, s.start_s))
    assert [(s.host, s.track, s.name, s.category, dict(s.args)) for s in back] == [
        (s.host, s.track, s.name, s.category, dict(s.args)) for s in want
    ]
    assert [t for s in back for t in (s.start_s, s.end_s)] == pytest.approx(
        [t for s in want for t in (s.start_s, s.end_s)]
    )


@pytest.mark.parametrize(("start", "end"), [(1.0, 0.5), (math.nan, 1.0), (0.0, math.inf)])
def test_a_span_with_bad_times_is_named(start, end):
    with pytest.raises(ValueError, match=r"spans\[1\] \('bad'\)"):
        chrome_trace([Span("h", "t", "ok", "c", 0.0, 1.0), Span("h", "t", "bad", "c", start, end)])


def test_reading_a_trace_without_names_fails_clearly():
    with pytest.raises(ValueError, match="traceEvents"):
        spans_from_chrome_trace({"events": []})
    with pytest.raises(ValueError, match=r"traceEvents\[0\]"):
        spans_from_chrome_trace(
            {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "x"}]}
        )


def test_write_is_atomic_and_round_trips(tmp_path):
    r = simulate(
        synthetic([4000, 8000], [1e-3, 1e-3], [1e-3, 1e-3]),
        workers=2,
        num_ps=2,
        bandwidth_bps=1e7,
        mode="network",
        trace=True,
    )
    target = tmp_path / "run.json"
    write_chrome_trace(target, r.chrome_trace())
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left behind
    loaded = json.loads(target.read_text())
    assert loaded["otherData"]["geryon.simulate"]["iteration_s"] == r.iteration_s
    assert len(spans_from_chrome_trace(loaded)) == len(r.spans or ())
    with pytest.raises(OSError):
        write_chrome_trace(tmp_path / "missing" / "run.json", loaded)


@pytest.mark.parametrize("mode", MODES)
def test_the_simulated_timeline_is_consistent_with_the_result(mode):
    rng = random.Random(29)
    p = synthetic(
        [4 * rng.randint(100, 2000) for _ in range(6)],
        [rng.uniform(1e-3, 3e-3) for _ in range(6)],
        [rng.uniform(1e-3, 3e-3) for _ in range(6)],
    )
    iterations = 3
    r = simulate(
        p,
        workers=3,
        num_ps=2,
        bandwidth_bps=1e7,
        mode=mode,
        slice_bytes=1500,
        iterations=iterations,
        trace=True,
    )
    spans = spans_from_chrome_trace(json.loads(json.dumps(r.chrome_trace())))
    gpu = sorted((s for s in spans if s.track == "gpu"), key=lambda s: s.start_s)
    # The GPU runs one op at a time, every forward and backward once per iteration.
    assert len(gpu) == iterations * 2 * p.num_layers
    for a, b in itertools.pairwise(gpu):
        assert a.end_s <= b.start_s + 1e-9
    assert sum(s.end_s - s.start_s for s in gpu) == pytest.approx(iterations * p.compute_s, rel=1e-6)
    pulls = [s for s in spans if s.category == "pull"]
    pushes = [s for s in spans if s.category == "push"]
    assert len(pulls) == len(pushes) == iterations * r.shards  # the representative worker's transfers
    # An iteration ends with its last aggregated push.
    by_iteration = defaultdict(list)
    for s in pushes:
        by_iteration[s.args["iteration"]].append(s.end_s)
    for it, end in enumerate(r.iteration_ends):
        assert max(by_iteration[it]) == pytest.approx(end, abs=1e-9)
    # A layer's forward starts only after its parameters arrived; its pushes start after its backward.
    forward_start = {
        (s.args["iteration"], s.args["layer"]): s.start_s for s in gpu if s.category == "forward"
    }
    backward_end = {(s.args["iteration"], s.args["layer"]): s.end_s for s in gpu if s.category == "backward"}
    for s in pulls:
        assert s.end_s <= forward_start[(s.args["iteration"], s.args["layer"])] + 1e-9
    for s in pushes:
        assert s.start_s >= backward_end[(s.args["iteration"], s.args["layer"])] - 1e-9
    if mode == "end-host":
        # One transfer at a time per connection.
        per_track = defaultdict(list)
        for s in pulls + pushes:
            per_track[(s.host, s.track)].append(s)
        for track in per_track.values():
            track.sort(key=lambda s: s.start_s)
            for a, b in itertools.pairwise(track):
                assert a.end_s <= b.start_s + 1e-9
