"""Per-layer compute times measured inside the running cluster, from TensorFlow's profiler.

The on-CPU profiler (`profiler.py`) times each Keras layer alone on an idle machine; in the demo's
cluster five TensorFlow processes share two cores, so the same layers run slower there and the
simulator's predictions come out short. As dPRO does with its traces, this module takes the times
where the model really runs: a worker task started with a profiler server (the demo's task,
`"profiler_port"` in its spec, runs `tf.profiler.experimental.server.start`) is traced for a few
seconds while the cluster trains (`tf.profiler.experimental.client.trace`), and the trace's op
events are summed per Keras layer:

    python -m geryon.threshold.incluster --service grpc://10.0.0.2:6009 --duration-ms 3000 \\
        --model vggmini --batch-size 8 --out vggmini-incluster.json
    python -m geryon.threshold.incluster --trace LOGDIR_OR_XPLANE_PB --model vggmini --batch-size 8 \\
        --out vggmini-incluster.json

The trace (XSpace protobuf, ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``) has one event per
op kernel execution on the host plane's threads, named ``<op name>:<op type>`` (e.g.
``vggmini_1/conv1_1_1/Relu:_MklNativeFusedConv2D`` or, for the backward pass,
``gradient_tape/vggmini_1/conv1_1_1/convolution/Conv2DBackpropFilter:...``). An op belongs to the
Keras layer whose name scope appears in its name (Keras 3 adds ``_<n>`` to a scope traced more than
once); ops under a ``gradient_tape/`` scope are backward, at the front of the name in a step traced
alone (``gradient_tape/vggmini_1/...``) or after the loop body's prefix when the step runs in a
`tf.range` loop (tf_keras' `steps_per_execution`, a custom loop's inner loop: a 2-step `fit` traced
with tf_keras 2.21 names ``while/body/_1/gradient_tape/while/vggmini/conv1_2/ReluGrad`` and, forward,
``while/body/_1/while/vggmini/conv1_2/Relu``). Layers fold into profile layers exactly as
`profiles.model_structure` groups them, so the result is a regular `geryon.profile` that
`geryon simulate --profile` reads. A layer's time is the sum over its ops of each op's mean duration
per execution times its executions per step (its count over the capture's steps, the median count
of the attributed ops, rounded; 1 for a training step's ops): contention and the cluster's thread
limits are in it. Per op, not the layer's summed durations over the steps: a capture starts and
ends inside steps, so the forward ops of a partial step at one edge run once more than the backward
ops (4 and 3 times in a 3 s capture of 0.8 s steps), and dividing every op by the median count
scaled one pass by 4/3 or 3/4 (a saved paired capture: C 326 ms that way, 392 ms per op).
Ops of one step run on 2 inter-op threads at once, so their summed durations exceed the time
the step computes: every time is scaled by the trace's overlap factor (wall time with at least
one op running / summed op time, `read_trace`; `meta.overlap`). Ops outside any layer (the loss, the
learning-rate multiply of the update, sends) are reported in `meta.unattributed_s_per_step`, not
added to a layer.

CPU host planes only: a GPU worker's kernels land on device planes this does not read yet.
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geryon.threshold.profile import LayerSpec, Profile, ProfileError

BACKWARD_SCOPE = "gradient_tape"
_SUFFIX = re.compile(r"_\d+$")
# Events of the executor and thread pools carry no op: "ExecutorState::Process", "ThreadpoolListener::...".
_OP_EVENT = re.compile(r"^(?P<name>[^:\s]+):(?P<type>[A-Za-z0-9_]+)$")
# TraceMe names of the same "a:b" shape that are not op kernels: the remote eager service's
# "EagerService:Enqueue" spans a whole function execution on the worker.
_NOT_OPS = frozenset({"EagerService"})
# Transfer kernels are not a layer's compute, though inside a step loop's body they carry its scope
# ("while/body/_1/.../vggmini/conv1_2/..._Send"; a fit-path cluster trace: 68 of 83 ms of sends per
# capture read as layer time). They are summed under this one key, which names no layer, so they land
# in `meta.unattributed_s_per_step` as the docs say (geryon.demo.stepdecomp leaves them out too).
TRANSFER_TYPES = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
TRANSFERS = "(transfer kernels: " + " ".join(sorted(TRANSFER_TYPES)) + ")"


@dataclass(frozen=True)
class OpTime:
    total_s: float
    count: int


def find_xplane(path: str | Path) -> Path:
    """`path` itself if it is a file, else the newest ``*.xplane.pb`` below it."""
    p = Path(path)
    if p.is_file():
        return p
    found = sorted(p.glob("**/*.xplane.pb"), key=lambda f: f.stat().st_mtime) if p.is_dir() else []
    if not found:
        raise ProfileError(f"--trace {str(path)!r}: no *.xplane.pb file there")
    return found[-1]


def capture(service: str, logdir: str | Path, duration_ms: int) -> Path:
    """Traces the profiler server at `service` (``grpc://host:port``) for `duration_ms`."""
    from geryon.tfenv import import_tensorflow

    tf = import_tensorflow()
    # Three attempts: the server answers "no trace collected" when the window caught no activity.
    tf.profiler.experimental.client.trace(service, str(logdir), duration_ms, num_tracing_attempts=3)
    return find_xplane(logdir)


def op_times(xplane: str | Path) -> dict[str, OpTime]:
    """Summed duration and count of every op (by op name) on the trace's host planes."""
    return read_trace(xplane)[0]


def read_trace(xplane: str | Path) -> tuple[dict[str, OpTime], float]:
    """(`op_times`, overlap factor): the factor is the wall time during which at least one op ran
    (the union of all op intervals, over every thread) over the summed op durations, so 1.0 when ops
    never overlap. With 2 inter-op threads a step's ops overlap and their durations add up to more
    than the step's compute takes (an earlier vggmini capture: 1583 ms summed against a 1324 ms
    round); scaling by this factor takes the overlap out (`profile_from_ops(overlap=...)`)."""
    totals: dict[str, list[float]] = {}
    spans: list[tuple[int, int]] = []  # (start, end) in ps since the plane's clock origin
    for name, start, duration, _stats in host_events(xplane):
        m = _OP_EVENT.match(name)
        if not m or m.group("name") in _NOT_OPS:
            continue
        key = TRANSFERS if m.group("type") in TRANSFER_TYPES else m.group("name")
        entry = totals.setdefault(key, [0.0, 0])
        entry[0] += duration * 1e-12
        entry[1] += 1
        spans.append((start, start + duration))
    summed = sum(end - start for start, end in spans)
    return {name: OpTime(t, int(c)) for name, (t, c) in totals.items()}, (
        union_length(spans) / summed if summed > 0 else 1.0
    )


def host_events(
    xplane: str | Path, stats_for: frozenset[str] = frozenset()
) -> Iterator[tuple[str, int, int, dict[str, Any]]]:
    """(name, start, duration, stats) of every event on an XSpace trace's host planes (CPU threads),
    times in picoseconds (start from the plane's clock origin). Stats are decoded only for events
    named in `stats_for` (most events carry some, and decoding them all is slow): a stat's key is its
    name; a string stat is often interned (its `ref_value` names another stat_metadata entry), and is
    returned as that string. geryon.demo.stepdecomp reads steps, pulls and updates through this too."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(Path(xplane).read_bytes())
    except Exception as error:  # protobuf's DecodeError, or an unreadable file
        raise ProfileError(f"{xplane}: not a readable XSpace trace: {error}") from None
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()} if stats_for else {}
        for line in plane.lines:
            origin = line.timestamp_ns * 1000
            for event in line.events:
                meta = plane.event_metadata.get(event.metadata_id)
                if meta is None:
                    continue
                stats: dict[str, Any] = {}
                if meta.name in stats_for:
                    for st in event.stats:
                        key = stat_names.get(st.metadata_id, "")
                        stats[key] = (
                            stat_names.get(st.ref_value) if st.HasField("ref_value") else st.str_value
                        )
                yield meta.name, origin + event.offset_ps, event.duration_ps, stats


def union_length(spans: list[tuple[int, int]]) -> int:
    """Total length covered by the intervals (overlaps counted once)."""
    covered, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def layer_of(op_name: str, leaf_names: Mapping[str, int]) -> tuple[int, bool] | None:
    """(leaf index, is backward) of an op, or None when no Keras layer scope is in its name."""
    parts = op_name.split("/")[:-1]  # the last part is the op itself
    # Anywhere in the scopes, not only first: a loop body's ops carry "while/body/_1/" before it.
    backward = BACKWARD_SCOPE in parts
    for part in parts:
        name = part
        while True:
            if name in leaf_names:
                return leaf_names[name], backward
            stripped = _SUFFIX.sub("", name)
            if stripped == name:
                break
            name = stripped
    return None


def profile_from_ops(
    ops: Mapping[str, OpTime],
    model: Any,
    *,
    batch_size: int,
    source: str,
    meta: Mapping[str, Any] | None = None,
    overlap: float = 1.0,
) -> Profile:
    """A profile of Keras `model` whose layer times are the traced ops' per-step sums, times
    `overlap` (`read_trace`'s factor, in (0, 1]: what the ops' overlap across threads takes off)."""
    if isinstance(overlap, bool) or not isinstance(overlap, int | float) or not 0 < overlap <= 1:
        raise ProfileError(f"overlap: expected a factor in (0, 1], got {overlap!r}")
    from geryon.threshold.profiles import group_flops, model_structure

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ProfileError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
    structure = model_structure(model)
    # Leaf names as scopes: the last path element (nested models name leaves outer/inner).
    leaf_names = {leaf.name.rsplit("/", 1)[-1]: i for i, leaf in enumerate(structure.leaves)}
    group_of = {leaf: g for g, members in enumerate(structure.groups) for leaf in members}
    forward = [0.0] * len(structure.groups)
    backward = [0.0] * len(structure.groups)
    counts: list[int] = []
    unattributed: dict[str, OpTime] = {}
    attributed: list[tuple[int, bool, OpTime]] = []
    for name, t in ops.items():
        hit = layer_of(name, leaf_names)
        if hit is None or hit[0] not in group_of:
            unattributed[name] = t
            continue
        leaf, is_backward = hit
        attributed.append((group_of[leaf], is_backward, t))
        counts.append(t.count)
    if not counts:
        raise ProfileError(
            f"the trace has no op of model {structure.model!r}'s layers "
            f"(layers: {', '.join(list(leaf_names)[:5])}...): was the worker training this model?"
        )
    steps = max(1, int(statistics.median(counts)))

    def per_step(t: OpTime) -> float:
        # Mean per execution times executions per step (see the module docstring): robust to the
        # partial steps at the capture's edges, where total / steps is not. An op that ran on fewer
        # than half of the steps keeps its share (count / steps), as before.
        runs = t.count / steps
        return t.total_s / max(1, t.count) * (round(runs) if runs >= 0.5 else runs)

    for group, is_backward, t in attributed:
        (backward if is_backward else forward)[group] += per_step(t)
    rest = {name: per_step(t) for name, t in unattributed.items()}
    flops = group_flops(structure)
    layers = tuple(
        LayerSpec(name, f * overlap, b * overlap, fl * batch_size)
        for name, f, b, fl in zip(structure.group_names(), forward, backward, flops, strict=True)
    )
    top = sorted(rest.items(), key=lambda kv: -kv[1])[:8]
    return Profile(
        structure.model,
        batch_size,
        layers,
        structure.params,
        structure.urgency_function,
        source,
        {
            **dict(meta or {}),
            "input_shape": list(structure.input_shape),
            "steps": steps,
            "statistic": "per-step sum of each traced op's mean duration x its executions per step x overlap",
            "overlap": overlap,
            "unattributed_s_per_step": sum(rest.values()) * overlap,
            "unattributed_top": dict(top),
            "folded": structure.folded(),
        },
    )


def _shape(text: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W,C integers, got {text!r}") from None
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected three integers >= 1 (H,W,C), got {text!r}")
    return dims


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    from geryon.cluster.models import MODELS

    ap = argparse.ArgumentParser(
        prog="python -m geryon.threshold.incluster",
        description="Per-layer compute times from a TensorFlow profiler trace of a worker in the running "
        "cluster, written as a geryon.profile JSON.",
    )
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--service", help="a worker's profiler server, grpc://HOST:PORT: capture now")
    where.add_argument("--trace", help="an existing capture: a logdir or an .xplane.pb file")
    ap.add_argument("--duration-ms", type=_positive, default=3000, help="capture length (with --service)")
    ap.add_argument("--logdir", help="where the capture goes (default: a temporary directory)")
    ap.add_argument(
        "--model", required=True, choices=sorted(MODELS), help="the demo model the cluster trains"
    )
    ap.add_argument(
        "--batch-size", type=_positive, required=True, help="per-worker batch of the traced steps"
    )
    ap.add_argument("--input-shape", type=_shape, help="H,W,C (default: the model's demo default)")
    ap.add_argument("--num-classes", type=_positive, default=10)
    ap.add_argument("--out", required=True, help="profile JSON to write")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)  # exits 2 on bad flags
    if args.service is not None and not re.fullmatch(r"grpc://[^:/\s]+:\d+", args.service):
        print(f"error: --service {args.service!r}: expected grpc://HOST:PORT", file=sys.stderr)
        return 2
    from geryon.cluster.models import ModelError, build_model, check_model

    try:
        shape = check_model(args.model, args.input_shape)
    except ModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"error: --out {args.out!r}: directory {str(out.parent)!r} does not exist", file=sys.stderr)
        return 2
    try:
        if args.service is not None:
            logdir = args.logdir or tempfile.mkdtemp(prefix="geryon-incluster-")
            xplane = capture(args.service, logdir, args.duration_ms)
            source = f"incluster:{args.service}"
        else:
            xplane = find_xplane(args.trace)
            source = f"incluster:{xplane.name}"
        ops, overlap = read_trace(xplane)
        model = build_model(args.model, shape, args.num_classes)
        profile = profile_from_ops(
            ops,
            model,
            batch_size=args.batch_size,
            source=source,
            meta={"trace": str(xplane), "captured_by": socket.gethostname()},
            overlap=overlap,
        )
    except ProfileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if args.trace is not None else 1
    except Exception as error:  # the profiler client: no server, nothing traced
        print(f"error: capture from {args.service} failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    profile.save(out)
    print(
        f"{out}: {profile.model}, {len(profile.layers)} layers, {profile.meta['steps']} steps traced, "
        f"C = {profile.compute_s * 1e3:.2f} ms per step "
        f"(+ {profile.meta['unattributed_s_per_step'] * 1e3:.2f} ms outside layers)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
