"""What every benchmark script shares: a plain-text table on stdout and a JSON file under out/bench/."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]) -> None:
    """Prints `rows` as a table; `columns` are (key, header, format spec) like ("t", "time s", ".3f")."""
    cells = [
        [format(row[key], spec) if row.get(key) is not None else "-" for key, _, spec in columns]
        for row in rows
    ]
    widths = [max(len(header), *(len(c[i]) for c in cells)) for i, (_, header, _) in enumerate(columns)]
    print("  ".join(header.rjust(w) for (_, header, _), w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def write_json(path: str | Path, payload: Any) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"JSON: {out}")
    return out


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn`, in seconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
