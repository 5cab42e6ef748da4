"""The C++ unit tests of the native rendezvous' pure parts (geryon/tf/cpp_tests.py): built from
native/rendezvous/tests/ without TensorFlow and run with GoogleTest; skipped when it is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geryon.tf import cpp_tests


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        cpp_tests.find_gtest()
    except cpp_tests.GtestMissing as e:
        pytest.skip(str(e))
    return cpp_tests.build()


def test_every_cpp_unit_test_passes(binary: Path, tmp_path: Path) -> None:
    report = tmp_path / "gtest.json"
    proc = cpp_tests.run([f"--gtest_output=json:{report}"], binary=binary)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    result = json.loads(report.read_text())
    suites = {s["name"]: s["tests"] for s in result["testsuites"]}
    # Each part the split made testable has its suite (wire format, send order, burst hold, chunks).
    parts = (
        "Hello",
        "Request",
        "ResponseHead",
        "ChunkHead",
        "SendQueue",
        "HostOrder",
        "BurstHold",
        "ChunkSizer",
    )
    for suite in parts:
        assert suites.get(suite, 0) > 0, suites
    assert result["tests"] >= 40 and result["failures"] == 0 and result.get("errors", 0) == 0


def test_the_pure_parts_build_without_tensorflow() -> None:
    # The binary's flags name no TensorFlow include dir: a pure part that includes a TF header fails
    # to compile there. Here: none of their headers names one (tsan.h only where TF is on the path).
    for name in ("wire_format.h", "send_order.h", "burst_hold.h", "clock.h", *cpp_tests.PURE_SOURCES):
        text = (cpp_tests.SOURCE_DIR / name).read_text()
        assert '#include "tensorflow/' not in text and '#include "absl/' not in text, name


def test_missing_gtest_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpp_tests, "compiler_file", lambda name, compiler=None: None)
    with pytest.raises(cpp_tests.GtestMissing, match="apt-get install libgtest-dev"):
        cpp_tests.find_gtest()
