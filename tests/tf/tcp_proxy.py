"""A TCP proxy for test scripts that put one between a worker and the PS's data plane.

The scripts of test_transport.py, test_cancel.py and test_producer_abort.py run in their own TF process,
import this module (TESTS_TF on sys.path) and accept the worker's connections on the listener of
tf_cluster.proxy_listener, forwarding each to the PS's data port. What they need the proxy to do to the
bytes differs (cut a connection mid-tensor, pass the PS's answers on slowly, die by SIGKILL); the copying,
the accept loop and the teardown are alike and live here.

Run as a script (`python tcp_proxy.py LISTENER_FD UPSTREAM_PORT`, what serve_in_process does) it is a
proxy process of its own that prints "up" once it accepts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Tap = Callable[[bytes], None]

# The upstream (PS-side) sockets of this process's connections, and whether reset_upstreams ran.
_UPSTREAMS: list[socket.socket] = []
_RESET = threading.Event()


def reset_upstreams(*_: object) -> None:
    """Resets every upstream connection (the PS sees a reset, as when its consumer's host dies) and
    leaves the client side (the worker's) open until the process dies. A proxy killed outright
    closes both sides at once, and then which task notices first is a race. SIGUSR1 runs this in a
    proxy process of its own (serve_in_process)."""
    _RESET.set()
    for s in list(_UPSTREAMS):
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
            s.shutdown(socket.SHUT_RD)  # wakes the pump blocked in recv on it, which then closes it


def pump(
    src: socket.socket, dst: socket.socket, limit: int | None = None, rate: float = 0, tap: Tap | None = None
) -> None:
    """Copies what `src` sends to `dst` until `src` ends, either fails, or `limit` bytes have been passed
    on (the rest of that chunk is dropped: the cut falls wherever `limit` says, even mid-frame). `tap`
    sees each chunk as it arrives; with `rate`, the copy sleeps after each chunk so that it passes on
    about `rate` bytes/s. Then both sockets are shut down both ways: each peer sees its connection end
    at once, and the other direction's pump, blocked in recv on the same sockets, wakes (on Linux a
    close would not wake it, nor end the connection while that recv holds the socket)."""
    seen = 0
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if tap is not None:
                tap(data)
            if limit is not None and seen + len(data) >= limit:
                dst.sendall(data[: limit - seen])
                break
            seen += len(data)
            dst.sendall(data)
            if rate:
                time.sleep(len(data) / rate)
    except OSError:
        pass
    if _RESET.is_set():  # reset_upstreams: only the upstream side goes, with a reset
        for s in (src, dst):
            if s in _UPSTREAMS:
                s.close()
        return
    for s in (src, dst):
        with contextlib.suppress(OSError):  # the peer may have gone already
            s.shutdown(socket.SHUT_RDWR)


def serve(
    listener: socket.socket,
    upstream_port: int,
    cut_first_after: int | None = None,
    rate: float = 0,
    tap: Callable[[], Tap] | None = None,
) -> None:
    """Forever: accepts a connection on `listener`, connects to 127.0.0.1:`upstream_port` and pumps both
    ways, each on a daemon thread. Upstream's bytes (the PS's answers) are passed on at `rate` bytes/s
    when given, and the first connection's are cut after `cut_first_after` bytes (later connections
    are not cut). `tap()`, when given, makes for each connection a callback that sees every chunk the
    client (the worker) sends."""
    first = True
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
        _UPSTREAMS.append(upstream)
        limit = cut_first_after if first else None
        first = False
        up = {"tap": tap() if tap is not None else None}
        threading.Thread(target=pump, args=(client, upstream), kwargs=up, daemon=True).start()
        down = {"limit": limit, "rate": rate}
        threading.Thread(target=pump, args=(upstream, client), kwargs=down, daemon=True).start()


def serve_in_background(listener: socket.socket, upstream_port: int, **options: Any) -> None:
    """serve(listener, upstream_port, **options) on a daemon thread of this process."""
    threading.Thread(target=serve, args=(listener, upstream_port), kwargs=options, daemon=True).start()


def serve_in_process(listener: socket.socket, upstream_port: int) -> subprocess.Popen[str]:
    """serve() (no cut, no rate) in a process of its own, so that a test can kill it by PID: its peers
    then see their connections go as when a host or process dies, with no goodbye from the proxy. It
    accepts on `listener` (passed to it, still open here), so another one can take over the same port
    after it is killed. SIGUSR1 makes it reset its upstream connections only (reset_upstreams).
    Returns once it is up (it has said so on its stdout)."""
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(listener.fileno()), str(upstream_port)],
        pass_fds=[listener.fileno()],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, reset_upstreams)
    listening = socket.socket(fileno=int(sys.argv[1]))
    print("up", flush=True)
    serve(listening, int(sys.argv[2]))
