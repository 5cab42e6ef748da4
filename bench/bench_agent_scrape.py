"""Agent scrape benchmark: how long one Prometheus scrape of the host agent takes with 64 live flows
(the issue's target: under 50 ms), measured over HTTP against the real metrics endpoint.

    sudo .venv/bin/python bench/bench_agent_scrape.py [--flows 64] [--repeats 30] [--out FILE]

Builds two network namespaces joined by a veth with the Geryon egress layout (HTB root 1:, classes
1:10/1:11, bfifo leaves, u32 on DSCP) on the workers' side, where the agent's services run. Workers (one
address each) open one urgent (DSCP 46) and one bulk (DSCP 26) connection to a PS in the other namespace and
keep sending a little. Rows: no job registered, the job registered (every flow mapped to its pair), and the
same with the flow-series cap below the number of label sets. A second table times the status page's
/status.json (the page polls it every second) on the same endpoint, interleaved with /metrics scrapes.
Medians over repeats taken side by side in one run; the machine is shared, so compare ratios, not
absolutes. Prints the tables, writes JSON (default out/bench/agent_scrape.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute, netns

from geryon.agent.config import AgentConfig, parse_config
from geryon.agent.jobs import make_job
from geryon.agent.service import start_services
from geryon.progress import Progress

IFNAME = "gbeth0"
PEER = "gbeth1"


class View:
    def __init__(self) -> None:
        self.cfg = parse_config({"interfaces": [IFNAME]})

    def config(self) -> AgentConfig:
        return self.cfg

    def drift(self) -> list[str]:
        return []

    def last_apply(self) -> float | None:
        return time.time()

    def peer(self) -> None:
        return None  # no switch check here


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    netns.pushns(ns)
    try:
        yield
    finally:
        netns.popns()


@contextlib.contextmanager
def testbed(workers: int) -> Iterator[tuple[str, str]]:
    """Namespaces a (workers, agent) and b (PS), veth between them, HTB layout on a's side."""
    tag = f"{os.getpid() % 100000}"
    a, b = f"gbsa{tag}", f"gbsb{tag}"
    netns.create(a)
    try:
        netns.create(b)
        try:
            with IPRoute(netns=a) as ipr:
                fd = os.open(f"/run/netns/{b}", os.O_RDONLY)
                try:
                    ipr.link("add", ifname=IFNAME, kind="veth", peer={"ifname": PEER, "net_ns_fd": fd})
                finally:
                    os.close(fd)
                idx = ipr.link_lookup(ifname=IFNAME)[0]
                for i in range(workers):
                    ipr.addr("add", index=idx, address=f"10.78.1.{10 + i}", prefixlen=16)
                ipr.link("set", index=idx, state="up")
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
                ipr.tc("add", "htb", index=idx, handle=0x10000, default=0x11)
                ipr.tc(
                    "add-class", "htb", index=idx, handle=0x10001, parent=0x10000, rate="1gbit", ceil="1gbit"
                )
                for c, dscp in enumerate((46, 26)):
                    minor = 0x10 + c
                    ipr.tc(
                        "add-class", "htb", index=idx, handle=0x10000 | minor, parent=0x10001,
                        rate="8kbit", ceil="1gbit", burst=64 << 10, cburst=64 << 10, prio=c,
                    )  # fmt: skip
                    subprocess.run(
                        ["ip", "netns", "exec", a, "tc", "qdisc", "add", "dev", IFNAME, "parent",
                         f"1:{minor:x}", "handle", f"{minor:x}:", "bfifo", "limit", str(4 << 20)],
                        check=True, capture_output=True,
                    )  # fmt: skip
                    ipr.tc(
                        "add-filter", "u32", index=idx, parent=0x10000, prio=1 + c, protocol=0x0800,
                        target=0x10000 | minor, keys=[f"0x{dscp << 18:08x}/0x00fc0000+0"],
                    )  # fmt: skip
            with IPRoute(netns=b) as ipr:
                idx = ipr.link_lookup(ifname=PEER)[0]
                ipr.addr("add", index=idx, address="10.78.0.1", prefixlen=16)
                ipr.link("set", index=idx, state="up")
            yield a, b
        finally:
            netns.remove(b)
    finally:
        netns.remove(a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=64, help="connections (two per worker: urgent and bulk)")
    ap.add_argument("--repeats", type=int, default=30, help="scrapes per row (median reported)")
    ap.add_argument("--out", default="out/bench/agent_scrape.json")
    args = ap.parse_args()
    if args.flows < 2 or args.flows % 2 or args.flows > 400:
        ap.error("--flows must be an even number from 2 to 400")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")
    progress = Progress("bench_agent_scrape")
    workers = args.flows // 2
    stop = threading.Event()
    socks: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def keep_sending(s: socket.socket) -> None:
        deadline = time.monotonic() + 600
        with contextlib.suppress(OSError):
            while not stop.is_set() and time.monotonic() < deadline:
                s.sendall(b"\0" * 4096)
                time.sleep(0.01)

    def drain(s: socket.socket) -> None:
        s.settimeout(0.5)
        deadline = time.monotonic() + 600
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                if not s.recv(1 << 16):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    rows: list[dict[str, Any]] = []
    status_rows: list[dict[str, Any]] = []
    with progress.step(f"namespaces, HTB layout and {args.flows} flows"), contextlib.ExitStack() as stack:
        a, b = stack.enter_context(testbed(workers))
        with inside(b):
            ps = socket.socket()
            ps.bind(("10.78.0.1", 0))
            ps.listen(512)
        socks.append(ps)
        listeners = []
        with inside(a):
            for i in range(workers):
                w = socket.socket()
                w.bind((f"10.78.1.{10 + i}", 0))
                w.listen(8)
                listeners.append(w)
                for dscp in (46, 26):
                    c = socket.socket()
                    c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
                    c.bind((f"10.78.1.{10 + i}", 0))
                    c.connect(ps.getsockname())
                    socks.append(c)
        socks += listeners
        ps.settimeout(10)
        for s in socks[1 : 1 + args.flows]:
            conn, _ = ps.accept()
            socks.append(conn)
            threads += [threading.Thread(target=drain, args=(conn,), daemon=True)]
            threads += [threading.Thread(target=keep_sending, args=(s,), daemon=True)]
        for t in threads:
            t.start()

        cluster = {
            "ps": [f"10.78.0.1:{ps.getsockname()[1]}"],
            "worker": [f"10.78.1.{10 + i}:{w.getsockname()[1]}" for i, w in enumerate(listeners)],
        }
        view = View()
        try:
            for name, register, cap in [
                ("no job registered", False, None),
                (f"1 job, {args.flows} flows", True, None),
                (f"1 job, {args.flows} flows, cap 16 series", True, 16),
            ]:
                svc = start_services(
                    view, api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", 0),
                    netns=a, max_flow_series=cap,
                )  # fmt: skip
                try:
                    if register:
                        svc.jobs.register(make_job("bench", cluster, view.cfg.classes))
                    assert svc.metrics_addr is not None
                    base = f"http://127.0.0.1:{svc.metrics_addr[1]}"
                    with progress.step(f"{name}: {args.repeats} scrapes"):
                        rows.append(measure(name, f"{base}/metrics", args.repeats))
                    with progress.step(f"{name}: {args.repeats} /status.json, interleaved with /metrics"):
                        status_rows.append(measure_status(name, base, args.repeats))
                finally:
                    svc.stop()
        finally:
            stop.set()
            for s in socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            for t in threads:
                t.join(timeout=5)
            for s in socks:
                s.close()

    print_table(rows)
    print("(medians, milliseconds; target: one scrape under 50 ms)", file=sys.stderr)
    print()
    print_table(status_rows)
    print("(medians, milliseconds; the status page polls /status.json once a second)", file=sys.stderr)
    payload = {
        "benchmark": "agent_scrape",
        "flows": args.flows,
        "repeats": args.repeats,
        "target_ms": 50,
        "rows": rows,
        "status_rows": status_rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"JSON: {out}")
    return 0


def measure(name: str, url: str, repeats: int) -> dict[str, Any]:
    urllib.request.urlopen(url, timeout=10).read()  # warm-up: opens the agent's netlink sockets
    http, own, sections = [], [], {}
    flow_series = 0
    for _ in range(repeats):
        start = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        http.append(time.perf_counter() - start)
        for line in body.splitlines():
            if line.startswith("geryon_scrape_duration_seconds "):
                own.append(float(line.split()[1]))
            elif line.startswith("geryon_scrape_section_duration_seconds{"):
                section = line.split('"')[1]
                sections.setdefault(section, []).append(float(line.split()[1]))
        flow_series = sum(1 for line in body.splitlines() if line.startswith("geryon_flow_connections{"))
    return {
        "case": name,
        "http_ms": statistics.median(http) * 1000,
        "collect_ms": statistics.median(own) * 1000,
        **{f"{k}_ms": statistics.median(v) * 1000 for k, v in sorted(sections.items())},
        "flow_series": flow_series,
        "bytes": len(body),
    }


def measure_status(name: str, base: str, repeats: int) -> dict[str, Any]:
    """/status.json and /metrics alternately: the page's cost beside a scrape's, in the same conditions."""
    urllib.request.urlopen(f"{base}/status.json", timeout=10).read()
    status, metrics = [], []
    doc: dict[str, Any] = {}
    body = b""
    for _ in range(repeats):
        start = time.perf_counter()
        body = urllib.request.urlopen(f"{base}/status.json", timeout=10).read()
        status.append(time.perf_counter() - start)
        start = time.perf_counter()
        urllib.request.urlopen(f"{base}/metrics", timeout=10).read()
        metrics.append(time.perf_counter() - start)
        doc = json.loads(body)
    flows = sum(len(p.get("flows") or []) for j in doc.get("jobs") or [] for p in j.get("pairs") or [])
    return {
        "case": name,
        "status_json_ms": statistics.median(status) * 1000,
        "metrics_ms": statistics.median(metrics) * 1000,
        "ratio": statistics.median(status) / statistics.median(metrics),
        "flows_shown": flows,
        "bytes": len(body),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    keys = [k for k in rows[0] if k != "case"]
    header = ["case", *keys]
    cells = [
        [r["case"], *(f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys)] for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
