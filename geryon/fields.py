"""Field checks shared by the YAML loaders (agent config, QoS intent): each names the field and what
is allowed, and raises the caller's error class, so every loader reports bad input the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def load_yaml(path: str | Path, error: type[ValueError], what: str) -> Any:
    """A YAML file's data; every failure (missing, unreadable, malformed) raises `error` naming the
    file and, for bad YAML, the line and column. `what` names the file's role ("config", "intent")."""
    import yaml  # PyYAML comes with the agent extra; only loaders need it

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{p}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{p}: cannot read the {what} file: {e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{p}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise error(f"{p}: malformed YAML: nested too deeply") from None


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
