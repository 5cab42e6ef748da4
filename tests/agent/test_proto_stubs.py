"""The committed gRPC stubs are what protoc makes of agent.proto today, and they import inside the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO = "geryon/agent/proto/agent.proto"
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py")
REGENERATE = (
    f"{sys.executable} -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. {PROTO}"
)


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            PROTO,
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "geryon/agent/proto" / name).read_bytes()
        committed = (REPO / "geryon/agent/proto" / name).read_bytes()
        assert fresh == committed, (
            f"geryon/agent/proto/{name} is stale; regenerate from the repo root:\n{REGENERATE}"
        )


def test_stubs_import_inside_the_package() -> None:
    from geryon.agent.proto import agent_pb2, agent_pb2_grpc

    # protoc names the import after the proto's path: generated from the repo root, it is package-absolute.
    assert agent_pb2_grpc.geryon_dot_agent_dot_proto_dot_agent__pb2 is agent_pb2
    service = agent_pb2.DESCRIPTOR.services_by_name["Agent"]
    assert service.full_name == "geryon.agent.v1.Agent"
    assert {m.name for m in service.methods} == {
        "RegisterJob",
        "UnregisterJob",
        "GetFlowPolicy",
        "ReportIteration",
        "GetStatus",
        "ListFlows",
    }
    req = agent_pb2.RegisterJobRequest(job_id="j", classes=["urgent", "bulk"])
    req.cluster["ps"].addresses.append("10.0.0.1:2222")
    again = agent_pb2.RegisterJobRequest.FromString(req.SerializeToString())
    assert again.cluster["ps"].addresses == ["10.0.0.1:2222"] and list(again.classes) == ["urgent", "bulk"]
