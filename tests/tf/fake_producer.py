"""A hand-written data-plane producer for test scripts that put one at the PS's data port.

The scripts of test_frame_reader.py and test_error_payloads.py run in their own TF process, import this
module (TESTS_TF on sys.path) and answer each request with the bytes their case needs. What every such
producer does alike lives here: the wire constants (native/rendezvous/README.md "Transport protocol"),
the hello/ack exchange, reading one request, sending a byte at a time, and the accept loop.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

HELLO, ACK, RESPONSE, CHUNK, REQUEST = 0x48595247, 0x41595247, 0x53595247, 0x43595247, 0x51595247
PS_TASK = "/job:ps/replica:0/task:0"


def read_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def accept_hello(conn: socket.socket) -> None:
    """Reads the consumer's hello (u32 magic, u16 version, u16 class, u16 n, task, u16 m, target) and
    acks as the PS: the consumer must be asking for the PS task, as the worker's data plane does."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _magic, _version, _cls, n = struct.unpack("<IHHH", read_exact(conn, 10))
    read_exact(conn, n)
    m = struct.unpack("<H", read_exact(conn, 2))[0]
    assert read_exact(conn, m).decode() == PS_TASK
    conn.sendall(struct.pack("<IH", ACK, len(PS_TASK)) + PS_TASK.encode())


def read_request(conn: socket.socket) -> tuple[int, str]:
    """One request (u32 magic, u64 id, i64 step, i32 rank, u32 n, key): its id and rendezvous key."""
    magic, request_id, _step, _rank, n = struct.unpack("<IQqiI", read_exact(conn, 28))
    assert magic == REQUEST
    return request_id, read_exact(conn, n).decode()


def trickle(conn: socket.socket, data: bytes, pause: float) -> None:
    """Sends `data` a byte at a time, `pause` seconds apart: every field of a frame crosses the
    consumer's refills."""
    for byte in data:
        conn.sendall(bytes([byte]))
        time.sleep(pause)


def serve_in_background(listener: socket.socket, answer_requests: Callable[[socket.socket], None]) -> None:
    """Accepts connections on `listener` for the life of the (daemon) thread, each on a thread of its
    own: the hello is acked, then `answer_requests(conn)` reads requests and answers them until the
    consumer goes (EOFError, OSError) or it returns; the connection is closed then."""

    def serve(conn: socket.socket) -> None:
        try:
            accept_hello(conn)
            answer_requests(conn)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def assert_flow_refused(case: str, outcome: object, words: str) -> None:
    """For the tests reading a script's outcomes: the step of `case` failed Unavailable, its own message
    (not an earlier case's, which TF appends as recent logs) naming the flow and `words`."""
    assert isinstance(outcome, dict) and outcome["error"] == "UnavailableError", (case, outcome)
    own = outcome["message"].split("Recent warning and error logs")[0]
    assert "Geryon data plane: flow to /job:ps/replica:0/task:0" in own, (case, outcome)
    assert words in own, (case, outcome)
