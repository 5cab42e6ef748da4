"""Ports for a local cluster: each task needs its gRPC port P and its data-plane port.

The data plane listens on the first free of its candidates P + offset, P + offset + 1009, ... and
consumers find it by trying them in order (native/rendezvous/README.md). Picking pairs whose first
candidate is free, as here, saves those tries; it is no longer needed for correctness."""

from __future__ import annotations

import socket


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port_pairs(count: int, offset: int, attempts: int = 200) -> list[int]:
    """`count` distinct free ports P whose data ports P + `offset` are free too and do not collide
    with any other chosen port. Raises RuntimeError when `attempts` picks find too few."""
    ports: list[int] = []
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        data = port + offset
        taken = set(ports) | {p + offset for p in ports}
        if 1024 < data < 65536 and port not in taken and data not in taken and _bindable(data):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"found only {len(ports)} of {count} free port pairs (offset {offset})")
