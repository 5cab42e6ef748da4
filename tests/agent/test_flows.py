"""Flow discovery on real marked TCP connections in a namespace the test creates.

A "PS" listens on 127.0.0.1 and three "workers" (their own listeners on 127.0.0.2-4, as in a cluster spec)
connect from their host addresses with IP_TOS set before connect(): worker 0 opens the two class flows
(DSCP 46 and 26), worker 1 only the urgent one, worker 2 marks its bulk flow with DSCP 10.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from obs_netns import Transfer, connect, inside, listen, namespace

from geryon.agent.config import default_classes
from geryon.agent.flows import (
    NLMSG_DONE,
    NLMSG_ERROR,
    FlowDiscovery,
    diag_request,
    normalize_address,
    parse_diag_dump,
)
from geryon.agent.jobs import make_job, map_job_flows

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


@pytest.fixture
def cluster() -> Iterator[tuple[str, Transfer, dict[str, list[str]]]]:
    with namespace("gff") as ns:
        ps = listen(ns, "127.0.0.1")
        workers = [listen(ns, f"127.0.0.{2 + i}") for i in range(3)]
        spec = {
            "ps": [f"127.0.0.1:{ps.getsockname()[1]}"],
            "worker": [f"127.0.0.{2 + i}:{w.getsockname()[1]}" for i, w in enumerate(workers)],
        }
        dst = ps.getsockname()
        transfer = Transfer(ps)
        try:
            transfer.add_clients(
                [
                    connect(ns, "127.0.0.2", dst, 46),
                    connect(ns, "127.0.0.2", dst, 26),
                    connect(ns, "127.0.0.3", dst, 46),
                    connect(ns, "127.0.0.4", dst, 46),
                    connect(ns, "127.0.0.4", dst, 10),
                ]
            )
            transfer.send(total=2 << 20)
            yield ns, transfer, spec
        finally:
            transfer.stop()
            for w in workers:
                w.close()


def _wait_for_bytes(disc: FlowDiscovery, port: int, n: int) -> list:
    deadline = time.monotonic() + 10
    while True:
        flows = [f for f in disc.flows() if f.peer_port == port and f.bytes_sent > 0]
        if len(flows) >= n or time.monotonic() > deadline:
            return flows
        time.sleep(0.05)


def test_discovery_sees_marked_flows_with_counters(cluster: tuple) -> None:
    ns, transfer, _ = cluster
    ps_port = transfer.server.getsockname()[1]
    with FlowDiscovery(netns=ns) as disc:
        clients = _wait_for_bytes(disc, ps_port, 5)
        assert sorted((f.local, f.dscp) for f in clients) == [
            ("127.0.0.2", 26),
            ("127.0.0.2", 46),
            ("127.0.0.3", 46),
            ("127.0.0.4", 10),
            ("127.0.0.4", 46),
        ]
        for f in clients:
            assert f.bytes_sent > 0 and f.bytes_acked > 0 and f.rtt_us > 0
        # tcp_reflect_tos=1: the PS's accepted sockets carry the worker's mark back.
        server_side = [f for f in disc.flows() if f.local_port == ps_port]
        assert sorted(f.dscp for f in server_side) == [10, 26, 46, 46, 46]
        assert all(f.bytes_received > 0 for f in server_side)
        assert ("127.0.0.1", ps_port) in disc.listeners()


def test_pairs_are_checked_against_the_job_classes(cluster: tuple) -> None:
    ns, transfer, spec = cluster
    job = make_job("job-a", spec, default_classes())
    with FlowDiscovery(netns=ns) as disc:
        _wait_for_bytes(disc, transfer.server.getsockname()[1], 5)
        job_flows, pairs = map_job_flows(job, disc.flows(), disc.listeners())
    by_worker = {p.worker.name: p for p in pairs}
    assert set(by_worker) == {"worker:0", "worker:1", "worker:2"}

    ok = by_worker["worker:0"]
    assert ok.ok and ok.connections == 2 and ok.dscps == (26, 46) and ok.ps.name == "ps:0"
    assert by_worker["worker:1"].missing == ("bulk",) and by_worker["worker:1"].wrong == ()
    assert by_worker["worker:2"].wrong == (10,) and by_worker["worker:2"].missing == ("bulk",)
    assert "no flow for class 'bulk'" in by_worker["worker:1"].problems()

    # Both ends of each loopback connection are seen: the worker side as role worker, the PS side as ps.
    roles = sorted((jf.role, jf.peer_label, jf.class_name) for jf in job_flows if jf.peer_label == "ps:0")
    assert roles == [
        ("worker", "ps:0", "bulk"),
        ("worker", "ps:0", "dscp10"),
        ("worker", "ps:0", "urgent"),
        ("worker", "ps:0", "urgent"),
        ("worker", "ps:0", "urgent"),
    ]
    ps_side = sorted(jf.peer_label for jf in job_flows if jf.role == "ps")
    assert ps_side == ["worker:0", "worker:0", "worker:1", "worker:2", "worker:2"]


def test_a_pair_with_no_flows_is_reported_missing_everything(cluster: tuple) -> None:
    ns, _, spec = cluster
    spec = {**spec, "worker": [*spec["worker"], "127.0.0.9:4000"]}
    job = make_job("job-b", spec, default_classes())
    with FlowDiscovery(netns=ns) as disc:
        _, pairs = map_job_flows(job, disc.flows(), disc.listeners())
    lonely = next(p for p in pairs if p.worker.name == "worker:3")
    assert lonely.connections == 0 and lonely.missing == ("urgent", "bulk")


def test_flows_of_other_namespaces_are_not_seen(cluster: tuple) -> None:
    # The cluster's flows exist (fixture), but a discovery bound to another namespace sees none of them.
    with namespace("gff") as other, FlowDiscovery(netns=other) as disc:
        assert disc.flows() == []
        assert disc.listeners() == set()


def test_ipv4_mapped_addresses_are_normalised() -> None:
    assert normalize_address("::ffff:10.0.0.1") == "10.0.0.1"
    assert normalize_address("fe80::1") == "fe80::1"
    assert normalize_address("10.0.0.1") == "10.0.0.1"


def test_decoder_agrees_with_pyroute2s_diag_socket(cluster: tuple) -> None:
    """The struct decoder against pyroute2's generic one, on the same kernel dump of idle-state fields."""
    from pyroute2 import DiagSocket

    ns, transfer, _ = cluster
    transfer.stop_event.set()  # freeze the counters: both reads must see the same values
    time.sleep(0.3)
    with FlowDiscovery(netns=ns) as disc:
        ours = {(f.local_endpoint, f.peer_endpoint): f for f in disc.flows()}
    with inside(ns), DiagSocket() as ds:
        ds.bind()
        theirs = list(ds.get_sock_stats(family=socket.AF_INET, states=1 << 1, extensions=0b110010))
    assert len(theirs) == len(ours) == 10
    for msg in theirs:
        f = ours[((msg["idiag_src"], msg["idiag_sport"]), (msg["idiag_dst"], msg["idiag_dport"]))]
        info = msg.get_attr("INET_DIAG_INFO")
        assert f.dscp == int(msg.get_attr("INET_DIAG_TOS"), 16) >> 2
        assert f.inode == msg["idiag_inode"]
        assert (f.bytes_sent, f.bytes_acked, f.bytes_received) == (
            info["tcpi_bytes_sent"],
            info["tcpi_bytes_acked"],
            info["tcpi_bytes_received"],
        )
        assert f.retransmits == info["tcpi_total_retrans"]


def test_dump_parser_handles_errors_and_foreign_messages() -> None:
    req = diag_request(1 << 1, 0, socket.AF_INET, seq=7)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, kind, flags, seq) == (len(req), 20, 0x301, 7) and len(req) == 16 + 56

    def msg(kind: int, seq: int, body: bytes) -> bytes:
        return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body

    done = msg(NLMSG_DONE, 7, b"\0\0\0\0")
    assert parse_diag_dump(msg(NLMSG_DONE, 6, b"\0" * 4) + done, 7) == ([], True)  # another request's reply
    assert parse_diag_dump(b"", 7) == ([], False)
    error = msg(NLMSG_ERROR, 7, struct.pack("=i", -1) + b"\0" * 16)
    with pytest.raises(OSError, match="sock_diag: Operation not permitted"):
        parse_diag_dump(error, 7)
    with pytest.raises(OSError, match="sock_diag: truncated netlink message") as e:
        parse_diag_dump(struct.pack("=IHHII", 64, 20, 0, 7, 0), 7)  # claims 64 bytes, has 16
    assert e.value.errno == errno.EBADMSG
    with pytest.raises(OSError, match=r"sock_diag: truncated error message \(18 bytes\)") as e:
        parse_diag_dump(msg(NLMSG_ERROR, 7, b"\0\0"), 7)  # too short for the errno
    assert e.value.errno == errno.EBADMSG
    # An inet_diag_msg (72 bytes) whose one attribute claims more bytes than the message holds.
    bad_attribute = msg(20, 7, b"\0" * 72 + struct.pack("=HH", 64, 5) + b"\0" * 4)
    with pytest.raises(OSError, match=r"sock_diag: attribute 5 at 0: bad length 64") as e:
        parse_diag_dump(bad_attribute, 7)
    assert e.value.errno == errno.EBADMSG


def test_unknown_namespace_is_a_clear_error() -> None:
    with (
        FlowDiscovery(netns="gf-no-such-ns") as disc,
        pytest.raises(OSError, match="network namespace 'gf-no-such-ns'"),
    ):
        disc.flows()
