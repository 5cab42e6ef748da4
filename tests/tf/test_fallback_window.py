"""The fallback window (native/rendezvous/fallback.h, issue 36), fed synthetic unresolved responses
through the extension's geryon_fallback_window_run: when a window closes, the share it computes, which
condition it names, and the floor that keeps tiny pre-training transfers quiet. The real processes are
in test_fallback_warning.py."""

from __future__ import annotations

import ctypes
import json
from typing import Any

import pytest

pytest.importorskip("tensorflow")

MS = 1_000_000


def run(events: list[tuple[float, int, bool, int, str]]) -> list[dict[str, Any]]:
    """(time in ms, bytes, no map_table, process bytes sent so far, edge) per unresolved response ->
    the verdict of each window that closed."""
    from geryon.tf import load

    cdll = load().cdll
    fn = cdll.geryon_fallback_window_run
    fn.restype = ctypes.c_long
    n = len(events)
    now = (ctypes.c_int64 * n)(*[int(e[0] * MS) for e in events])
    sizes = (ctypes.c_uint64 * n)(*[e[1] for e in events])
    no_table = (ctypes.c_int * n)(*[int(e[2]) for e in events])
    totals = (ctypes.c_uint64 * n)(*[e[3] for e in events])
    edges = (ctypes.c_char_p * n)(*[e[4].encode() for e in events])
    args = (now, sizes, no_table, totals, edges, ctypes.c_int(n))
    size = fn(*args, None, ctypes.c_long(0))
    buf = ctypes.create_string_buffer(size + 1)
    fn(*args, buf, ctypes.c_long(size + 1))
    out: list[dict[str, Any]] = json.loads(buf.value.decode())
    return out


def steps(unresolved: list[tuple[float, int, str]], resolved: int, no_table: bool) -> list[Any]:
    """Events whose process total grows by `resolved` bytes before each unresolved response (time in ms,
    bytes, edge)."""
    out, total = [], 0
    for at, size, edge in unresolved:
        total += resolved + size
        out.append((at, size, no_table, total, edge))
    return out


def test_no_map_table_closes_after_the_minimum_window_and_names_the_top_edges() -> None:
    # Every tensor unresolved, no table: 1 kB responses every 5 ms, one of 9 kB.
    sizes = [9000 if i == 3 else 1000 for i in range(20)]
    verdicts = run(
        steps([(5.0 * i, sizes[i], "edge_big" if i == 3 else f"edge_{i % 4}_w") for i in range(20)], 0, True)
    )
    first = verdicts[0]
    assert first["at"] == 10  # the first response at least 50 ms after the window opened
    assert first["no_table"] and not first["untraced"]
    assert first["unresolved_bytes"] == first["total_bytes"] == first["no_table_bytes"] == 19000
    assert first["top"][0] == ["edge_big", 9000] and len(first["top"]) == 3
    assert 0.05 <= first["seconds"] < 0.051


def test_a_small_unresolved_share_is_quiet_and_a_large_one_warns() -> None:
    # 10 kB of resolved tensors per unresolved response: 50 bytes (0.5%) stays quiet, 200 (2%) warns.
    for per_step, warns in ((50, False), (200, True)):
        verdicts = run(steps([(5.0 * i, per_step, "edge_3_ctrl") for i in range(100)], 10_000, False))
        assert verdicts, per_step
        assert all(v["untraced"] is warns and not v["no_table"] for v in verdicts), verdicts
        assert all(v["unresolved_bytes"] >= 2048 and v["messages"] >= 4 for v in verdicts)


def test_tiny_transfers_alone_do_not_close_a_window() -> None:
    # Three 40-byte responses (an install's op, a control edge) over 20 s: under the floor, never judged.
    assert run(steps([(0.0, 40, "a"), (5_000.0, 40, "b"), (20_000.0, 40, "c")], 0, True)) == []


def test_the_total_is_never_below_what_the_window_holds() -> None:
    # Totals read before another flow counted its response: the share is capped at 100%.
    verdicts = run([(t, 3000, True, 3000, "a") for t in (0.0, 10.0, 20.0, 60.0)])
    assert len(verdicts) == 1
    v = verdicts[0]
    assert v["total_bytes"] == v["unresolved_bytes"] == 12000


def test_scalars_and_eager_copies_are_left_out_of_the_share() -> None:
    from geryon.tf import load

    fn = load().cdll.geryon_fallback_counts
    fn.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    cases = {
        ("edge_67_GroupCrossDeviceControlEdges_0/Identity", 4): 0,  # a control edge's dummy
        ("edge_12_Add/ReadVariableOp", 8): 0,  # the iteration counter
        ("edge_16_sequential/dense/Cast/ReadVariableOp", 4000): 1,
        ("15158686322264723232_89", 900): 0,  # TF's eager copy between tasks
        ("1_x", 900): 1,
        ("_89", 900): 1,
        ("42_", 900): 1,
    }
    assert {k: fn(k[0].encode(), k[1]) for k in cases} == cases
