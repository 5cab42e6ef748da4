"""Reading a saved demo result (demo.json, bench-N.json): one format check for every reader (the chart
redrawer, the benches that analyse saved demos), so each names the same fields in its errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = "geryon.demo"


class DemoResultError(ValueError):
    """A file that is not a readable geryon demo result; the message names the file and the field."""


def check_result(data: Any, where: str = "") -> dict[str, Any]:
    """`data` itself if it is a demo result (an object, format 'geryon.demo', a list of runs). `where`
    names it inside a larger document (e.g. '[2]' for bench.json's third result) in the errors."""
    if not isinstance(data, Mapping):
        raise DemoResultError(
            f"{where or 'the JSON'}: expected a geryon demo result (an object), got {type(data).__name__}"
        )
    field = f"{where}." if where else ""
    if data.get("format") != FORMAT:
        raise DemoResultError(
            f"{field}format: expected {FORMAT!r} (a geryon demo or bench result), got {data.get('format')!r}"
        )
    if not isinstance(data.get("runs"), list):
        raise DemoResultError(f"{field}runs: expected a list of runs, got {type(data.get('runs')).__name__}")
    return dict(data)


def load_result(path: str | Path) -> dict[str, Any]:
    """The checked demo result in the JSON file `path`; errors start with the path."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DemoResultError(f"{p}: cannot read a demo result: {e}") from None
    try:
        return check_result(data)
    except DemoResultError as e:
        raise DemoResultError(f"{p}: {e}") from None
