"""Loopback packets as they leave (AF_PACKET on `lo`, root): bytes per flow and DSCP, and optionally
when each packet left, for tests of what the data plane puts on the wire (test_dataplane.py,
test_band_follow.py)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class LoopbackCapture:
    """TCP payload bytes per (source port, destination port, DSCP) seen leaving on `lo`; with
    `timeline`, also every payload packet as (time.monotonic(), source port, destination port, DSCP,
    payload bytes), in arrival order."""

    def __init__(self, timeline: bool = False) -> None:
        self.bytes: dict[tuple[int, int, int], int] = defaultdict(int)
        self.packets: list[tuple[float, int, int, int, int]] | None = [] if timeline else None
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        self._sock.bind(("lo", 0))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        buf = bytearray(1 << 18)
        while not self._stop.is_set():
            try:
                n, addr = self._sock.recvfrom_into(buf)
            except TimeoutError:
                continue
            if addr[2] != PACKET_OUTGOING or n < 14 + 20 + 20:
                continue  # loopback shows each packet twice: count it once, as it leaves
            if struct.unpack_from("!H", buf, 12)[0] != 0x0800:
                continue
            ip = 14
            ihl = (buf[ip] & 0x0F) * 4
            if buf[ip + 9] != socket.IPPROTO_TCP:
                continue
            total = struct.unpack_from("!H", buf, ip + 2)[0]
            tcp = ip + ihl
            sport, dport = struct.unpack_from("!HH", buf, tcp)
            payload = total - ihl - (buf[tcp + 12] >> 4) * 4
            if payload > 0:
                dscp = buf[ip + 1] >> 2
                self.bytes[(sport, dport, dscp)] += payload
                if self.packets is not None:
                    self.packets.append((time.monotonic(), sport, dport, dscp, payload))

    @contextmanager
    def running(self) -> Iterator[LoopbackCapture]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=5)
            self._sock.close()

    def by_dscp(self, sport: int | None = None, dport: int | None = None) -> dict[int, int]:
        out: dict[int, int] = defaultdict(int)
        for (s, d, dscp), n in self.bytes.items():
            if (sport is None or s == sport) and (dport is None or d == dport):
                out[dscp] += n
        return dict(out)
