"""The committed gRPC stubs are what protoc makes of agent.proto today, and they import inside the package."""

from __future__ import annotations

import re
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
        assert _unstamped(fresh) == _unstamped(committed), (
            f"geryon/agent/proto/{name} is stale; regenerate from the repo root:\n{REGENERATE}"
        )


# grpc_tools stamps its own release into the service stub (GRPC_GENERATED_VERSION, the least grpcio the
# stub imports under), so a patch release of grpcio-tools (1.85.1 -> 1.85.4 on the registry, 2026-12)
# changes that line and nothing else. The stamp is not the proto's content: it is left out here, and
# the committed one is checked against the package's grpcio floor below.
_STAMP = re.compile(rb"^GRPC_GENERATED_VERSION = '[^']*'$", re.MULTILINE)


def _unstamped(source: bytes) -> bytes:
    return _STAMP.sub(b"GRPC_GENERATED_VERSION = ''", source)


def test_the_stubs_version_stamps_are_the_packages_floors() -> None:
    # An older grpcio or protobuf runtime than the stubs were generated with refuses to import them
    # (grpc's first_version_is_lower check; protobuf's ValidateProtobufRuntimeVersion: "Runtime version
    # cannot be older than the linked gencode version"), so the agent extra must not allow one.
    pyproject = (REPO / "pyproject.toml").read_text()
    stub = (REPO / "geryon/agent/proto/agent_pb2_grpc.py").read_text()
    grpc_stamp = re.search(r"^GRPC_GENERATED_VERSION = '([^']*)'$", stub, re.MULTILINE)
    assert grpc_stamp is not None
    assert f'"grpcio>={grpc_stamp.group(1)},' in pyproject, f"the stubs need grpcio>={grpc_stamp.group(1)}"
    messages = (REPO / "geryon/agent/proto/agent_pb2.py").read_text()
    pb_stamp = re.search(r"ValidateProtobufRuntimeVersion\(\s*[\w.]+,\s*(\d+),\s*(\d+),\s*(\d+),", messages)
    assert pb_stamp is not None
    floor = ".".join(pb_stamp.groups())
    assert f'"protobuf>={floor}' in pyproject, f"the stubs need protobuf>={floor}"


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
