"""TF's own gRPC connections carry the job's class 0 marks (geryon.tf.control_marks), on real sockets.

No TensorFlow: loopback TCP connections stand in for gRPC's (a listener at a "cluster address" and a
client connected to it); the marker finds them in this process' /proc tables and descriptors, as it
does in a task, and the kernel's getsockopt says what they carry. The band-following TF test
(tests/tf/test_band_follow.py) checks the same on the wire with real tasks.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from geryon.tf.control_marks import (
    ControlMarker,
    TcpEntry,
    cluster_endpoints,
    parse_proc_net_tcp,
    to_mark,
)


@contextmanager
def connection() -> Iterator[tuple[socket.socket, socket.socket, socket.socket]]:
    """(listener, client, accepted) on 127.0.0.1."""
    with ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = stack.enter_context(socket.create_connection(listener.getsockname()))
        accepted, _ = listener.accept()
        stack.enter_context(accepted)
        yield listener, client, accepted


def marks(sock: socket.socket) -> tuple[int, int]:
    tos = sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)
    return tos >> 2, sock.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY)


def test_the_kernels_tables_parse_to_this_process_connections() -> None:
    with connection() as (listener, client, _accepted):
        with open("/proc/self/net/tcp") as f:
            entries = parse_proc_net_tcp(f.read(), socket.AF_INET)
        port = listener.getsockname()[1]
        by_local = {e.local: e for e in entries}
        assert by_local[("127.0.0.1", port)].remote in {("0.0.0.0", 0), client.getsockname()}
        assert any(e.local == client.getsockname() and e.remote == ("127.0.0.1", port) for e in entries)


def test_both_ends_of_a_cluster_connection_are_marked_and_others_left_alone() -> None:
    with connection() as (listener, client, accepted), connection() as (_, other_client, other_accepted):
        marker = ControlMarker([f"127.0.0.1:{listener.getsockname()[1]}"], 46, 6)
        # The listener (bound to the cluster address itself), the client's socket and the accepted one.
        assert marker.mark_once() == 3
        assert marks(client) == (46, 6) and marks(accepted) == (46, 6) and marks(listener) == (46, 6)
        assert marks(other_client) == (0, 0) and marks(other_accepted) == (0, 0)
        assert marker.mark_once() == 0  # nothing new: no setsockopt again

        # A band change: the open connections take the new marks, and one opened later too.
        assert marker.set_marks(26, 4) == 3
        assert marks(client) == (26, 4) and marks(accepted) == (26, 4)
        late = socket.create_connection(listener.getsockname())
        late_accepted, _ = listener.accept()
        with late, late_accepted:
            assert marker.mark_once() == 2
            assert marks(late) == (26, 4) and marks(late_accepted) == (26, 4)


def test_the_thread_marks_connections_opened_after_it_started() -> None:
    with connection() as (listener, client, accepted):
        marker = ControlMarker([f"localhost:{listener.getsockname()[1]}"], 34, 4, interval=0.05).start()
        try:
            deadline = 200
            while marks(client) != (34, 4) and deadline:
                deadline -= 1
                marker._stop.wait(0.01)
            assert marks(client) == (34, 4) and marks(accepted) == (34, 4)
        finally:
            marker.stop()
        assert marker._thread is None


def test_endpoints_resolve_names_and_skip_what_is_not_an_address() -> None:
    resolve = {"ps0": ["10.0.0.1"], "v6": ["fd00::1"]}
    got = cluster_endpoints(["ps0:2222", "[v6]:2223", "no-port", "ps0:x"], resolve=lambda h, p: resolve[h])
    assert got == {("10.0.0.1", 2222), ("::ffff:10.0.0.1", 2222), ("fd00::1", 2223)}

    def fails(host: str, port: int) -> list[str]:
        raise socket.gaierror("no such host")

    assert cluster_endpoints(["gone:1"], resolve=fails) == frozenset()


def test_a_wildcard_listener_is_not_marked_its_connections_are() -> None:
    ep = frozenset({("10.0.0.1", 2222)})
    listener = TcpEntry(1, socket.AF_INET, ("0.0.0.0", 2222), ("0.0.0.0", 0))
    accepted = TcpEntry(2, socket.AF_INET, ("10.0.0.1", 2222), ("10.0.0.2", 40000))
    client = TcpEntry(3, socket.AF_INET, ("10.0.0.2", 40001), ("10.0.0.1", 2222))
    data = TcpEntry(4, socket.AF_INET, ("10.0.0.2", 40002), ("10.0.0.1", 3222))  # the data plane's port
    assert [e.inode for e in to_mark([listener, accepted, client, data], ep)] == [2, 3]


@pytest.mark.parametrize(
    "row",
    ["", "   0: garbage", "   0: 0100007F:ZZZZ 00000000:0000 0A 0:0 00:0 0 0 0 12345 1"],
)
def test_malformed_rows_are_skipped(row: str) -> None:
    assert parse_proc_net_tcp("header\n" + row, socket.AF_INET) == []


def test_ipv6_rows_parse() -> None:
    # A row as the kernel prints ::1 port 8080 listening (tcp6_seq_show: four host-order words).
    row = (
        "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 "
        "0A 00000000:00000000 00:00000000 00000000     0        0 4242 1"
    )
    [entry] = parse_proc_net_tcp("header\n" + row, socket.AF_INET6)
    assert entry == TcpEntry(4242, socket.AF_INET6, ("::1", 8080), ("::", 0))
