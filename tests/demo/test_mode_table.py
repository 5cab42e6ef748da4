"""The README's mode table says what geryon.demo.modes runs: one row per mode, in MODES' order, with
the mode's protocol, switch and order inside a class."""

from __future__ import annotations

from pathlib import Path

from geryon.demo import modes

README = Path(__file__).resolve().parents[2] / "README.md"
SWITCH = {"priority": "strict priority", "fifo": "FIFO"}


def readme_rows() -> dict[str, list[str]]:
    lines = README.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| mode | protocol | switch |"))
    rows = {}
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_the_readme_mode_table_matches_modes_py() -> None:
    rows = readme_rows()
    assert list(rows) == list(modes.MODES)
    for name, cells in rows.items():
        m = modes.mode(name)
        _, protocol, switch, tensors, order, _ = cells
        assert protocol.strip("`") == m.protocol, name
        assert switch == SWITCH[m.switch], name
        assert order.split(" ")[0] == (m.order or "-"), name
        if m.single_class:
            assert "ONE class" in tensors, name
        if m.single_worker:
            assert "one worker" in tensors, name
        if not m.partitioned:
            assert "whole variables" in tensors, name
