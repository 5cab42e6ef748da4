"""The demo's PNG charts: real files, read back as images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from demo_results import result

from geryon.demo.chart import CHARTS, write_charts

matplotlib_image = pytest.importorskip("matplotlib.image")

STEPS = {
    "vanilla": [1.0, 1.1, 0.9],
    "ps": [0.8, 0.8, 0.8],
    "geryon": [0.64, 0.6, 0.7],
    "endhost": [0.66, 0.66, 0.66],
    "single": [0.25, 0.25, 0.25],
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    image = matplotlib_image.imread(path)
    assert image.shape[:2] == (420, 700)  # 7 x 4.2 inches at 100 dpi
    return image


def test_three_charts_with_content(tmp_path: Path) -> None:
    paths = write_charts(result(STEPS), tmp_path / "charts")
    assert [p.name for p in paths] == list(CHARTS) == ["throughput.png", "scaling.png", "search.png"]
    for p in paths:
        assert p.parent == tmp_path / "charts"
        assert p.stat().st_size > 5000
        image = read_png(p)
        # Something is drawn: not one flat colour.
        assert image[..., :3].std() > 0.05


def test_the_numbers_change_the_pictures(tmp_path: Path) -> None:
    a = write_charts(result(STEPS), tmp_path / "a")
    b = write_charts(result({**STEPS, "geryon": [0.4, 0.4, 0.4]}), tmp_path / "b")
    again = write_charts(result(STEPS), tmp_path / "again")
    for pa, pb, pc in zip(a, b, again, strict=True):
        assert not np.array_equal(read_png(pa), read_png(pb)), pa.name
        # Same result, same pixels: the charts are reproducible.
        assert np.array_equal(read_png(pa), read_png(pc)), pa.name


def test_a_failed_mode_still_charts(tmp_path: Path) -> None:
    steps = {**STEPS, "endhost": [None, None, None], "single": [None]}
    paths = write_charts(result(steps), tmp_path)
    assert [p.name for p in paths] == list(CHARTS)
    full = write_charts(result(STEPS), tmp_path / "full")
    for p in paths:
        assert p.stat().st_size > 5000
        read_png(p)
    # The failed modes are missing from the throughput and scaling charts.
    assert not np.array_equal(read_png(paths[0]), read_png(full[0]))
    assert not np.array_equal(read_png(paths[1]), read_png(full[1]))


def test_an_empty_result_writes_every_chart_over_old_ones(tmp_path: Path) -> None:
    old = write_charts(result(STEPS), tmp_path)
    before = {p.name: p.read_bytes() for p in old}
    paths = write_charts({}, tmp_path)
    assert [p.name for p in paths] == list(CHARTS)
    for p in paths:
        read_png(p)
        assert p.read_bytes() != before[p.name]
