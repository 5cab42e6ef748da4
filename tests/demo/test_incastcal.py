"""The demo's own incast measurement (geryon.demo.incastcal): when it measures, reuses, skips or fails,
and (as root) that the bench's real measurement, in miniature, is written where the prediction reads it.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from geryon.demo import incastcal, predict
from geryon.progress import Progress


def progress() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress("geryon demo", stream=out), out


def doc(mean: float = 0.85, per_class: float | None = None) -> dict[str, Any]:
    # The shape bench_incast.measure returns, with only what load_incast and the summary read.
    eff = {"2 senders": {"mean": 0.99, "median": 1.0}, "2x2": {"mean": mean, "median": mean}}
    if per_class is not None:
        eff |= {"2 senders per class": {"mean": 0.98}, "2x2 per class": {"mean": per_class}}
    return {"bench": "incast", "results": [{"switch": s, "efficiency": eff} for s in ("fifo", "priority")]}


def writer(calls: list[Path], per_class: float | None = None) -> Any:
    def measure(path: Path, _progress: Progress) -> dict[str, Any]:
        calls.append(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc(per_class=per_class)))
        return doc(per_class=per_class)

    return measure


def test_absent_measures_once_then_reuses(tmp_path: Path) -> None:
    default, calls = tmp_path / "out" / "incast.json", []
    prog, out = progress()
    first = incastcal.ensure(None, prog, default=default, measure=writer(calls))
    assert (first.action, first.path) == ("measured", str(default)) and calls == [default]
    assert "absent, measuring it once" in out.getvalue() and "fifo 2x2 mean 0.850" in out.getvalue()
    again = incastcal.ensure(None, progress()[0], default=default, measure=writer(calls))
    assert (again.action, again.path) == ("reuse", str(default)) and calls == [default]


def test_summary_names_the_per_class_efficiency_when_measured(tmp_path: Path) -> None:
    prog, out = progress()
    calls: list[Path] = []
    outcome = incastcal.ensure(None, prog, default=tmp_path / "i.json", measure=writer(calls, per_class=0.7))
    assert outcome.action == "measured" and "fifo 2x2 mean 0.850, per class 0.700" in out.getvalue()


@pytest.mark.parametrize("arg", ["none", "OFF", "/some/incast.json"])
def test_given_or_none_never_measures(tmp_path: Path, arg: str) -> None:
    calls: list[Path] = []
    outcome = incastcal.ensure(arg, progress()[0], default=tmp_path / "i.json", measure=writer(calls))
    assert calls == [] and outcome.action in ("none", "given")


def test_quick_skips_and_says_so(tmp_path: Path) -> None:
    calls: list[Path] = []
    prog, out = progress()
    outcome = incastcal.ensure(None, prog, quick=True, default=tmp_path / "i.json", measure=writer(calls))
    assert outcome.action == "quick" and calls == [] and "not measured with --quick" in out.getvalue()


def test_failed_measurement_warns_and_goes_on(tmp_path: Path) -> None:
    def broken(path: Path, _progress: Progress) -> dict[str, Any]:
        raise RuntimeError("testbed: cannot create namespace")

    prog, out = progress()
    outcome = incastcal.ensure(None, prog, default=tmp_path / "i.json", measure=broken)
    assert outcome.action == "failed" and "cannot create namespace" in (outcome.error or "")
    assert "predicting with the ports' full rate" in out.getvalue()
    assert not (tmp_path / "i.json").exists()


def test_interrupt_is_not_swallowed(tmp_path: Path) -> None:
    def interrupted(path: Path, _progress: Progress) -> dict[str, Any]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        incastcal.ensure(None, progress()[0], default=tmp_path / "i.json", measure=interrupted)


def test_unusable_measurement_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Bench:
        @staticmethod
        def measure(repeats: int) -> dict[str, Any]:
            return {"bench": "incast", "results": [{"switch": "tor"}]}

    monkeypatch.setattr(incastcal, "load_bench", lambda: Bench)
    with pytest.raises(predict.IncastError, match=r"results\[0\]\.switch"):
        incastcal.measure_with_bench(tmp_path / "i.json", progress()[0])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (network namespaces)")
def test_real_measurement_in_miniature_is_what_the_prediction_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = incastcal.load_bench()
    real = bench.measure
    # The bench's own measurement, one repeat of 256 KiB per PS port on the fifo switch only (seconds).
    monkeypatch.setattr(bench, "measure", lambda repeats: real(1, ("fifo",), nbytes=256 * 1024))
    monkeypatch.setattr(incastcal, "load_bench", lambda: bench)
    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    path = tmp_path / "out" / "bench" / "incast.json"
    outcome = incastcal.ensure(None, progress()[0], default=path)
    assert outcome.action == "measured", outcome.error
    by_switch, info = predict.resolve_incast(path)
    # The one-class patterns and, for geryon and paper, the per-class ones (one connection per class).
    assert info["measured"] and set(by_switch) == {"fifo", "fifo per-class"}
    assert all(0 < i.shared <= 1 and 0 < i.alone <= 1 for i in by_switch.values())
