"""TensorFlow's own PS tests (the CI subset) on grpc and grpc+geryon: every test that passes on grpc
passes on grpc+geryon, and the tensors of the grpc+geryon run did travel on Geryon's flows.

The test files are TensorFlow's, unchanged, read from ../shared/vendor/tf-ps-tests (never copied
into this repository); bench/tf_ps_tests.py runs them (see there and `make tf-ps-tests`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geryon.tf.build import build

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "bench" / "tf_ps_tests.py"
VENDOR = Path(os.environ.get("GERYON_TF_PS_TESTS") or ROOT.parent / "shared" / "vendor" / "tf-ps-tests")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (VENDOR / "parameter_server_strategy_v2_test.py").is_file(),
        reason=f"TensorFlow's PS tests are not at {VENDOR} (test data kept outside the repo; "
        "GERYON_TF_PS_TESTS names another folder)",
    ),
]


def _missing_test_deps() -> list[str]:
    # multi_process_runner (in the TF wheel) imports these; they are in the `dev` extra.
    missing = []
    for module in ("portpicker", "dill", "psutil"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return missing


def test_tf_ps_tests_fast_subset_pass_on_grpc_geryon_where_they_pass_on_grpc(tmp_path: Path) -> None:
    if missing := _missing_test_deps():
        pytest.skip(f"TF's multi_process_runner needs {', '.join(missing)} (pip install -e '.[dev]')")
    build()  # once here, not in each test process
    out = tmp_path / "tf_ps_tests.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            "--subset",
            "fast",
            "--vendor",
            str(VENDOR),
            "--timeout",
            "150",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    table = proc.stdout[proc.stdout.find("file") :]
    for name, data in report["files"].items():
        grpc = data["results"]["grpc"]
        geryon = data["results"]["grpc+geryon"]
        passed_on_grpc = [t for t, r in grpc.items() if r["outcome"] == "pass"]
        assert passed_on_grpc, f"{name}: nothing passed on grpc, so the comparison says nothing\n{table}"
        not_on_geryon = {
            t: (geryon[t]["outcome"], geryon[t]["detail"][:500])
            for t in passed_on_grpc
            if geryon[t]["outcome"] != "pass"
        }
        assert not not_on_geryon, f"{name}: pass on grpc, not on grpc+geryon: {not_on_geryon}\n{table}"
        # The tests' tensors crossed tasks on the data plane, not on TF's gRPC.
        assert data["data_plane_messages"]["grpc+geryon"] > 0, table
