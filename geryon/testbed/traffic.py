"""Measured TCP transfers between testbed hosts: `sink` receives, `send` sends a known number of
bytes with a DSCP and reports when the sink has all of them (the flow completion time).

    python -m geryon.testbed.traffic sink --port 5001 [--timeout 60]
    python -m geryon.testbed.traffic send --to 10.77.0.1:5001 --bytes 2000000 --dscp 46 [--cc cubic]
        -> {"bytes": ..., "seconds": ..., "mbit_s": ..., "dscp": ...}   (one JSON line on stdout)
    python -m geryon.testbed.traffic bulk --to 10.77.0.3:5001 --rate-bits 50000000 --dscp 8 --seconds 600
        -> background traffic: a paced stream until --seconds or SIGTERM, then the same JSON line

Run each inside a host with Testbed.popen. The sender marks its socket (IP_TOS) before connect(), so
with net.ipv4.tcp_reflect_tos the sink's replies carry the same DSCP. Each transfer is an 8-byte
length, the payload, then a 1-byte acknowledgment from the sink once it has every byte. Every loop is
bounded by --timeout.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

CHUNK = 64 * 1024


def _connect_retrying(s: socket.socket, host: str, port: int, deadline: float) -> None:
    """Connects, retrying refused connects until `deadline` (monotonic): the sink may still be starting."""
    for _ in range(100):
        try:
            s.connect((host, port))
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    s.connect((host, port))  # the last try raises what refuses it


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed early")
        buf += part
    return buf


def _serve(conn: socket.socket, deadline: float) -> None:
    with conn:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            (total,) = struct.unpack("!Q", _recv_exact(conn, 8))
            got = 0
            while got < total and time.monotonic() < deadline:
                part = conn.recv(min(CHUNK, total - got))
                if not part:
                    return
                got += len(part)
            if got == total:
                conn.sendall(b"k")
        except OSError:
            return


def sink(host: str, port: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((host, port))
        srv.listen(64)
        print(json.dumps({"listening": f"{host}:{port}"}), flush=True)
        while time.monotonic() < deadline:
            srv.settimeout(max(0.05, min(0.5, deadline - time.monotonic())))
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=_serve, args=(conn, deadline), daemon=True).start()
    return 0


def send_counted(s: socket.socket, nbytes: int, deadline: float, timeout: float) -> None:
    """The sink's protocol on a connected socket: the length, `nbytes` zero bytes, then the sink's
    acknowledgement. Bounded by CLOCK_MONOTONIC `deadline` (`timeout` names it in the error), so a
    stalled path fails the transfer instead of hanging it."""
    s.sendall(struct.pack("!Q", nbytes))
    chunk = b"\0" * CHUNK
    left = nbytes
    while left > 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"sent {nbytes - left} of {nbytes} bytes in {timeout} s")
        left -= s.send(chunk[: min(CHUNK, left)])
    if s.recv(1) != b"k":
        raise ConnectionError("the sink did not acknowledge the transfer")


def send(to: str, nbytes: int, dscp: int, cc: str | None, timeout: float) -> dict[str, float | int]:
    host, port = to.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        if cc:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.settimeout(timeout)
        deadline = time.monotonic() + timeout
        _connect_retrying(s, host, int(port), deadline)
        start = time.monotonic()
        send_counted(s, nbytes, deadline, timeout)
        seconds = time.monotonic() - start
    return {"bytes": nbytes, "seconds": seconds, "mbit_s": nbytes * 8 / seconds / 1e6, "dscp": dscp}


BULK_TOTAL = 1 << 62  # the length a bulk stream announces: the sink reads until the sender closes
PACE_S = 0.01  # the pacing step: 10 ms of the rate per send


def next_due(due: float, now: float, step_s: float) -> float:
    """When the pace step starting now is due to end: `step_s` after the previous one's due time, so a
    late wake-up (sleep overshoot) is made up and the rate holds, but never more than one step behind
    `now`: when the sender fell further behind (its port was congested), the time lost stays lost. A
    schedule kept from the start instead sent the missed bytes unpaced once the port freed up (measured
    116-118 Mbit/s on an idle port against 100 nominal): the background burst above its rate right
    after the pulls. Now any window of the send carries at most its rate plus one step."""
    return max(due, now - step_s) + step_s


def bulk(to: str, rate_bits: int, dscp: int, seconds: float, cc: str | None = None) -> dict[str, float | int]:
    """Sends at `rate_bits` (paced in PACE_S steps, so the background never exceeds its rate, next_due) for
    `seconds` or until SIGTERM; returns what it sent. Background traffic: a checkpoint or storage
    transfer, or another job, sharing the links (issue 14 item 5)."""
    import signal

    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    host, port = to.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sent = 0
    with s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        if cc:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.settimeout(5.0)
        deadline = time.monotonic() + seconds
        _connect_retrying(s, host, int(port), deadline)
        start = time.monotonic()
        s.sendall(struct.pack("!Q", BULK_TOTAL))
        step = max(1, int(rate_bits / 8 * PACE_S))
        chunk = b"\0" * CHUNK
        due = start
        while not stopped and time.monotonic() < deadline:
            due = next_due(due, time.monotonic(), step * 8 / rate_bits)
            left = step
            while left > 0 and not stopped:
                try:
                    left -= s.send(chunk[: min(CHUNK, left)])
                except TimeoutError:
                    continue  # the port is congested: keep trying until told to stop
                except InterruptedError:
                    break
            sent += step - left
            pause = due - time.monotonic()
            if pause > 0 and not stopped:
                time.sleep(pause)
        elapsed = time.monotonic() - start
    return {
        "bytes": sent,
        "seconds": elapsed,
        "mbit_s": sent * 8 / elapsed / 1e6 if elapsed else 0.0,
        "dscp": dscp,
    }


# -- driving it from a Testbed -----------------------------------------------------------------

PORT = 5001


def start_sink(tb: Any, host: str, port: int = PORT, timeout: float = 60) -> subprocess.Popen[str]:
    """A sink in `host` (a Testbed process, killed by its down()); returns once it listens."""
    argv = [sys.executable, "-m", "geryon.testbed.traffic", "sink", "--port", str(port)]
    p: subprocess.Popen[str] = tb.popen(
        host, [*argv, "--timeout", str(timeout)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if "listening" not in line:
        p.kill()
        raise RuntimeError(f"the sink in {host} did not start (exit {p.wait()})")
    return p


def start_send(
    tb: Any, src: str, dst: str, nbytes: int, dscp: int, cc: str | None = None, timeout: float = 60
) -> subprocess.Popen[str]:
    """A transfer of `nbytes` from `src` to the sink in `dst`; read its result with result()."""
    argv = [sys.executable, "-m", "geryon.testbed.traffic", "send", "--to", f"{tb.address(dst)}:{PORT}"]
    argv += ["--bytes", str(nbytes), "--dscp", str(dscp), "--timeout", str(timeout)]
    if cc:
        argv += ["--cc", cc]
    p: subprocess.Popen[str] = tb.popen(src, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p


def result(p: subprocess.Popen[str], timeout: float = 90) -> dict[str, Any]:
    """The JSON line a `send` printed: bytes, seconds (completion time), mbit_s, dscp."""
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"transfer failed (exit {p.returncode}): {err.strip()[-500:]}")
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return data


def start_bulk(
    tb: Any, src: str, dst: str, rate_bits: int, dscp: int, seconds: float, port: int = PORT
) -> subprocess.Popen[str]:
    """Background traffic from `src` to the sink in `dst` (start_sink first); stop it with stop_bulk()."""
    argv = [sys.executable, "-m", "geryon.testbed.traffic", "bulk", "--to", f"{tb.address(dst)}:{port}"]
    argv += ["--rate-bits", str(rate_bits), "--dscp", str(dscp), "--seconds", str(seconds)]
    p: subprocess.Popen[str] = tb.popen(src, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p


def stop_bulk(p: subprocess.Popen[str], timeout: float = 10) -> dict[str, Any]:
    """SIGTERM, then its JSON line (bytes, seconds, mbit_s); SIGKILL if it does not answer in time."""
    import signal

    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return {"error": f"did not stop within {timeout} s of SIGTERM; killed"}
    lines = out.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}: {err.strip()[-300:]}"}
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m geryon.testbed.traffic", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, default=5001)
    s.add_argument("--timeout", type=float, default=60)
    t = sub.add_parser("send")
    t.add_argument("--to", required=True, metavar="ADDR:PORT")
    t.add_argument("--bytes", type=int, required=True)
    t.add_argument("--dscp", type=int, default=0, choices=range(64), metavar="0-63")
    t.add_argument("--cc", default=None, help="TCP congestion control for this socket (e.g. cubic)")
    t.add_argument("--timeout", type=float, default=60)
    b = sub.add_parser("bulk", help="paced background traffic until --seconds or SIGTERM")
    b.add_argument("--to", required=True, metavar="ADDR:PORT")
    b.add_argument("--rate-bits", type=int, required=True, help="bits per second, at least 1000")
    b.add_argument("--dscp", type=int, default=8, choices=range(64), metavar="0-63")
    b.add_argument("--seconds", type=float, default=600)
    b.add_argument("--cc", default=None)
    args = p.parse_args(argv)
    if args.cmd == "bulk":
        if args.rate_bits < 1000:
            p.error(f"argument --rate-bits: {args.rate_bits}: expected at least 1000 bits/s")
        if not 0 < args.seconds <= 86400:
            p.error(f"argument --seconds: {args.seconds}: expected a duration in (0, 86400]")
        print(json.dumps(bulk(args.to, args.rate_bits, args.dscp, args.seconds, args.cc)), flush=True)
        return 0
    if args.cmd == "sink":
        return sink(args.host, args.port, args.timeout)
    print(json.dumps(send(args.to, args.bytes, args.dscp, args.cc, args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
