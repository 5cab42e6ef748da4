"""The etcd client against a real etcd 3.4 (one member): kv, prefix ranges, txn, leases (expiry,
keepalive, revoke), the streaming watch, errors that name the endpoint, and failover past a dead one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from jobs.etcd_server import EtcdCluster, free_ports, start_cluster

from geryon.errors import UsageError
from geryon.jobs import etcd


@pytest.fixture(scope="module")
def server() -> Iterator[EtcdCluster]:
    cluster = start_cluster(1)
    yield cluster
    cluster.stop()


@pytest.fixture
def client(server: EtcdCluster) -> etcd.Client:
    c = etcd.Client(server.endpoints)
    c.delete("/t/", prefix=True)
    return c


def test_put_get_range_delete(client: etcd.Client) -> None:
    rev = client.put("/t/a", "1")
    client.put("/t/b", b"\x00\xff")
    client.put("/u", "outside")
    kv = client.get("/t/a")
    assert kv is not None and kv.value == b"1" and kv.create_revision == rev
    kvs, revision = client.range("/t/", prefix=True)
    assert [k.key for k in kvs] == ["/t/a", "/t/b"] and kvs[1].value == b"\x00\xff"
    assert revision >= rev
    assert client.get("/t/none") is None
    assert client.delete("/t/", prefix=True) == 2
    assert client.range("/t/", prefix=True)[0] == []
    assert client.get("/u") is not None


def test_txn_create_if_absent(client: etcd.Client) -> None:
    first, _ = client.txn([etcd.cmp_create_revision("/t/x", 0)], [etcd.op_put("/t/x", "me")])
    second, answer = client.txn(
        [etcd.cmp_create_revision("/t/x", 0)], [etcd.op_put("/t/x", "you")], [etcd.op_get("/t/x")]
    )
    assert first and not second
    assert etcd.txn_kvs(answer, 0)[0].value == b"me"


def test_lease_expires_and_deletes_its_keys(client: etcd.Client) -> None:
    lease = client.grant(2)
    client.put("/t/leased", "v", lease=lease)
    assert client.get("/t/leased").lease == lease  # type: ignore[union-attr]
    start = time.monotonic()
    deadline = start + 6
    while client.get("/t/leased") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    took = time.monotonic() - start
    assert client.get("/t/leased") is None, "the key outlived its 2 s lease by 4 s"
    assert 1.0 <= took <= 4.0, took
    with pytest.raises(etcd.LeaseLost):
        client.keepalive(lease)


def test_keepalive_holds_and_revoke_frees(client: etcd.Client) -> None:
    lease = client.grant(2)
    client.put("/t/kept", "v", lease=lease)
    for _ in range(8):  # 2.4 s, past the ttl
        assert client.keepalive(lease) == 2
        time.sleep(0.3)
    assert client.get("/t/kept") is not None
    client.revoke(lease)
    assert client.get("/t/kept") is None
    client.revoke(lease)  # twice: no error


def test_put_with_a_lost_lease_is_refused(client: etcd.Client) -> None:
    with pytest.raises(etcd.LeaseLost, match="lease not found"):
        client.put("/t/k", "v", lease=12345)


def test_watch_streams_puts_and_deletes(client: etcd.Client) -> None:
    rev = client.put("/t/w/0", "start")
    seen: list[tuple[str, str, bytes]] = []

    def read() -> None:
        for events in client.watch("/t/w/", prefix=True, start_revision=rev + 1, timeout=5):
            seen.extend((e.type, e.kv.key, e.kv.value) for e in events)
            if len(seen) >= 3:
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    client.put("/t/w/1", "a")
    client.put("/t/w/1", "b")
    client.delete("/t/w/1")
    t.join(timeout=10)
    assert seen == [("PUT", "/t/w/1", b"a"), ("PUT", "/t/w/1", b"b"), ("DELETE", "/t/w/1", b"")]


def test_a_quiet_watch_times_out(client: etcd.Client) -> None:
    start = time.monotonic()
    with pytest.raises(etcd.EtcdUnavailable, match="watch"):
        for _ in client.watch("/t/quiet", timeout=0.5):
            pass
    assert time.monotonic() - start < 3


def test_errors_name_the_endpoint_and_failover(server: EtcdCluster) -> None:
    (dead,) = free_ports(1)
    dead_url = f"http://127.0.0.1:{dead}"
    with pytest.raises(etcd.EtcdUnavailable, match=f"127.0.0.1:{dead}"):
        etcd.Client([dead_url], timeout=0.5).get("/t/a")
    both = etcd.Client([dead_url, *server.endpoints], timeout=0.5)
    both.put("/t/f", "ok")
    assert both.get("/t/f").value == b"ok"  # type: ignore[union-attr]
    assert both.endpoints[both._preferred] == server.endpoints[0]  # the live one is tried first next time


def test_endpoints_plain_http_only_to_loopback() -> None:
    assert etcd.parse_endpoints("http://127.0.0.1:2379, http://localhost:2379/") == (
        "http://127.0.0.1:2379",
        "http://localhost:2379",
    )
    assert etcd.parse_endpoints(["https://etcd1.example:2379"]) == ("https://etcd1.example:2379",)
    with pytest.raises(UsageError, match="plain http is allowed only to a loopback"):
        etcd.parse_endpoints("http://10.0.0.5:2379")
    with pytest.raises(UsageError, match="give http://HOST:PORT"):
        etcd.parse_endpoints("etcd1:2379")
    with pytest.raises(UsageError, match="at least one"):
        etcd.parse_endpoints(" , ")
