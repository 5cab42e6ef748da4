"""Settings variants of one paired mode, rotated round by round in one cluster (pure, no TF).

The paired cluster (geryon.demo.chief.train_paired) alternates its modes round by round so that
their step times are paired. A *variant* is one mode at settings of its own that can change between
rounds without restarting the cluster: thresholds (the map_table) and the data plane's chunk size.
bench/bench_plan_testbed.py rotates a sweep of them to check `geryon plan training` on the testbed
(issue 40 item 4). The slice size and the class count the cluster was started with cannot change
between rounds: a variant with fewer classes leaves the last ones empty (thresholds at 1).

spec["variants"] (JSON): [{"name": str, "mode": "geryon", "thresholds": [...] | null,
"chunk_bytes": int | null}, ...]; null keeps what the cluster runs (the chosen thresholds, the
spec's chunk size).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from geryon.demo import modes as modes_mod
from geryon.errors import UsageError
from geryon.threshold.simknobs import CHUNK_MAX, CHUNK_MIN

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-+")
UNUSED_CLASS_STEP = 1e-9  # spacing of the thresholds just under 1 that leave a class empty


@dataclass(frozen=True)
class Variant:
    name: str
    mode: modes_mod.Mode
    thresholds: tuple[float, ...] | None = None
    chunk_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode.name,
            "thresholds": list(self.thresholds) if self.thresholds is not None else None,
            "chunk_bytes": self.chunk_bytes,
        }


def padded(thresholds: Sequence[float], classes: int) -> tuple[float, ...]:
    """`thresholds` (k-1 of them) for a cluster of `classes` >= k classes: the classes past k stay
    empty. Thresholds must rise strictly (MapTable), so the extra ones sit just under 1, above any
    tagger urgency (modes.one_class_thresholds uses the same trick)."""
    ts = tuple(float(t) for t in thresholds)
    extra = classes - 1 - len(ts)
    if extra < 0:
        raise ValueError(f"thresholds: {len(ts)} need at least {len(ts) + 1} classes, got {classes}")
    return ts + tuple(1.0 - (extra - 1 - i) * UNUSED_CLASS_STEP for i in range(extra))


def parse(items: Iterable[Mapping[str, Any]], classes: int) -> list[Variant]:
    """Variants from JSON objects; UsageError names the item and field. Names must be unique (each
    gets its own record), modes paired, thresholds k-1 <= classes-1 values in [0, 1] rising strictly."""
    out: list[Variant] = []
    for i, item in enumerate(items):
        where = f"variants[{i}]"
        if not isinstance(item, Mapping):
            raise UsageError(f"{where}: expected an object, got {type(item).__name__}")
        unknown = set(item) - {"name", "mode", "thresholds", "chunk_bytes"}
        if unknown:
            raise UsageError(
                f"{where}: unknown fields {sorted(unknown)}; allowed: name, mode, thresholds, chunk_bytes"
            )
        name = item.get("name")
        if not isinstance(name, str) or not name or not set(name) <= NAME_CHARS or len(name) > 64:
            raise UsageError(f"{where}.name: expected 1-64 of [a-z0-9._-+], got {name!r}")
        if any(v.name == name for v in out) or name in modes_mod.MODES:
            raise UsageError(f"{where}.name: {name!r} is taken (names are unique and no mode's name)")
        mode = modes_mod.mode(str(item.get("mode", "geryon")))
        if not mode.paired:
            raise UsageError(f"{where}.mode: {mode.name!r} does not run in the paired cluster")
        ts = item.get("thresholds")
        thresholds = None
        if ts is not None:
            if not isinstance(ts, list | tuple) or not ts or len(ts) > classes - 1:
                raise UsageError(f"{where}.thresholds: expected 1..{classes - 1} numbers, got {ts!r}")
            if not all(_number(t) for t in ts):
                raise UsageError(f"{where}.thresholds: expected numbers, got {ts!r}")
            if any(not 0 <= t <= 1 for t in ts) or any(a >= b for a, b in pairwise(ts)):
                raise UsageError(f"{where}.thresholds: expected values in [0, 1] rising strictly, got {ts!r}")
            thresholds = padded(ts, classes)
        chunk = item.get("chunk_bytes")
        if chunk is not None and (
            isinstance(chunk, bool) or not isinstance(chunk, int) or not CHUNK_MIN <= chunk <= CHUNK_MAX
        ):
            raise UsageError(f"{where}.chunk_bytes: expected bytes {CHUNK_MIN}..{CHUNK_MAX}, got {chunk!r}")
        out.append(Variant(name, mode, thresholds, chunk))
    if not out:
        raise UsageError("variants: expected at least one")
    return out


def _number(t: Any) -> bool:
    return isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)


def from_modes(names: Sequence[str]) -> list[Variant]:
    """The plain rotation: each mode once, at the cluster's own settings, named by the mode."""
    return [Variant(n, modes_mod.mode(n)) for n in names]
