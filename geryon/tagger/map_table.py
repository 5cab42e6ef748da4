"""Priority classes from thresholds, and the map_table (parameter -> class) handed to the native side.

Class 0 is the most urgent (highest network priority); class k-1 the least. With k-1 strictly
increasing thresholds t_1 < ... < t_{k-1} in [0, 1], a parameter of urgency u is in class
``#{i : t_i >= u}``: above every threshold -> class 0. With one threshold this is the paper's rule
("urgency more than the threshold -> high-priority flow").
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

MAX_CLASSES = 8
FORMAT = "geryon.map_table"
FORMAT_VERSION = 1


def validate_thresholds(thresholds: Iterable[float], field: str = "thresholds") -> tuple[float, ...]:
    """Checks k-1 thresholds for k classes; raises ValueError naming `field` and what is wrong."""
    values = tuple(thresholds)
    if not values:
        raise ValueError(f"{field}: give at least one threshold (k classes need k-1 thresholds)")
    if len(values) > MAX_CLASSES - 1:
        raise ValueError(
            f"{field}: {len(values)} thresholds make {len(values) + 1} classes; "
            f"at most {MAX_CLASSES} classes ({MAX_CLASSES - 1} thresholds) are allowed"
        )
    for i, t in enumerate(values):
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or not 0 <= t <= 1:
            raise ValueError(f"{field}[{i}]: {t!r} is not a number in [0, 1]")
    for i in range(1, len(values)):
        if not values[i - 1] < values[i]:
            raise ValueError(
                f"{field} must be strictly increasing: {field}[{i - 1}]={values[i - 1]} "
                f"is not below {field}[{i}]={values[i]}"
            )
    return tuple(float(t) for t in values)


def default_thresholds(num_classes: int, field: str = "classes") -> tuple[float, ...]:
    """Evenly spaced thresholds for k classes (0.5 for the default 2); the search replaces them."""
    if not 2 <= num_classes <= MAX_CLASSES:
        raise ValueError(f"{field}: {num_classes} classes are not allowed; use 2 to {MAX_CLASSES}")
    return tuple(i / num_classes for i in range(1, num_classes))


def class_of(urgency: float, thresholds: Sequence[float]) -> int:
    return len(thresholds) - bisect_left(thresholds, urgency)


@dataclass(frozen=True)
class MapEntry:
    id: int  # stable parameter id: the index in the tagger's parameter list, same for every version
    name: str
    urgency: float
    cls: int


@dataclass(frozen=True)
class MapTable:
    version: int
    thresholds: tuple[float, ...]
    urgency_function: str
    entries: tuple[MapEntry, ...]
    # Tensors that carry no parameter (step counters, control edges) take this class.
    default_class: int = 0

    @property
    def num_classes(self) -> int:
        return len(self.thresholds) + 1

    @classmethod
    def build(
        cls,
        names: Sequence[str],
        urgencies: Sequence[float],
        thresholds: Iterable[float],
        urgency_function: str,
        version: int = 1,
        default_class: int = 0,
    ) -> MapTable:
        ts = validate_thresholds(thresholds)
        if len(names) != len(urgencies):
            raise ValueError("names and urgencies must have the same length")
        entries = tuple(
            MapEntry(i, n, float(u), class_of(u, ts))
            for i, (n, u) in enumerate(zip(names, urgencies, strict=True))
        )
        table = cls(version, ts, urgency_function, entries, default_class)
        table._check()
        return table

    def with_thresholds(self, thresholds: Iterable[float]) -> MapTable:
        """The next version for new thresholds: ids, names and urgencies stay, only classes move."""
        ts = validate_thresholds(thresholds)
        # A default that was the least urgent class stays the least urgent when k changes.
        least = self.default_class == len(self.thresholds)
        default = len(ts) if least else min(self.default_class, len(ts))
        entries = tuple(MapEntry(e.id, e.name, e.urgency, class_of(e.urgency, ts)) for e in self.entries)
        return MapTable(self.version + 1, ts, self.urgency_function, entries, default)

    @cached_property
    def _by_name(self) -> dict[str, int]:
        return {e.name: e.cls for e in self.entries}

    def class_of(self, name: str) -> int:
        """The class of a parameter; tensors that carry none take the default class."""
        return self._by_name.get(name, self.default_class)

    def classes(self) -> dict[str, int]:
        return dict(self._by_name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "version": self.version,
            "num_classes": self.num_classes,
            "thresholds": list(self.thresholds),
            "urgency_function": self.urgency_function,
            "default_class": self.default_class,
            "entries": [
                {"id": e.id, "name": e.name, "urgency": e.urgency, "class": e.cls} for e in self.entries
            ],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MapTable:
        """Parses and validates a map_table; every error names the offending field."""
        if not isinstance(data, Mapping):
            raise ValueError("map_table: expected a JSON object")
        if data.get("format") != FORMAT:
            raise ValueError(f"map_table.format: expected {FORMAT!r}, got {data.get('format')!r}")
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"map_table.format_version: this Geryon reads version {FORMAT_VERSION}, "
                f"got {data.get('format_version')!r}"
            )
        version = _int_field(data, "version", minimum=1)
        thresholds = data.get("thresholds")
        if not isinstance(thresholds, list):
            raise ValueError("map_table.thresholds: expected a list of numbers in [0, 1]")
        ts = validate_thresholds(thresholds, "map_table.thresholds")
        if data.get("num_classes") != len(ts) + 1:
            raise ValueError(
                f"map_table.num_classes: {data.get('num_classes')!r} does not match "
                f"{len(ts)} thresholds (expected {len(ts) + 1})"
            )
        fn = data.get("urgency_function")
        if not isinstance(fn, str) or not fn:
            raise ValueError("map_table.urgency_function: expected a non-empty string")
        default = _int_field(data, "default_class", minimum=0)
        raw_entries = data.get("entries")
        if not isinstance(raw_entries, list):
            raise ValueError("map_table.entries: expected a list")
        entries = []
        for i, raw in enumerate(raw_entries):
            where = f"map_table.entries[{i}]"
            if not isinstance(raw, Mapping):
                raise ValueError(f"{where}: expected an object with id, name, urgency, class")
            name = raw.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}.name: expected a non-empty string")
            u = raw.get("urgency")
            if isinstance(u, bool) or not isinstance(u, int | float) or not 0 <= u <= 1:
                raise ValueError(f"{where}.urgency: {u!r} is not a number in [0, 1]")
            entries.append(
                MapEntry(_int_field(raw, "id", 0, where), name, float(u), _int_field(raw, "class", 0, where))
            )
        table = cls(version, ts, fn, tuple(entries), default)
        table._check()
        return table

    @classmethod
    def from_json(cls, text: str) -> MapTable:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"map_table: not valid JSON ({e})") from None
        return cls.from_dict(data)

    def _check(self) -> None:
        k = self.num_classes
        if not 0 <= self.default_class < k:
            raise ValueError(f"map_table.default_class: {self.default_class} is not a class in 0..{k - 1}")
        ids = set()
        names = set()
        for i, e in enumerate(self.entries):
            if e.id in ids:
                raise ValueError(f"map_table.entries[{i}].id: duplicate id {e.id}")
            if e.name in names:
                raise ValueError(f"map_table.entries[{i}].name: duplicate name {e.name!r}")
            ids.add(e.id)
            names.add(e.name)
            expected = class_of(e.urgency, self.thresholds)
            if e.cls != expected:
                raise ValueError(
                    f"map_table.entries[{i}].class: {e.cls} disagrees with urgency {e.urgency} and "
                    f"thresholds {list(self.thresholds)} (expected {expected})"
                )


def _int_field(data: Mapping[str, Any], key: str, minimum: int, where: str = "map_table") -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}.{key}: {value!r} is not an integer >= {minimum}")
    return value
