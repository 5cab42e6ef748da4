"""Field checks shared by the file loaders (agent config, QoS intent, profiles, calibration): each names
the field or file and what is allowed, and raises the caller's error class, so every loader reports bad
input the same way."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Limits on a YAML file: real configs are a few KiB and a few levels deep. Without them an 8 MB file
# took 39 s and 1.1 GB to reject, and aliases can expand a small file without bound ("billion laughs").
MAX_YAML_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 32
# YAML 1.1 reads 046 as octal 38, 1:20 as sexagesimal 80, 0x1f and 0b101 as hex and binary: in a
# config those are typos or surprises, so only plain decimal integers are integers.
_DECIMAL_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")


class YamlRefused(ValueError):
    """A YAML construct the strict loader refuses; the message says where and why."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"


@functools.cache
def _strict_loader() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc,valid-type]
        """SafeLoader without duplicate keys, merge keys and YAML 1.1 number surprises."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlRefused(f"{_where(key_node.start_mark)}: merge keys (<<) are not allowed")
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise YamlRefused(f"{_where(key_node.start_mark)}: a key must be a plain value") from None
                if key in seen:
                    raise YamlRefused(
                        f"{_where(key_node.start_mark)}: duplicate key {key!r} (first at "
                        f"{_where(seen[key])}); YAML would silently keep only the last one"
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> int:
            text = str(node.value)
            if not _DECIMAL_INT.match(text):
                raise YamlRefused(
                    f"{_where(node.start_mark)}: {text!r} is read by YAML 1.1 as a non-decimal number "
                    "(octal 0NN, hex 0x, binary 0b, sexagesimal a:b or with _); write it in plain decimal, "
                    "or quote it if it is text"
                )
            return int(text)

        def construct_yaml_float(self, node: Any) -> float:
            if ":" in str(node.value) or "_" in str(node.value):
                raise YamlRefused(
                    f"{_where(node.start_mark)}: {node.value!r} is a YAML 1.1 sexagesimal or _-separated "
                    "number; write it in plain decimal, or quote it if it is text"
                )
            return float(super().construct_yaml_float(node))

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
    return StrictLoader


def _check_events(text: str, loader: type) -> None:
    """Refuses aliases/anchors and nesting deeper than MAX_YAML_DEPTH from the event stream, before any
    node is built (so neither can cost memory)."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise YamlRefused(
                f"{_where(event.start_mark)}: anchors and aliases (&name, *name) are not allowed; "
                "write the value out"
            )
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise YamlRefused(f"{_where(event.start_mark)}: nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1


def load_yaml(path: str | Path, error: type[ValueError], what: str) -> Any:
    """A YAML file's data; every failure (missing, unreadable, too large, malformed, refused) raises
    `error` naming the file and, for YAML problems, the line and column. `what` names the file's role
    ("config", "intent"). Strict: no duplicate keys, no aliases or merge keys, plain decimal integers
    only, at most MAX_YAML_BYTES and MAX_YAML_DEPTH levels."""
    import yaml  # PyYAML comes with the agent extra; only loaders need it

    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{p}: no such {what} file") from None
    except OSError as e:
        raise error(f"{p}: cannot read the {what} file: {e}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise error(f"{p}: the {what} file is over {MAX_YAML_BYTES // 1024} KiB; refusing to parse it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{p}: cannot read the {what} file: not UTF-8 ({e.reason} at byte {e.start})") from None
    loader = _strict_loader()
    try:
        _check_events(text, loader)
        return yaml.load(text, Loader=loader)
    except YamlRefused as e:
        raise error(f"{p}: refused YAML ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" ({_where(mark)})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{p}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise error(f"{p}: malformed YAML: nested too deeply") from None


def read_json(path: str | os.PathLike[str], error: type[ValueError], what: str) -> Any:
    """A JSON file's data; an unreadable file or malformed JSON raises `error` naming the file (`what`
    names its role: "profile", "calibration")."""
    import json

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise error(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON: {e}") from None


def kind(value: Any) -> str:
    """What a value is, for error messages: `got a string ('x')`."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


class Fields:
    """The checks, raising `error` (a ValueError subclass the loader's callers catch)."""

    def __init__(self, error: type[ValueError]) -> None:
        self.error = error

    def mapping(self, value: Any, name: str, allowed: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"{name}: expected a mapping, got {kind(value)}")
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                prefix = "" if name == "(top level)" else f"{name}."
                raise self.error(f"{prefix}{key!r}: unknown key; allowed: {', '.join(allowed)}")
        return value

    def integer(self, value: Any, name: str, lo: int, hi: int) -> int:
        # bool is an int subclass; `dscp: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"{name}: expected an integer {lo}-{hi}, got {kind(value)}")
        if not lo <= value <= hi:
            raise self.error(f"{name}: {value} is out of range; allowed {lo}-{hi}")
        return value

    def boolean(self, value: Any, name: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(f"{name}: expected true or false, got {kind(value)}")
        return value

    def choice(self, value: Any, name: str, allowed: Sequence[str]) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise self.error(f"{name}: expected one of {', '.join(allowed)}, got {kind(value)}")
        return value

    def items(self, value: Any, name: str) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise self.error(f"{name}: expected a list, got {kind(value)}")
        return list(value)
