"""Timelines as Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev).

A timeline is a list of `Span`s: something that occupied a track of a host from `start_s` to `end_s`
(a layer's forward pass on a worker's GPU, a shard's transfer on a sender's flow). `chrome_trace`
turns them into the Trace Event Format: one process (pid) per host, one thread (tid) per track, "X"
(complete) events with times in microseconds, and "M" metadata events that name processes and
threads so the viewer shows "worker0 / gpu" rather than numbers.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Span:
    host: str  # becomes the process: "worker0", "ps3"
    track: str  # becomes the thread: "gpu", "to worker0 class 1"
    name: str  # what ran or moved: "forward block1_conv1", "vgg19/fc1/kernel/part_3"
    category: str  # "forward", "backward", "pull", "push"
    start_s: float
    end_s: float
    args: Mapping[str, Any] = field(default_factory=dict)


def chrome_trace(spans: Iterable[Span], metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Trace Event Format object for `spans` (load it in chrome://tracing or Perfetto).

    Hosts are numbered in order of first appearance (pid from 1), tracks per host likewise (tid from
    1); events are sorted by start time so viewers and diffs see a stable file. Raises ValueError for
    a span that ends before it starts or has a non-finite time.
    """
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    for i, span in enumerate(spans):
        if not (math.isfinite(span.start_s) and math.isfinite(span.end_s)) or span.end_s < span.start_s:
            raise ValueError(
                f"spans[{i}] ({span.name!r}): expected finite times with end >= start, "
                f"got {span.start_s!r}..{span.end_s!r}"
            )
        pid = pids.setdefault(span.host, len(pids) + 1)
        tid = tids.setdefault((span.host, span.track), sum(1 for h, _ in tids if h == span.host) + 1)
        events.append(
            {
                "name": span.name,
                "cat": span.category,
                "ph": "X",
                "ts": span.start_s * 1e6,
                "dur": (span.end_s - span.start_s) * 1e6,
                "pid": pid,
                "tid": tid,
                "args": dict(span.args),
            }
        )
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"]))
    names: list[dict[str, Any]] = []
    for host, pid in pids.items():
        names.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": host}})
        names.append(
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
        )
    for (host, track), tid in tids.items():
        names.append(
            {"name": "thread_name", "ph": "M", "pid": pids[host], "tid": tid, "args": {"name": track}}
        )
    trace: dict[str, Any] = {"traceEvents": names + events, "displayTimeUnit": "ms"}
    if metadata:
        trace["otherData"] = dict(metadata)
    return trace


def write_chrome_trace(path: str | os.PathLike[str], trace: Mapping[str, Any]) -> None:
    """Writes `trace` as JSON atomically (temp file + rename): a viewer never opens half a file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(trace, f, separators=(",", ":"))
            f.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def spans_from_chrome_trace(trace: Mapping[str, Any]) -> list[Span]:
    """The spans back from a trace `chrome_trace` made (names resolved through the metadata events)."""
    if not isinstance(trace, Mapping) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace: expected an object with a 'traceEvents' list")
    hosts: dict[int, str] = {}
    tracks: dict[tuple[int, int], str] = {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            hosts[event["pid"]] = event["args"]["name"]
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            tracks[(event["pid"], event["tid"])] = event["args"]["name"]
    spans = []
    for i, event in enumerate(trace["traceEvents"]):
        if event.get("ph") != "X":
            continue
        try:
            host = hosts[event["pid"]]
            track = tracks[(event["pid"], event["tid"])]
        except KeyError:
            raise ValueError(f"traceEvents[{i}]: pid/tid without a process_name/thread_name event") from None
        start = event["ts"] / 1e6
        spans.append(
            Span(
                host,
                track,
                event["name"],
                event["cat"],
                start,
                start + event["dur"] / 1e6,
                event.get("args", {}),
            )
        )
    return spans
