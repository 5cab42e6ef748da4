"""`geryon plan training`: the settings to train a model on a cluster with, found by the simulator.

Issue 40 item 4, in the spirit of dPRO's optimiser (paper 001: replay a trace to search what to
change): before a run, the replay simulator (`geryon.threshold.simulator`) searches Geryon's
settings for a model and cluster (the slice size of the partitioner, the number of priority classes,
the thresholds between them and the chunk size inside a class) and predicts each mode's step time at
the chosen settings, with the gain over the baselines and the reasons for each choice.

The search is a coordinate search over a small discrete grid, every point simulated (the simulator
is deterministic and a point costs milliseconds to seconds):

1. for every slice size and class count, every threshold tuple among the cuts between the model's
   urgencies (`geryon.threshold.joint.profile_space`, thinned evenly in bytes), at the data plane's
   default chunk size, in Geryon's mode (`hybrid`);
2. a slice size or class count is only taken over a cheaper one if it gains more than `tolerance`
   (0.5% by default): more classes use more of the fabric's few queues, smaller slices more messages
   and PS work per step, which the simulator leaves out unless PS costs are given;
3. at the chosen point, every chunk size (`joint.CHUNK_CANDIDATES`); the default stays unless
   another gains more than `tolerance`.

Then every mode at those settings: TensorFlow's own placement (vanilla: whole variables, fifo),
partition + slicing (P+S: fifo, TF's window), an end-host scheduler (end-host), the paper's Geryon
(network, FIFO inside a class), Geryon (hybrid), the `ideal` order and the lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from geryon.threshold.joint import CHUNK_CANDIDATES, profile_space
from geryon.threshold.profile import Profile
from geryon.threshold.simknobs import CHUNK_BYTES

MiB = 1 << 20
# Slice sizes tried: the paper's 4 MiB (1024K float32 elements) and smaller; None slices nothing.
SLICE_CANDIDATES: tuple[int | None, ...] = (None, 4 * MiB, 1 * MiB, 256 << 10)
CLASS_COUNTS = (2, 3, 4)
TOLERANCE = 0.005  # a costlier setting must gain more than this to be chosen
# Threshold tuples tried per class count (Space.candidates thins the cuts between the model's
# urgencies evenly in bytes to at most this many tuples): 16 cuts for 2 classes, 8 for 3, 7 for 4.
TUPLES = {2: 16, 3: 28, 4: 35}
MORE_TUPLES = 35  # 5 classes and up
# The modes predicted at the chosen settings, by the names a user knows them by.
MODES = (
    ("vanilla", "fifo", "TensorFlow's placement: whole variables round-robin, fifo, TF's window"),
    ("P+S", "fifo", "partition + slicing, one flow per pair, fifo, TF's window"),
    ("end-host", "end-host", "end-host scheduling (TicTac/P3/ByteScheduler): urgency order at the sender"),
    ("paper", "network", "the paper's Geryon: classes in NICs and switch, FIFO inside a class"),
    ("geryon", "hybrid", "Geryon: classes, urgency order and chunked preemption inside a class"),
    ("ideal", "ideal", "a perfect global priority order (not a bound)"),
)

Simulate = Callable[..., Any]
Say = Callable[[str], None]


@dataclass(frozen=True)
class Point:
    slice_bytes: int | None
    classes: int
    thresholds: tuple[float, ...]
    chunk_bytes: int
    iteration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "slice_bytes": self.slice_bytes,
            "classes": self.classes,
            "thresholds": list(self.thresholds),
            "chunk_bytes": self.chunk_bytes,
            "iteration_s": self.iteration_s,
        }


@dataclass
class TrainingPlan:
    recommended: Point
    modes: dict[str, float]  # predicted iteration seconds per mode name (MODES), plus "bound"
    bound_by: str
    reasons: list[str]
    # The best point per (slice, classes) at the default chunk, in search order.
    explored: list[Point] = field(default_factory=list)
    chunks: dict[int, float] = field(default_factory=dict)  # chunk size -> iteration at the choice
    simulations: int = 0

    def gain(self, over: str) -> float:
        return self.modes[over] / self.modes["geryon"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended.to_dict(),
            "modes": dict(self.modes),
            "bound_by": self.bound_by,
            "gain": {m: self.gain(m) for m in ("vanilla", "P+S", "end-host", "paper")},
            "reasons": list(self.reasons),
            "explored": [p.to_dict() for p in self.explored],
            "chunks": {str(k): v for k, v in self.chunks.items()},
            "simulations": self.simulations,
        }


def _size(n: int | None) -> str:
    if n is None:
        return "no slicing"
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n >> 10} KiB"


def _slower(t: float, reference: float) -> str:
    """`t` against `reference` in words: "1.20% slower", "0.30% faster" or "the same"."""
    r = t / reference - 1
    if abs(r) < 5e-5:
        return "the same"
    return f"{abs(r):.2%} {'slower' if r > 0 else 'faster'}"


def _check(name: str, values: Sequence[Any], ok: Callable[[Any], bool], what: str) -> tuple[Any, ...]:
    out = tuple(values)
    if not out or not all(ok(v) for v in out):
        raise ValueError(f"{name}: expected one or more {what}, got {list(out)!r}")
    return out


def plan_training(
    profile: Profile,
    *,
    workers: int,
    num_ps: int,
    bandwidth_bps: float,
    knobs: dict[str, Any] | None = None,
    slices: Sequence[int | None] = SLICE_CANDIDATES,
    class_counts: Sequence[int] = CLASS_COUNTS,
    chunks: Sequence[int] = CHUNK_CANDIDATES,
    tolerance: float = TOLERANCE,
    simulate: Simulate | None = None,
    say: Say | None = None,
) -> TrainingPlan:
    """Searches the settings (module docstring) and predicts every mode at them.

    `knobs` go to every simulation (colocate, inflight, endhost_gap_s, ps_costs, background, seed,
    iterations ...); `slices`, `class_counts` and `chunks` are the grid. ValueError names a bad one."""
    if simulate is None:
        from geryon.threshold.simulator import simulate as simulate
    assert simulate is not None
    slices = _check(
        "slices", slices, lambda s: s is None or (isinstance(s, int) and s > 0), "sizes > 0 or None"
    )
    class_counts = _check(
        "class_counts",
        class_counts,
        lambda k: isinstance(k, int) and not isinstance(k, bool) and k >= 2,
        "ints >= 2",
    )
    chunks = _check("chunks", chunks, lambda c: isinstance(c, int) and c > 0, "sizes > 0")
    if not (0 <= tolerance < 1):
        raise ValueError(f"tolerance: expected a fraction in [0, 1), got {tolerance!r}")
    base = dict(knobs or {})
    for reserved in ("mode", "thresholds", "slice_bytes", "chunk_bytes", "partition"):
        base.pop(reserved, None)
    note = say or (lambda _m: None)
    count = 0
    cache: dict[tuple[Any, ...], Any] = {}

    def run(
        mode: str, slice_bytes: int | None, ts: tuple[float, ...], chunk: int, partition: bool = True
    ) -> Any:
        nonlocal count
        key = (mode, slice_bytes, ts, chunk, partition)
        if key not in cache:
            count += 1
            cache[key] = simulate(
                profile,
                workers=workers,
                num_ps=num_ps,
                bandwidth_bps=bandwidth_bps,
                mode=mode,
                thresholds=ts,
                slice_bytes=slice_bytes if partition else None,
                partition=partition,
                chunk_bytes=chunk,
                **base,
            )
        return cache[key]

    space = profile_space(profile)
    default_chunk = CHUNK_BYTES if CHUNK_BYTES in chunks else chunks[0]
    explored: list[Point] = []
    for s in slices:
        for k in sorted(set(class_counts)):
            try:
                tuples = space.candidates(k - 1, TUPLES.get(k, MORE_TUPLES))
            except ValueError as e:  # fewer distinct urgencies than classes
                note(f"slices {_size(s)}, {k} classes: skipped ({e})")
                continue
            best: Point | None = None
            for ts in tuples:
                t = run("hybrid", s, tuple(ts), default_chunk).iteration_s
                if best is None or t < best.iteration_s:
                    best = Point(s, k, tuple(ts), default_chunk, t)
            assert best is not None
            explored.append(best)
            note(
                f"slices {_size(s)}, {k} classes: {best.iteration_s * 1e3:.1f} ms "
                f"at thresholds {best.thresholds}"
            )
    if not explored:
        raise ValueError("profile: no parameter to classify (the model has no trainable variables)")
    reasons: list[str] = []
    # Slices: per slice size its best class count's point; the largest slice within tolerance wins.
    by_slice = {
        s: min((p for p in explored if p.slice_bytes == s), key=lambda p: p.iteration_s) for s in slices
    }
    fastest = min(by_slice.values(), key=lambda p: p.iteration_s)
    order = sorted(slices, key=lambda s: float("inf") if s is None else s, reverse=True)  # cheapest first
    chosen_slice = next(s for s in order if by_slice[s].iteration_s <= fastest.iteration_s * (1 + tolerance))
    runner_up = min(
        (p for s, p in by_slice.items() if s != chosen_slice), key=lambda p: p.iteration_s, default=None
    )
    mine = by_slice[chosen_slice].iteration_s
    if chosen_slice == fastest.slice_bytes:
        text = f"slices: {_size(chosen_slice)}, the fastest"
        if runner_up is not None:
            text += f" (next: {_size(runner_up.slice_bytes)}, {_slower(runner_up.iteration_s, mine)})"
    else:
        text = (
            f"slices: {_size(chosen_slice)}: {_size(fastest.slice_bytes)} is only "
            f"{1 - fastest.iteration_s / mine:.2%} faster, within {tolerance:.1%}, and larger slices "
            "mean fewer messages and less PS work"
        )
    reasons.append(text)
    # Classes at that slice size: the fewest within tolerance of the best.
    at_slice = sorted((p for p in explored if p.slice_bytes == chosen_slice), key=lambda p: p.classes)
    best_k = min(at_slice, key=lambda p: p.iteration_s)
    point = next(p for p in at_slice if p.iteration_s <= best_k.iteration_s * (1 + tolerance))
    if len(at_slice) > 1:
        more = [p for p in at_slice if p.classes > point.classes]
        others = ", ".join(f"{p.classes}: {_slower(p.iteration_s, point.iteration_s)}" for p in more)
        reasons.append(
            f"classes: {point.classes}"
            + (f" (with more, {others}; each class is a queue on every port)" if more else " (the best)")
        )
    # The chunk size at the chosen point.
    chunk_times = {
        c: run("hybrid", point.slice_bytes, point.thresholds, c).iteration_s for c in sorted(chunks)
    }
    best_chunk = min(chunk_times, key=lambda c: chunk_times[c])
    chunk = default_chunk
    if chunk_times[best_chunk] < chunk_times[default_chunk] * (1 - tolerance):
        chunk = best_chunk
        reasons.append(
            f"chunk: {_size(chunk)} ({1 - chunk_times[chunk] / chunk_times[default_chunk]:.2%} "
            f"faster than the default {_size(default_chunk)})"
        )
    else:
        reasons.append(
            f"chunk: the default {_size(default_chunk)}"
            + (
                ", the fastest"
                if best_chunk == default_chunk
                else f" ({_size(best_chunk)} is only "
                f"{_slower(chunk_times[best_chunk], chunk_times[default_chunk])}, within {tolerance:.1%})"
            )
        )
    recommended = Point(point.slice_bytes, point.classes, point.thresholds, chunk, chunk_times[chunk])
    reasons.append(
        f"thresholds: {', '.join(f'{t:.3g}' for t in recommended.thresholds)} (the best of "
        f"{len(space.candidates(point.classes - 1, TUPLES.get(point.classes, MORE_TUPLES)))} threshold "
        "choices between the model's urgencies)"
    )
    modes: dict[str, float] = {}
    bound_by = ""
    for name, mode, _ in MODES:
        r = run(mode, recommended.slice_bytes, recommended.thresholds, chunk, partition=name != "vanilla")
        modes[name] = float(r.iteration_s)
        if name == "geryon" and r.bound is not None:
            modes["bound"] = float(r.bound.seconds)
            bound_by = r.bound.by
    if bound_by == "compute" and modes["P+S"] <= modes["bound"] * (1 + tolerance):
        reasons.append(
            "compute-bound: partition + slicing alone is within "
            f"{tolerance:.1%} of compute alone, so no network setting can gain (the choices above are ties)"
        )
    return TrainingPlan(recommended, modes, bound_by, reasons, explored, chunk_times, count)


def to_text(plan: TrainingPlan, imgs_per_step: int) -> str:
    r = plan.recommended
    lines = [
        "Recommended settings:",
        f"  slice size   {_size(r.slice_bytes)}  (GeryonPartitioner slice_bytes)",
        f"  classes      {r.classes}",
        f"  thresholds   {', '.join(f'{t:.3g}' for t in r.thresholds)}",
        f"  chunk size   {_size(r.chunk_bytes)}  (the data plane's chunk inside a class)",
        "",
        f"{'mode':<9} {'step':>10} {'images/s':>10} {'geryon is':>10}  what",
    ]
    for name, _, what in MODES:
        t = plan.modes[name]
        faster = "" if name == "geryon" else f"{t / plan.modes['geryon']:.3f}x"
        lines.append(f"{name:<9} {t * 1e3:>8.1f}ms {imgs_per_step / t:>10.1f} {faster:>10}  {what}")
    if "bound" in plan.modes:
        b = plan.modes["bound"]
        lines.append(
            f"{'bound':<9} {b * 1e3:>8.1f}ms {imgs_per_step / b:>10.1f} {'':>10}  "
            f"no schedule is faster ({plan.bound_by})"
        )
    lines += ["", "Why:"] + [f"  - {r}" for r in plan.reasons]
    lines.append(
        f"  ({plan.simulations} simulations; predictions from the replay simulator, geryon simulate's model: "
        "validate on the testbed or the cluster before relying on the gain)"
    )
    return "\n".join(lines) + "\n"
