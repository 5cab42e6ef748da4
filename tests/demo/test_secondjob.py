"""geryon.demo.secondjob: the flag's values, and on a real testbed a second TF job that trains beside
the measured modes and is gone (by PID) when the demo ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geryon.demo import config, runner, secondjob
from geryon.errors import UsageError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [(None, None), ("none", None), ("vggmini", f"vggmini:{secondjob.BATCH}"), ("tiny:8", "tiny:8")],
)
def test_second_job_values(text: str | None, canonical: str | None) -> None:
    assert secondjob.parse(text) == canonical
    assert config.make_config({"second_job": text})["second_job"] == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lenet", "--second-job 'lenet': model must be one of vggmini, tiny"),
        ("tiny:x", "--second-job 'tiny:x': expected MODEL[:BATCH], BATCH an integer"),
        ("tiny:0", "--second-job 'tiny:0': BATCH must be in 1..4096"),
    ],
)
def test_a_bad_second_job_names_the_flag(text: str, message: str) -> None:
    with pytest.raises(UsageError) as e:
        config.make_config({"second_job": text})
    assert message in str(e.value)


@needs_root
@pytest.mark.slow
def test_a_second_job_trains_through_the_paired_modes_and_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geryon.testbed import namespaces

    monkeypatch.setenv("GERYON_TESTBED_STATE", str(tmp_path / "state"))
    cfg = config.make_config(
        {"steps": 3, "warmup": 1, "modes": ["geryon", "endhost"], "second_job": "tiny:8"}, quick=True
    )
    result = runner.run_demo(cfg, tmp_path / "out")
    job = result["second_job"]
    assert [r["error"] for r in result["runs"]] == [None, None]
    assert job["error"] is None and job["dscp"] == secondjob.DSCP, job
    # It ran the whole time: many rounds of its own, while the measured job ran its 3 x 2 x 2 + warm-up.
    assert job["rounds"] >= 5 and job["median_round_s"] > 0, job
    assert set(job["pids"]) == {"ps0", "worker0", "worker1", "chief"}
    for pid in job["pids"].values():
        assert not Path(f"/proc/{pid}").exists() or b"geryon.demo" not in _cmdline(pid)
    assert namespaces.listed(f"gtb-{result['testbed']['run_id']}-") == []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
