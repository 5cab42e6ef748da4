"""The agent's part of the cluster view (geryon.agent.cluster_view) against a real etcd and a real
controller: the host registered under the agent's lease, so a job on it is accepted (and refused on a
host no agent registered); the host's bands logged on every change; etcd lost: the last bands kept and
the log says stale; back: live again; close revokes the host at once; etcd away at the start: the
agent retries until it registers. And the daemon's cluster flags, refused before anything is applied."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobs.etcd_server import EtcdCluster, start_cluster
from waiting import wait_until

from geryon.agent.cluster_view import ClusterView
from geryon.cli import main
from geryon.jobs import etcd, keys
from geryon.jobs.chief import HostRegistration, JobRegistration
from geryon.jobs.controller import Controller
from geryon.jobs.registration import RegistrationError, make_record

P = keys.DEFAULT_PREFIX


class Events:
    """The agent's log (geryon.agent.daemon.Log's call shape), kept as (event, level, fields)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        with self.lock:
            self.items.append((event, level, {k: str(v) for k, v in fields.items()}))

    def named(self, event: str) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [(lvl, f) for e, lvl, f in self.items if e == event]


@pytest.fixture
def server() -> Iterator[EtcdCluster]:
    cluster = start_cluster(1)
    yield cluster
    cluster.stop()


@pytest.fixture
def controller(server: EtcdCluster) -> Iterator[Controller]:
    ctl = Controller(etcd.Client(server.endpoints), 4, ttl=2, interval=0.1, name="test-ctl")
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    thread.start()
    yield ctl
    stop.set()
    thread.join(10)


def job(name: str, worker_host: str) -> Any:
    return make_record(
        name, {"worker:0": f"{worker_host}:2222", "ps:0": f"{worker_host}:2223"}, 0.1, 0.2, 1000
    )


def test_registered_host_carries_jobs_and_follows_its_bands(
    server: EtcdCluster, controller: Controller
) -> None:
    client = etcd.Client(server.endpoints)
    log = Events()
    view = ClusterView(client, "h1", log, ttl=3, read_timeout=0.5).start()
    try:
        assert view.wait_registered(10)
        kv = client.get(keys.agent(P, "h1"))
        assert kv is not None and kv.lease != 0 and json.loads(kv.value)["host"] == "h1"

        # A job on a host no agent registered is refused; on h1 it gets its band, which the view logs.
        with (
            JobRegistration(client, job("nowhere", "h9")) as reg,
            pytest.raises(RegistrationError, match="h9"),
        ):
            reg.wait_verdict(timeout=10)
        with JobRegistration(client, job("a", "h1")) as reg:
            verdict = reg.wait_verdict(timeout=10)
            seen = wait_until(
                "the band in the agent's view", lambda: view.status()["bands"].get("a"), timeout=10
            )
            assert seen == verdict["classes"]
            logged = [f for _, f in log.named("cluster_bands") if '"a"' in f["jobs"]]
            assert logged and json.loads(logged[-1]["jobs"])["a"] == verdict["classes"]
            assert view.status()["live"] and view.status()["registered"]

            # etcd lost: the view says stale (a warning) and keeps the last bands.
            server.members[0].kill()
            wait_until("stale", lambda: not view.status()["live"], timeout=10)
            assert view.status()["bands"]["a"] == verdict["classes"]
            stale = [f for lvl, f in log.named("cluster_view") if lvl == "warning"]
            assert stale and "stale" in stale[-1]["state"] and "keeping the last bands" in stale[-1]["state"]
            server.members[0].start()
            server.wait_healthy()
            wait_until("live again", lambda: view.status()["live"], timeout=15)
    finally:
        view.close()
    wait_until("the host gone", lambda: client.get(keys.agent(P, "h1")) is None, timeout=5)


def test_etcd_away_at_start_the_agent_retries_until_it_registers() -> None:
    cluster = start_cluster(1)
    endpoints = cluster.endpoints
    cluster.members[0].kill()
    log = Events()
    view = ClusterView(etcd.Client(endpoints, timeout=0.5), "h2", log, ttl=3, retry=0.2, read_timeout=0.5)
    view.start()
    try:
        wait_until("a failed registration logged", lambda: log.named("cluster_register_failed"), timeout=10)
        assert not view.status()["registered"]
        cluster.members[0].start()
        cluster.wait_healthy()
        assert view.wait_registered(15)
        assert etcd.Client(endpoints).get(keys.agent(P, "h2")) is not None
        # One line per distinct error, not one per retry.
        errors = [f["error"] for _, f in log.named("cluster_register_failed")]
        assert len(errors) == len(set(errors))
    finally:
        view.close()
        cluster.stop()


def test_a_second_agent_for_the_same_host_name_keeps_it_registered(server: EtcdCluster) -> None:
    """Two agents claiming one name (a restart racing the old one): the host stays known while either
    holds its lease; the last to leave removes it."""
    client = etcd.Client(server.endpoints)
    first = ClusterView(client, "h3", Events(), ttl=3).start()
    assert first.wait_registered(10)
    with HostRegistration(client, "h3", ttl=3):
        first.close()
        assert client.get(keys.agent(P, "h3")) is not None
    assert client.get(keys.agent(P, "h3")) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cluster-host", "h1"], "--cluster-host: only with --etcd"),
        (["--etcd-cacert", "/x.pem"], "--etcd-cacert: only with --etcd"),
        (["--etcd", "http://10.0.0.1:2379"], "plain http is allowed only to a loopback"),
        (["--etcd", "http://127.0.0.1:1", "--cluster-host", "bad_name"], "--cluster-host: 'bad_name'"),
        (["--etcd", "http://127.0.0.1:1", "--cluster-ttl", "1"], "--cluster-ttl: 1 s; give 2 to 60"),
        (["--etcd", "http://127.0.0.1:1", "--etcd-prefix", "geryon"], "--etcd-prefix"),
        (["--etcd", "http://127.0.0.1:1", "--etcd-cacert", "/x.pem"], "--etcd-cacert given, but no endpoint"),
        (["--etcd", "https://127.0.0.1:1", "--etcd-cacert", "/x.pem"], "--etcd-cacert '/x.pem'"),
    ],
)
def test_daemon_cluster_flags_are_checked_first(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("interfaces: [ga0]\n")
    journal = tmp_path / "journal.json"
    argv = ["agent", "run", "--config", str(config), "--journal", str(journal), "--api-socket", ""]
    assert main([*argv, "--metrics", "", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not journal.exists()  # nothing applied, nothing journalled
