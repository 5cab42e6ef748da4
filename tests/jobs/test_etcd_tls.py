"""The cluster view over TLS against a real etcd 3.4 serving https with client-certificate auth: the
client's kv, leases and watch, a controller process and a chief's registration over https, and what a
user gets for a missing or wrong certificate (one clear error naming the option or the TLS handshake;
exit 2 at the CLI)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs.etcd_server import ROOT, EtcdCluster, EtcdTls, geryon, kill, start_cluster
from waiting import wait_until

from geryon.cli import main
from geryon.errors import UsageError
from geryon.jobs import etcd, keys
from geryon.jobs.chief import HostRegistration, JobRegistration
from geryon.jobs.registration import make_record
from geryon.testbed.pki import Authority, Pem

P = keys.DEFAULT_PREFIX


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = Authority(directory)
        self.server = self.ca.issue("etcd-server", server=True)
        self.client = self.ca.issue("geryon-client", server=False)
        other = directory / "other"
        other.mkdir()
        self.stranger_ca = Authority(other, "stranger-ca")  # signs nothing etcd trusts
        self.stranger = self.stranger_ca.issue("stranger", server=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[EtcdCluster]:
    cluster = start_cluster(1, EtcdTls(pki.ca.pem.cert, pki.server.cert, pki.server.key))
    yield cluster
    cluster.stop()


def tls_client(server: EtcdCluster, pki: Pki, cert: Pem | None = None, ca: str | None = None) -> etcd.Client:
    cert = cert or pki.client
    return etcd.Client(server.endpoints, cafile=ca or pki.ca.pem.cert, certfile=cert.cert, keyfile=cert.key)


def test_kv_lease_and_watch_over_tls(server: EtcdCluster, pki: Pki) -> None:
    assert all(u.startswith("https://127.0.0.1:") for u in server.endpoints)
    client = tls_client(server, pki)
    client.delete("/tls/", prefix=True)
    rev = client.put("/tls/a", "1")
    kv = client.get("/tls/a")
    assert kv is not None and kv.value == b"1" and kv.mod_revision == rev
    lease = client.grant(5)
    client.put("/tls/leased", "x", lease=lease)
    client.keepalive(lease)
    client.revoke(lease)
    assert client.get("/tls/leased") is None
    seen: list[str] = []

    def watch() -> None:
        for events in client.watch("/tls/w", start_revision=rev + 1, timeout=5):
            seen.extend(e.kv.value.decode() for e in events)
            return

    t = threading.Thread(target=watch)
    t.start()
    client.put("/tls/w", "changed")
    t.join(10)
    assert seen == ["changed"]


def test_without_a_client_certificate_etcd_refuses(server: EtcdCluster, pki: Pki) -> None:
    client = etcd.Client(server.endpoints, cafile=pki.ca.pem.cert)
    with pytest.raises(etcd.EtcdError) as err:
        client.get("/tls/a")
    assert server.endpoints[0] in str(err.value) and "TLS handshake failed" in str(err.value)


def test_a_certificate_from_another_ca_is_refused(server: EtcdCluster, pki: Pki) -> None:
    client = tls_client(server, pki, cert=pki.stranger)
    with pytest.raises(etcd.EtcdError) as err:
        client.get("/tls/a")
    assert server.endpoints[0] in str(err.value) and "TLS handshake failed" in str(err.value)


def test_a_server_our_ca_did_not_sign_fails_the_handshake(server: EtcdCluster, pki: Pki) -> None:
    client = tls_client(server, pki, ca=pki.stranger_ca.pem.cert)
    with pytest.raises(etcd.EtcdUnavailable) as err:
        client.get("/tls/a")
    message = str(err.value)
    assert "TLS handshake failed" in message and "CERTIFICATE_VERIFY_FAILED" in message


def test_controller_and_chief_over_tls(server: EtcdCluster, pki: Pki, tmp_path: Path) -> None:
    """A controller process and a chief's registration, both over https with client certificates: the
    job gets its band, and leaving frees it."""
    client = tls_client(server, pki)
    client.delete(P, prefix=True)
    tls_args = ["--cacert", pki.ca.pem.cert, "--cert", pki.client.cert, "--key", pki.client.key]
    proc = geryon(
        "controller", "--etcd", server.endpoints[0], "--queues", "4", "--name", "tls-ctl",
        "--ttl", "2", "--interval", "0.2", *tls_args, log=str(tmp_path / "controller.log"),
    )  # fmt: skip
    try:
        with HostRegistration(client, "h1"), HostRegistration(client, "h2"):
            record = make_record("tls-job", {"worker:0": "h1:2222", "ps:0": "h2:2222"}, 0.1, 0.2, 1000)
            with JobRegistration(client, record) as reg:
                verdict = reg.wait_verdict(timeout=15)
                assert verdict["classes"] and verdict["generation"] >= 1
                assert json.loads(client.get(keys.host(P, "h1")).value)["jobs"]["tls-job"]

            def freed() -> bool:
                kv = client.get(keys.bands_all(P))
                return kv is not None and "tls-job" not in json.loads(kv.value).get("jobs", {})

            wait_until("the band freed after the chief left", freed, timeout=10)
    finally:
        kill(proc)
    assert "TLS" not in (tmp_path / "controller.log").read_text()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cafile": "/nonexistent/ca.pem"}, "--cacert '/nonexistent/ca.pem': not a readable PEM CA bundle"),
        ({"certfile": "/nonexistent/c.pem"}, "--cert '/nonexistent/c.pem': not a readable PEM certificate"),
        ({"keyfile": "k.pem"}, "--key given without --cert"),
    ],
)
def test_bad_tls_files_name_the_option(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        etcd.Client("https://127.0.0.1:1", **kwargs)


def test_a_key_that_is_not_the_certificates(pki: Pki) -> None:
    with pytest.raises(
        UsageError, match=r"--cert .* / --key .*: not a readable PEM certificate with its matching"
    ):
        etcd.Client("https://127.0.0.1:1", certfile=pki.client.cert, keyfile=pki.stranger.key)


def test_tls_files_for_plain_http_are_refused_not_ignored(pki: Pki) -> None:
    with pytest.raises(UsageError, match=r"--cacert given, but no endpoint is https://"):
        etcd.Client("http://127.0.0.1:2379", cafile=pki.ca.pem.cert)


def test_cli_bad_tls_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["jobs", "list", "--etcd", "https://127.0.0.1:1", "--cacert", "/nonexistent/ca.pem"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--cacert '/nonexistent/ca.pem'" in err and "Traceback" not in err


def test_cli_list_over_tls(server: EtcdCluster, pki: Pki) -> None:
    tls_args = ["--cacert", pki.ca.pem.cert, "--cert", pki.client.cert, "--key", pki.client.key]
    done = subprocess.run(
        [sys.executable, "-m", "geryon", "jobs", "list", "--etcd", server.endpoints[0], *tls_args],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("leader:")


def test_a_task_follows_its_band_over_tls(server: EtcdCluster, pki: Pki) -> None:
    """geryon.tf.band_follow from its environment (GERYON_BANDS_CACERT/_CERT/_KEY): the band written
    over https reaches the task's apply callback."""
    from geryon.tf.band_follow import follower_from_env

    client = tls_client(server, pki)
    value = {"generation": 7, "queues": 4, "jobs": {"tls-task-job": [1, 3]}}
    client.put(keys.host(P, "tls-host"), json.dumps(value))
    calls: list[tuple[list[int], list[int]]] = []
    env = {
        "GERYON_BANDS_ETCD": server.endpoints[0],
        "GERYON_JOB": "tls-task-job",
        "GERYON_BANDS_HOST": "tls-host",
        "GERYON_BANDS_CACERT": pki.ca.pem.cert,
        "GERYON_BANDS_CERT": pki.client.cert,
        "GERYON_BANDS_KEY": pki.client.key,
    }
    fabric = [(46, 6), (26, 0), (18, 2), (10, 2)]
    follower = follower_from_env(lambda d, p: calls.append((d, p)) or 0, fabric, env)
    assert follower is not None
    follower.start()
    try:
        wait_until("the band applied", lambda: calls, timeout=10)
    finally:
        follower.stop()
    assert calls[0][0][:2] == [26, 10]
