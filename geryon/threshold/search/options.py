"""Option checks for the searchers: a bad value is a ValueError naming the option and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Check = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Option:
    default: Any
    check: Check
    help: str


def resolve(strategy: str, spec: Mapping[str, Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Checks `given` against `spec`; returns every option with defaults filled in."""
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: unknown option(s) for the {strategy!r} strategy; "
            f"allowed: {', '.join(sorted(spec))}"
        )
    out = {}
    for name, opt in spec.items():
        value = given.get(name, opt.default)
        out[name] = opt.check(name, value)
    return out


def integer(low: int, high: int | None = None) -> Check:
    def check(name: str, value: Any) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
            raise ValueError(f"{name}: expected {allowed}, got {value!r}")
        return value

    return check


def number(low: float, high: float, *, open_low: bool = False) -> Check:
    def check(name: str, value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            ok = (value > low if open_low else value >= low) and value <= high
        if not ok:
            bracket = "(" if open_low else "["
            raise ValueError(f"{name}: expected a number in {bracket}{low}, {high}], got {value!r}")
        return float(value)

    return check


def optional(inner: Check) -> Check:
    """None is allowed too (it switches the feature off)."""

    def check(name: str, value: Any) -> Any:
        return None if value is None else inner(name, value)

    return check


def choice(*allowed: str) -> Check:
    def check(name: str, value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
        return str(value)

    return check


def slice_sizes(name: str, value: Any) -> tuple[int, ...]:
    """A list of candidate slice sizes in bytes (distinct integers >= 1), searched jointly."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a list of slice sizes in bytes, got {value!r}")
    sizes = tuple(value)
    if not sizes:
        raise ValueError(f"{name}: give at least one slice size, or leave the option out")
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"{name}[{i}]: expected a size in bytes (integer >= 1), got {s!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{name}: sizes must be distinct, got {list(sizes)}")
    return tuple(sorted(sizes))


def chunk_sizes(name: str, value: Any) -> tuple[int, ...]:
    """A list of candidate chunk sizes in bytes (hybrid's preemption unit), searched jointly."""
    from geryon.threshold.simknobs import CHUNK_MAX, CHUNK_MIN

    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}: expected a list of chunk sizes in bytes, got {value!r}")
    sizes = tuple(value)
    if not sizes:
        raise ValueError(f"{name}: give at least one chunk size, or leave the option out")
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, int) or not CHUNK_MIN <= s <= CHUNK_MAX:
            raise ValueError(
                f"{name}[{i}]: expected a chunk size in bytes, an integer in [{CHUNK_MIN}, {CHUNK_MAX}], "
                f"got {s!r}"
            )
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{name}: sizes must be distinct, got {list(sizes)}")
    return tuple(sorted(sizes))
