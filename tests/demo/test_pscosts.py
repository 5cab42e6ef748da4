"""The demo's own PS-cost calibration (geryon.demo.pscosts): when it measures, reuses, skips or fails.

No TensorFlow runs here: the measurement is replaced by a stand-in that writes (or fails to write)
the file; the real one is bench/bench_ps_costs.py's, timed in bench/README.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from geryon.demo import cli, predict, pscosts
from geryon.demo.config import make_config
from geryon.progress import Progress
from geryon.threshold.calibration import CalibrationError, knobs_document, load_knobs

KNOBS = {
    "aggregate_s_per_byte": 9.75e-11,
    "update_s_per_byte": 1.77e-10,
    "per_message_s": 7e-05,
    "per_slice_s": 8.28e-05,
    "loopback_s_per_byte": 6.24e-10,
}


@pytest.fixture(autouse=True)
def fresh_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # ensure() marks its decision in the environment for the re-executed demo; each test starts
    # undecided ("" is), and setenv restores the variable's absence afterwards, so nothing leaks.
    monkeypatch.setenv(pscosts.ENV, "")


def progress() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress("geryon demo", stream=out), out


def fake_measure(calls: list[Path]) -> Any:
    def measure(path: Path, _progress: Progress) -> dict[str, Any]:
        calls.append(path)
        doc = knobs_document(KNOBS, {"bench": "test"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        return doc

    return measure


def test_plan_covers_every_case(tmp_path: Path) -> None:
    absent, present = tmp_path / "absent.json", tmp_path / "present.json"
    present.write_text("{}")
    assert pscosts.plan(None, absent) == "measure"
    assert pscosts.plan(None, present) == "reuse"
    assert pscosts.plan("mine.json", absent) == "given"
    assert [pscosts.plan(w, absent) for w in ("none", "NONE", " off ")] == ["none"] * 3
    assert pscosts.plan(None, absent, quick=True) == "quick"
    assert pscosts.plan(None, absent, decided=True) == "decided"
    # An explicit choice wins over everything else.
    assert pscosts.plan("none", present, quick=True, decided=True) == "none"


def test_absent_measures_once_then_reuses(tmp_path: Path) -> None:
    default = tmp_path / "out" / "bench" / "ps_costs.json"
    calls: list[Path] = []
    prog, out = progress()
    first = pscosts.ensure(None, prog, default=default, measure=fake_measure(calls))
    assert (first.action, first.path, first.error, first.knobs) == ("measured", str(default), None, KNOBS)
    assert calls == [default] and load_knobs(default) == KNOBS
    text = out.getvalue()
    assert f"{default} absent, measuring them once" in text and "--ps-costs none skips this" in text
    assert "per_message_s 7e-05" in text  # the knobs it measured are printed
    # The next demo (a fresh process: nothing decided yet) reads the file instead of measuring again.
    os.environ[pscosts.ENV] = ""
    again = pscosts.ensure(None, progress()[0], default=default, measure=fake_measure(calls))
    assert (again.action, again.path) == ("reuse", str(default)) and calls == [default]


@pytest.mark.parametrize("arg", ["given.json", "none"])
def test_given_or_none_never_measures(tmp_path: Path, arg: str) -> None:
    calls: list[Path] = []
    outcome = pscosts.ensure(
        arg, progress()[0], default=tmp_path / "absent.json", measure=fake_measure(calls)
    )
    assert outcome.action == ("none" if arg == "none" else "given") and outcome.path == arg
    assert calls == [] and not (tmp_path / "absent.json").exists()


def test_quick_skips_and_says_so(tmp_path: Path) -> None:
    calls: list[Path] = []
    prog, out = progress()
    outcome = pscosts.ensure(None, prog, quick=True, default=tmp_path / "a.json", measure=fake_measure(calls))
    assert outcome.action == "quick" and calls == []
    assert "not measured with --quick" in out.getvalue()


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (
            CalibrationError("knobs_document.knobs.per_message_s: expected a finite number >= 0, got -3e-05"),
            "per_message_s",
        ),
        (
            RuntimeError("worker task did not print READY in 120 s"),
            "RuntimeError: worker task did not print READY",
        ),
        (SystemExit("ModuleNotFoundError: No module named 'tensorflow'"), "SystemExit: ModuleNotFoundError"),
    ],
)
def test_failed_calibration_warns_and_goes_on(tmp_path: Path, error: BaseException, why: str) -> None:
    def broken(path: Path, _progress: Progress) -> dict[str, Any]:
        raise error

    default = tmp_path / "ps_costs.json"
    prog, out = progress()
    outcome = pscosts.ensure(None, prog, default=default, measure=broken)
    assert outcome.action == "failed" and outcome.path is None and why in (outcome.error or "")
    assert "warning: PS-cost calibration failed (" in out.getvalue() and why in out.getvalue()
    assert "predicting without PS costs" in out.getvalue()
    assert not default.exists()  # so the prediction says "not calibrated", as before


def test_interrupt_is_not_swallowed(tmp_path: Path) -> None:
    def interrupted(path: Path, _progress: Progress) -> dict[str, Any]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pscosts.ensure(None, progress()[0], default=tmp_path / "x.json", measure=interrupted)


def test_reexecuted_demo_does_not_measure_twice(tmp_path: Path) -> None:
    # The first process failed (no file); the one re-executed in the user namespace inherits ENV.
    pscosts.ensure(None, progress()[0], default=tmp_path / "x.json", measure=lambda p, q: {}["knobs"])
    calls: list[Path] = []
    outcome = pscosts.ensure(None, progress()[0], default=tmp_path / "x.json", measure=fake_measure(calls))
    assert outcome.action == "decided" and calls == []


def test_none_reaches_the_prediction_as_no_costs() -> None:
    assert make_config({"ps_costs": "None"}, quick=True)["ps_costs"] == "none"
    costs, info = predict.resolve_ps_costs("none")
    assert costs is None and info["calibrated"] is False and info["note"] == predict.TURNED_OFF


def test_bench_document_is_what_the_demo_writes() -> None:
    # The demo imports the bench itself (no copy): its document loads, and a negative knob is refused.
    bench = pscosts.load_bench()
    runs = [{"knobs": KNOBS, "step_remote_s": 1e-3, "medians_s": {}}]
    doc = bench.document(KNOBS, runs, 14, bench="geryon demo")
    assert doc["meta"]["runs"] == 1 and doc["meta"]["repeats"] == 14
    from geryon.threshold.calibration import knobs_from_dict

    assert knobs_from_dict(doc) == KNOBS
    with pytest.raises(CalibrationError, match="per_message_s"):
        bench.document({**KNOBS, "per_message_s": -1e-5}, runs, 14)
    with pytest.raises(FileNotFoundError, match="ships with the repository"):
        pscosts.load_bench(Path("/nonexistent/bench_ps_costs.py"))


class Stop(Exception):
    """Raised where the demo would re-execute itself: the test ends before any testbed."""


def test_cli_calibrates_before_the_user_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # predict.DEFAULT_PS_COSTS is relative: out/bench/ps_costs.json here
    calls: list[Path] = []
    monkeypatch.setattr(pscosts, "measure_with_bench", fake_measure(calls))
    seen: list[bool] = []

    def reexec(argv: list[str], command: str) -> None:
        seen.append((tmp_path / predict.DEFAULT_PS_COSTS).is_file())
        raise Stop

    monkeypatch.setattr(cli, "_in_user_namespace", reexec)
    from geryon.cli import main

    with pytest.raises(Stop):
        main(["demo", "--out", "out/demo"])
    assert calls == [predict.DEFAULT_PS_COSTS] and seen == [True]
    # --ps-costs none: nothing measured, the flag travels to the re-executed demo.
    monkeypatch.setenv(pscosts.ENV, "")
    (tmp_path / predict.DEFAULT_PS_COSTS).unlink()
    with pytest.raises(Stop):
        main(["demo", "--out", "out/demo", "--ps-costs", "none"])
    assert calls == [predict.DEFAULT_PS_COSTS] and seen == [True, False]
    assert cli._demo_argv(argparse.Namespace(**_args(ps_costs="none")))[-2:] == ["--ps-costs", "none"]


def _args(**kw: Any) -> dict[str, Any]:
    base = dict.fromkeys(
        (
            "model",
            "steps",
            "modes",
            "background",
            "second_job",
            "chunk_size",
            "profile_source",
            "ps_costs",
            "incast",
            "api",
            "steps_per_execution",
        )
    )
    return {**base, "out": "out/demo", "quick": False, "json": False, **kw}
