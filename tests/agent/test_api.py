"""The gRPC API over a real unix socket (mode 0600) and over TCP with TLS (certificates made by openssl here),
with a small real AgentView; flows come from real marked sockets in a namespace the test creates."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from live_agent import View
from obs_netns import Transfer, connect, listen, namespace

from geryon.agent import api, cli_obs
from geryon.agent.proto import agent_pb2 as pb
from geryon.agent.proto import agent_pb2_grpc as pb_grpc
from geryon.agent.service import Services, start_services
from geryon.agent.view import TlsFiles
from geryon.errors import UsageError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


@pytest.fixture
def sock_path() -> Iterator[str]:
    # tmp_path can exceed a unix socket path's 107 bytes; /tmp with the PID is short and unique.
    d = Path(f"/tmp/gfapi{os.getpid()}x{time.monotonic_ns()}")
    d.mkdir(mode=0o700)
    try:
        yield str(d / "agent.sock")
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def services(sock_path: str) -> Iterator[tuple[View, Services]]:
    view = View()
    svc = start_services(view, api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None)
    try:
        yield view, svc
    finally:
        svc.stop()


def stub(path: str) -> tuple[grpc.Channel, pb_grpc.AgentStub]:
    ch = grpc.insecure_channel(f"unix:{path}")
    return ch, pb_grpc.AgentStub(ch)


def register_request(job_id: str, cluster: dict[str, list[str]], **kw: object) -> pb.RegisterJobRequest:
    return pb.RegisterJobRequest(
        job_id=job_id, cluster={r: pb.TaskAddresses(addresses=a) for r, a in cluster.items()}, **kw
    )


CLUSTER = {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"]}


def test_unix_socket_is_private_and_serves_the_job_lifecycle(services: tuple, sock_path: str) -> None:
    view, svc = services
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    assert svc.api_addresses == [f"unix:{sock_path}"]
    ch, api = stub(sock_path)
    with ch:
        reply = api.RegisterJob(register_request("job1", CLUSTER), timeout=5)
        assert not reply.replaced
        assert [(c.index, c.name, c.dscp, c.priority, c.tos) for c in reply.policy.classes] == [
            (0, "urgent", 46, 5, 184),
            (1, "bulk", 26, 3, 104),
        ]
        assert api.RegisterJob(register_request("job1", CLUSTER), timeout=5).replaced
        policy = api.GetFlowPolicy(pb.GetFlowPolicyRequest(job_id="job1"), timeout=5)
        assert [c.dscp for c in policy.classes] == [46, 26]

        api.ReportIteration(pb.ReportIterationRequest(job_id="job1", iteration_time_s=0.42), timeout=5)
        api.ReportIteration(pb.ReportIterationRequest(job_id="job1", thresholds=[0.3]), timeout=5)
        state = svc.jobs.get("job1")
        assert (state.iteration_time_s, state.thresholds) == (0.42, (0.3,))

        view.drifted = ["geth0/qdisc: root qdisc is pfifo_fast, want htb 1:"]
        status = api.GetStatus(pb.GetStatusRequest(), timeout=5)
        assert not status.in_sync and list(status.drift) == view.drifted
        assert status.last_apply == view.applied and list(status.interfaces) == ["geth0"]
        assert [j.job_id for j in status.jobs] == ["job1"]
        assert status.jobs[0].iteration_time_s == 0.42 and list(status.jobs[0].thresholds) == [0.3]
        assert dict(status.jobs[0].cluster)["ps"].addresses == ["10.0.0.1:2222"]

        api.UnregisterJob(pb.UnregisterJobRequest(job_id="job1"), timeout=5)
        assert svc.jobs.states() == []
        with pytest.raises(grpc.RpcError) as e:
            api.GetFlowPolicy(pb.GetFlowPolicyRequest(job_id="job1"), timeout=5)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "no job 'job1'" in e.value.details()
    svc.stop()
    assert not os.path.exists(sock_path)


@pytest.mark.parametrize(
    ("request_kw", "message"),
    [
        ({"job_id": "has space", "cluster": CLUSTER}, "job_id: 'has space'"),
        ({"job_id": "j", "cluster": {"ps": ["10.0.0.1:2222"]}}, "cluster: needs at least one 'worker'"),
        ({"job_id": "j", "cluster": {**CLUSTER, "gpu": ["x:1"]}}, "cluster: unknown role 'gpu'"),
        ({"job_id": "j", "cluster": CLUSTER, "classes": ["gold", "bulk"]}, "classes: unknown class 'gold'"),
        ({"job_id": "j", "cluster": CLUSTER, "ignore_dscp": [70]}, "ignore_dscp: 70 is not a DSCP"),
    ],
)
def test_bad_registrations_are_invalid_argument_naming_the_field(
    services: tuple, sock_path: str, request_kw: dict, message: str
) -> None:
    _, svc = services
    kw = dict(request_kw)
    req = register_request(kw.pop("job_id"), kw.pop("cluster"), **kw)
    ch, api = stub(sock_path)
    with ch, pytest.raises(grpc.RpcError) as e:
        api.RegisterJob(req, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in e.value.details()
    assert svc.jobs.states() == []  # nothing registered


def test_bad_reports_are_rejected_and_change_nothing(services: tuple, sock_path: str) -> None:
    _, svc = services
    ch, api = stub(sock_path)
    with ch:
        api.RegisterJob(register_request("j", CLUSTER), timeout=5)
        for req, message in [
            (pb.ReportIterationRequest(job_id="j"), "give iteration_time_s, thresholds, unresolved or"),
            (pb.ReportIterationRequest(job_id="j", iteration_time_s=-2), "iteration_time_s: -2"),
            (
                pb.ReportIterationRequest(job_id="j", thresholds=[0.2, 0.5]),
                "thresholds: the job has 2 classes",
            ),
        ]:
            with pytest.raises(grpc.RpcError) as e:
                api.ReportIteration(req, timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            api.ReportIteration(pb.ReportIterationRequest(job_id="nope", iteration_time_s=1), timeout=5)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    state = svc.jobs.get("j")
    assert (state.iteration_time_s, state.thresholds) == (None, None)


@needs_root
def test_flows_and_pairs_over_the_api_and_the_cli(sock_path: str, capsys: pytest.CaptureFixture) -> None:
    with namespace("gfa") as ns:
        ps = listen(ns, "127.0.0.1")
        worker = listen(ns, "127.0.0.2")
        cluster = {
            "ps": [f"127.0.0.1:{ps.getsockname()[1]}"],
            "worker": [f"127.0.0.2:{worker.getsockname()[1]}"],
        }
        transfer = Transfer(ps)
        svc = start_services(
            View(), api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None, netns=ns
        )
        try:
            transfer.add_clients([connect(ns, "127.0.0.2", ps.getsockname(), 46)])
            transfer.send(total=1 << 20)
            ch, api = stub(sock_path)
            with ch:
                api.RegisterJob(register_request("jf", cluster), timeout=5)
                reply = api.ListFlows(pb.ListFlowsRequest(job_id="jf"), timeout=5)
            sides = sorted((f.role, f.peer, f.class_name, f.dscp) for f in reply.flows)
            assert sides == [("ps", "worker:0", "urgent", 46), ("worker", "ps:0", "urgent", 46)]
            [pair] = reply.pairs
            assert (pair.ps, pair.worker, pair.ok, list(pair.missing_classes)) == (
                "ps:0",
                "worker:0",
                False,
                ["bulk"],
            )

            args = _cli(["status", "--api-socket", sock_path])
            assert cli_obs.run_status(args) == 1  # a pair misses its bulk flow
            out = capsys.readouterr().out
            assert (
                "config: in sync" in out
                and "ps:0 <-> worker:0: 1 flow(s), DSCP [46]: no flow for bulk" in out
            )

            transfer.add_clients([connect(ns, "127.0.0.2", ps.getsockname(), 26)])
            args = _cli(["status", "--api-socket", sock_path, "--json"])
            assert cli_obs.run_status(args) == 0
            status = json.loads(capsys.readouterr().out)
            assert status["pairs"][0]["ok"] is True and status["pairs"][0]["dscps"] == [26, 46]

            assert cli_obs.run_flows(_cli(["flows", "--api-socket", sock_path, "--job", "jf"])) == 0
            lines = capsys.readouterr().out.splitlines()
            assert lines[0].split()[:5] == ["job", "role", "peer", "class", "dscp"]
            assert sorted(line.split()[3] for line in lines[1:]) == ["bulk", "bulk", "urgent", "urgent"]
        finally:
            svc.stop()
            transfer.stop()
            worker.close()


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="geryon agent")
    cli_obs.register(parser.add_subparsers(dest="sub", required=True))
    return parser.parse_args(argv)


def test_cli_reports_an_unreachable_agent_clearly(sock_path: str) -> None:
    with pytest.raises(UsageError, match=f"cannot reach the agent at unix:{sock_path}"):
        cli_obs.run_status(_cli(["status", "--api-socket", sock_path, "--timeout", "0.5"]))
    with pytest.raises(UsageError, match="--tls-ca only applies with --api-tcp"):
        cli_obs.run_status(_cli(["status", "--tls-ca", "x.pem"]))


def test_socket_path_safety(sock_path: str) -> None:
    Path(sock_path).write_text("not a socket")
    with pytest.raises(UsageError, match="exists and is not a socket"):
        start_services(View(), api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None)
    Path(sock_path).unlink()

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock_path)
    stale.close()  # a dead agent's socket file: nobody listens
    svc = start_services(View(), api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None)
    try:
        with pytest.raises(UsageError, match="another process is listening there"):
            start_services(View(), api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None)
    finally:
        svc.stop()


NOBODY = 65534


def _connect_as(uid: int, path: str) -> str:
    """Connects to `path` as another user, from a separate process; returns how it went."""
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1]); print('connected')\n"
        "except PermissionError: print('refused')\n"
    )
    r = subprocess.run(
        ["/usr/bin/python3", "-c", code, path], user=uid, capture_output=True, text=True, timeout=30
    )
    return r.stdout.strip() or r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_another_user_is_refused_even_with_umask_000(sock_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the chmod after start only the mode from bind protects the socket: it must be 0600 already.
    monkeypatch.setattr(api.os, "chmod", lambda *a, **k: None)
    old = os.umask(0)
    try:
        os.chmod(Path(sock_path).parent, 0o755)  # others may reach the directory: the socket decides
        svc = start_services(View(), api_socket=sock_path, api_tcp=None, tls=None, metrics_addr=None)
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(sock_path).st_mode) & 0o077 == 0  # no access for group or others
        assert _connect_as(NOBODY, sock_path) == "refused"
        assert _connect_as(0, sock_path) == "connected"
    finally:
        svc.stop()


def test_the_socket_directory_the_agent_makes_is_0700(sock_path: str) -> None:
    path = str(Path(sock_path).parent / "run" / "agent.sock")
    old = os.umask(0)
    try:
        svc = start_services(View(), api_socket=path, api_tcp=None, tls=None, metrics_addr=None)
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    finally:
        svc.stop()


def test_tcp_without_tls_is_refused() -> None:
    with pytest.raises(UsageError, match="serves TCP only with TLS"):
        start_services(View(), api_socket=None, api_tcp="127.0.0.1:0", tls=None, metrics_addr=None)


# --- TLS ---


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed; cannot make test certificates")
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=geryon-test-ca",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", "san.ext", cwd=d,
        )  # fmt: skip
    return d


def test_tcp_with_tls_serves_and_requires_client_certs(pki: Path) -> None:
    tls = TlsFiles(cert=pki / "server.pem", key=pki / "server.key", client_ca=pki / "ca.pem")
    svc = start_services(View(), api_socket=None, api_tcp="127.0.0.1:0", tls=tls, metrics_addr=None)
    try:
        [address] = svc.api_addresses
        port = int(address.rsplit(":", 1)[1])
        assert port > 0
        ca = (pki / "ca.pem").read_bytes()
        good = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(pki / "client.key").read_bytes(),
            certificate_chain=(pki / "client.pem").read_bytes(),
        )
        with grpc.secure_channel(f"localhost:{port}", good) as ch:
            status = pb_grpc.AgentStub(ch).GetStatus(pb.GetStatusRequest(), timeout=5)
        assert status.in_sync and [c.name for c in status.classes] == ["urgent", "bulk"]

        # Without a client certificate the handshake fails.
        with grpc.secure_channel(
            f"localhost:{port}", grpc.ssl_channel_credentials(root_certificates=ca)
        ) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.AgentStub(ch).GetStatus(pb.GetStatusRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # Plaintext to the TLS port gets nothing either.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch, pytest.raises(grpc.RpcError):
            pb_grpc.AgentStub(ch).GetStatus(pb.GetStatusRequest(), timeout=2)

        # The CLI over TLS.
        args = _cli(
            ["status", "--api-tcp", f"localhost:{port}", "--tls-ca", str(pki / "ca.pem"),
             "--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"), "--json"]
        )  # fmt: skip
        assert cli_obs.run_status(args) == 0
    finally:
        svc.stop()


def test_bad_tls_files_are_named(pki: Path, tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("hello")
    for tls, message in [
        (TlsFiles(cert=tmp_path / "missing.pem", key=pki / "server.key"), "--tls-cert"),
        (
            TlsFiles(cert=pki / "server.pem", key=tmp_path / "junk.pem"),
            "--tls-key .*junk.pem: not a PEM file",
        ),
    ]:
        with pytest.raises(UsageError, match=message):
            start_services(View(), api_socket=None, api_tcp="127.0.0.1:0", tls=tls, metrics_addr=None)
    with pytest.raises(UsageError, match="--api-tcp: expected HOST:PORT"):
        start_services(
            View(), api_socket=None, api_tcp="nohost", tls=TlsFiles(pki / "server.pem", pki / "server.key"),
            metrics_addr=None,
        )  # fmt: skip
