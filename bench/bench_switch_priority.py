"""How strict the testbed switch's priority is: bulk TCP in two DSCP classes into one switch port.

    .venv/bin/python bench/bench_switch_priority.py [--repeats 5] [--switch priority|fifo|both]
                                                    [--placement separate|mixed] [--rate 200000000]
                                                    [--buffer 262144] [--seconds 2.0]
                                                    [--out out/bench/switch_priority.json]

The simulator serves a port's classes in strict priority: while the urgent class has bytes queued the
other gets nothing, and a newly backlogged urgent class takes the whole port at once. The testbed's
switch is HTB (geryon.fabric.render.linux: classes at 8 kbit guaranteed, ceil = the link, HTB prio 0
and 1, burst/cburst of the spec, quantum 6056), where `prio` orders borrowing from the parent; how
strict that is on a real port (TCP senders, the 8 kbit guarantees, bursts) is measured here, on a
testbed of the demo's own switch config (geryon.demo.defaults: link rate, queue size, host queues and
2-class intent): hosts ps0, ps1, worker0 and worker1. worker0 sends class 0 (DSCP 46, the urgent class),
worker1 class 1 (DSCP 26), both to one sink in ps0, so the switch port toward ps0 is where the two
classes meet (each worker's NIC runs at the port's rate: the port is offered twice its rate, and
nothing else orders the classes). `--placement mixed` instead has each worker send both classes
(4 connections), as the demo's workers push: each worker's host queues order them before the switch
port does. Every sender is unpaced bulk TCP with the namespaces' default congestion control,
as gRPC's sockets get it. Per repeat, on each switch mode (order rotated):

  both       both classes start at once and send for --seconds: each class's share of what the port
             delivered after the first 0.25 s (TCP start-up), and the port's goodput over its payload
             rate (predict.PAYLOAD_FRACTION of the link). Strict priority: class 0 ~100%.
  takeover   class 1 sends alone for 1 s (its queue full), then class 0 starts and both send for
             --seconds: the time from class 0's first send until it has >= 90% of what the port
             delivers (since it started, at most the last 10 ms), class 0's delivered rate in its
             first 10/50/100 ms (over the port's payload rate), and class 1's share after 100 ms.
  reverse    what strict priority does to the ACKs of the class it defers (the simulator has no ACKs):
             class 1 from worker0 to ps0 alone for 1 s, then class 0 from ps1 and worker1 fills the
             port toward worker0 (as two PSes' pulls do), which class 1's ACKs cross in class 1
             (tcp_reflect_tos gives them the sender's DSCP): class 1's goodput before and 100 ms
             after, over the port's payload rate, and the ratio. (Independent of --placement.)

What the port delivers is counted where the application receives it: the sink in ps0 adds the bytes
of each recv() to its class's 1 ms bin (CLOCK_MONOTONIC, one clock for every namespace). That works
alike on both switch modes (the fifo port has one queue, so its HTB counters cannot split the classes),
and it is what a PS's gRPC server gets. On the priority switch the port's per-class HTB counters over
each run are recorded too (bytes and drops, `port` in the JSON), a cross-check of the shares. The
fifo switch is the reference: one queue, no priority. Medians over repeats, 95% bootstrap intervals.

Needs root (network namespaces); traffic stays inside the namespaces it makes, the testbed is taken
down at the end. Prints a table, writes JSON (default out/bench/switch_priority.json). Measured strict
(bench/README.md, "Switch priority"), so the simulator's strict model stands and no knob reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import on_testbeds, print_table, write_json

DEMO_RATE = 200_000_000  # geryon.demo.defaults.SHAPE["rate_bits"]
DEMO_BUFFER = 256 * 1024  # geryon.demo.defaults.DEFAULTS["buffer_bytes"]
PAYLOAD_FRACTION = 1448 / 1514  # geryon.demo.predict.PAYLOAD_FRACTION: TCP payload of a full frame
HOSTS = ("ps0", "ps1", "worker0", "worker1")
# Class index -> DSCP: geryon.demo.defaults.class_dscp(2), as the data plane marks the demo's 2 classes.
CLASS_DSCP = (46, 26)
# (sending host, class) per sender. separate: one class per worker, so only the switch port orders
# them. mixed: each worker sends both classes, as the demo's workers push (one connection per class):
# each worker's host queues (the agent's HTB classes) order them first, then the switch port.
PLACEMENTS: dict[str, tuple[tuple[str, int], ...]] = {
    "separate": (("worker0", 0), ("worker1", 1)),
    "mixed": (("worker0", 0), ("worker0", 1), ("worker1", 0), ("worker1", 1)),
}
PORT = 5002
BIN_S = 0.001  # the sink's bins
WARM_S = 0.25  # `both`: TCP start-up left out of the shares
ALONE_S = 1.0  # `takeover`: class 1 alone before class 0 starts
WINDOWS_S = (0.010, 0.050, 0.100)  # class 0's first windows after it starts
TAKEOVER_SHARE = 0.9
TAKEOVER_WINDOW_S = 0.010  # the trailing window a share is taken over
START_LEAD_S = 1.5  # processes are started this long before their start time: Python's start-up
SCENARIOS = ("both", "takeover", "reverse")


# --- the processes inside the namespaces ------------------------------------------------------------
def sink(port: int, t0: float, seconds: float, conns: int, timeout: float) -> dict[str, Any]:
    """Accepts `conns` connections (each names its class in its first byte), reads them until they
    close, and returns each class's received bytes per BIN_S bin from CLOCK_MONOTONIC `t0`."""
    nbins = int(seconds / BIN_S) + 1
    bins: dict[int, list[int]] = {}
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(8)
        print(json.dumps({"listening": port}), flush=True)
        open_conns: dict[socket.socket, int | None] = {}
        accepted = 0
        srv.setblocking(False)
        sel.register(srv, selectors.EVENT_READ)
        while (accepted < conns or open_conns) and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                if s is srv:
                    c, _ = srv.accept()
                    c.setblocking(False)
                    open_conns[c] = None
                    sel.register(c, selectors.EVENT_READ)
                    accepted += 1
                    continue
                try:
                    data = s.recv(256 * 1024)
                except BlockingIOError:
                    continue
                now = time.monotonic()
                if not data:
                    sel.unregister(s)
                    s.close()
                    del open_conns[s]
                    continue
                cls = open_conns[s]
                if cls is None:  # the first byte names the class
                    cls = open_conns[s] = data[0]
                    data = data[1:]
                row = bins.setdefault(cls, [0] * nbins)
                i = int((now - t0) / BIN_S)
                if 0 <= i < nbins:
                    row[i] += len(data)
        for c in open_conns:
            c.close()
    return {"bin_s": BIN_S, "bins": {str(k): v for k, v in bins.items()}, "accepted": accepted}


def sender(to: str, cls: int, dscp: int, start: float, end: float, timeout: float) -> dict[str, Any]:
    """Connects (marked `dscp` before connect, as the data plane marks), names its class, then sends
    as fast as TCP lets it from CLOCK_MONOTONIC `start` until `end`."""
    host, port = to.rsplit(":", 1)
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        s.settimeout(timeout)
        deadline = time.monotonic() + timeout
        for _ in range(200):  # the sink listens before the senders start; this is a margin
            try:
                s.connect((host, int(port)))
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
        s.sendall(bytes([cls]))
        late = time.monotonic() - start
        if late < 0:
            time.sleep(-late)
        first = time.monotonic()
        s.settimeout(0.02)  # a blocked send wakes up to look at the clock
        chunk = b"\0" * (64 * 1024)
        while time.monotonic() < end:
            try:
                sent += s.send(chunk)
            except TimeoutError:
                continue
        s.shutdown(socket.SHUT_WR)
    return {"first": first, "late_s": max(0.0, late), "bytes": sent, "cc": cc}


# --- analysis (pure) ---------------------------------------------------------------------------------
def window_bytes(row: list[int], t_from: float, t_to: float) -> int:
    """Bytes in the bins from t_from to t_to (seconds from the sink's t0, whole bins)."""
    a = max(0, round(t_from / BIN_S))
    b = max(a, round(t_to / BIN_S))
    return sum(row[a:b])


def analyse_both(bins: dict[int, list[int]], seconds: float, payload_bps: float) -> dict[str, Any]:
    """Each class's share of what the port delivered from WARM_S to `seconds`, and the port's goodput
    over its payload rate."""
    got = {c: window_bytes(bins.get(c, []), WARM_S, seconds) for c in range(len(CLASS_DSCP))}
    total = sum(got.values())
    return {
        "share0": got[0] / total if total else None,
        "share1": got[1] / total if total else None,
        "port_use": total * 8 / (seconds - WARM_S) / payload_bps,
        "bytes": got,
    }


def analyse_takeover(
    bins: dict[int, list[int]], start0: float, seconds: float, payload_bps: float
) -> dict[str, Any]:
    """Class 0 starts at `start0` (seconds from t0) while class 1 is backlogged: its rate in its first
    WINDOWS_S over the port's payload rate, the time until it has >= TAKEOVER_SHARE of what the port
    delivers since its start, or over a trailing TAKEOVER_WINDOW_S once that much has passed (None:
    not within `seconds`), and class 1's share from start0 + 100 ms to the end."""
    hi, lo = bins.get(0, []), bins.get(1, [])
    out: dict[str, Any] = {}
    for w in WINDOWS_S:
        out[f"rate0_{round(w * 1000)}ms"] = window_bytes(hi, start0, start0 + w) * 8 / w / payload_bps
    takeover = None
    steps = round(seconds / BIN_S)
    win = round(TAKEOVER_WINDOW_S / BIN_S)
    first = round(start0 / BIN_S)
    for k in range(1, steps + 1):
        # Growing from class 0's start to TAKEOVER_WINDOW_S, then trailing: an instant takeover reads
        # one bin, not a whole window.
        a, b = first + max(0, k - win), first + k
        h, low = sum(hi[a:b]), sum(lo[a:b])
        if h + low > 0 and h >= TAKEOVER_SHARE * (h + low):
            takeover = k * BIN_S
            break
    out["takeover_s"] = takeover
    end = start0 + seconds
    h = window_bytes(hi, start0 + 0.1, end)
    low = window_bytes(lo, start0 + 0.1, end)
    out["share1_after"] = low / (h + low) if h + low else None
    return out


def analyse_reverse(
    ones: list[int], zeros: list[int], start0: float, seconds: float, payload_bps: float
) -> dict[str, Any]:
    """`reverse`: class 1's goodput (`ones`, at ps0) alone (WARM_S to class 0's start) and from 100
    ms after class 0 started filling its ACKs' port until the end, over the port's payload rate, and
    the ratio; class 0's goodput into that port (`zeros`) over the same window."""
    alone = window_bytes(ones, WARM_S, start0) * 8 / (start0 - WARM_S) / payload_bps
    a, b = start0 + 0.1, start0 + seconds
    during = window_bytes(ones, a, b) * 8 / (b - a) / payload_bps
    return {
        "rate1_alone": alone,
        "rate1_reverse": during,
        "reverse_ratio": during / alone if alone > 0 else None,
        "rate0_reverse": window_bytes(zeros, a, b) * 8 / (b - a) / payload_bps,
    }


# --- driving it --------------------------------------------------------------------------------------
def flows(scenario: str, placement: str) -> list[tuple[str, str, int, float]]:
    """(sender, receiver, class, start offset in s) of every connection of `scenario`."""
    if scenario == "reverse":
        # Class 1 leaves worker0 (its data at ps0's port); class 0 from two hosts fills worker0's port,
        # where class 1's ACKs come back (in class 1: tcp_reflect_tos gives them the sender's DSCP).
        return [
            ("worker0", "ps0", 1, 0.0),
            ("ps1", "worker0", 0, ALONE_S),
            ("worker1", "worker0", 0, ALONE_S),
        ]
    late = ALONE_S if scenario == "takeover" else 0.0
    return [(h, "ps0", c, late if c == 0 else 0.0) for h, c in PLACEMENTS[placement]]


def run_scenario(
    tb: Any, scenario: str, seconds: float, payload_bps: float, placement: str = "separate"
) -> dict[str, Any]:
    """One timed run of `scenario` on the testbed's current switch (`both` and `takeover` with the
    senders of `placement`); the sinks' bins, analysed."""
    conns = flows(scenario, placement)
    timeout = seconds + ALONE_S + 4 * START_LEAD_S + 30
    t0 = time.monotonic() + START_LEAD_S
    span = seconds + (0.0 if scenario == "both" else ALONE_S)
    me = [sys.executable, __file__]
    sinks = {}
    for dst in dict.fromkeys(d for _, d, _, _ in conns):
        n = sum(1 for _, d, _, _ in conns if d == dst)
        p = tb.popen(
            dst,
            [*me, "--sink", str(PORT), repr(t0), str(span + 0.5), str(n), str(timeout)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None
        if "listening" not in p.stdout.readline():
            p.kill()
            raise RuntimeError(f"the sink in {dst} did not start: {p.communicate()[1][-400:]}")
        sinks[dst] = p
    procs = {}
    for host, dst, cls, late in conns:
        argv = [*me, "--send", f"{tb.address(dst)}:{PORT}", str(cls), str(CLASS_DSCP[cls])]
        argv += [repr(t0 + late), repr(t0 + span), str(timeout)]
        procs[(host, cls)] = tb.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    before = tb.class_counters()
    sent = {}
    for (host, cls), p in procs.items():
        out, err = p.communicate(timeout=timeout + 10)
        if p.returncode != 0:
            raise RuntimeError(
                f"the class {cls} sender in {host} failed (exit {p.returncode}): {err.strip()[-400:]}"
            )
        sent[(host, cls)] = json.loads(out.strip().splitlines()[-1])
    after = tb.class_counters()
    bins: dict[str, dict[int, list[int]]] = {}
    for dst, p in sinks.items():
        out, err = p.communicate(timeout=timeout + 10)
        if p.returncode != 0:
            raise RuntimeError(f"the sink in {dst} failed (exit {p.returncode}): {err.strip()[-400:]}")
        bins[dst] = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1])["bins"].items()}
    row: dict[str, Any] = {
        "scenario": scenario,
        "late_s": max(s["late_s"] for s in sent.values()),
        "sent_bytes": {f"{h}/{c}": s["bytes"] for (h, c), s in sent.items()},
        "cc": next(iter(sent.values()))["cc"],
        # Each port's per-class HTB counters over the run (the port toward ps0, and worker0's).
        "port": {
            h: {str(c): {k: after[h][c][k] - before[h][c][k] for k in after[h][c]} for c in after[h]}
            for h in ("ps0", "worker0")
        },
    }
    # Class 0 starts with its first sender to send.
    first0 = min(s["first"] for (_, c), s in sent.items() if c == 0) - t0
    if scenario == "both":
        row.update(analyse_both(bins["ps0"], seconds, payload_bps))
    elif scenario == "takeover":
        row.update(analyse_takeover(bins["ps0"], first0, seconds, payload_bps))
    else:
        row.update(analyse_reverse(bins["ps0"][1], bins["worker0"].get(0, []), first0, seconds, payload_bps))
    return row


def summarize(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median, 95% bootstrap interval and count of `key` over rows; None values (a takeover that did
    not happen within the run) are counted apart, and the median is then over the rest."""
    from geryon.demo.paired import bootstrap_ci

    values = [r[key] for r in rows if r.get(key) is not None]
    return {
        "median": statistics.median(values) if values else None,
        "ci95": bootstrap_ci(values),
        "n": len(values),
        "missing": len(rows) - len(values),
    }


SUMMARY_KEYS = {
    "both": ("share0", "share1", "port_use"),
    "takeover": ("takeover_s", *(f"rate0_{round(w * 1000)}ms" for w in WINDOWS_S), "share1_after"),
    "reverse": ("rate1_alone", "rate1_reverse", "reverse_ratio", "rate0_reverse"),
}


def measure(
    repeats: int,
    switches: tuple[str, ...] = ("priority", "fifo"),
    rate: int = DEMO_RATE,
    buffer: int = DEMO_BUFFER,
    seconds: float = 2.0,
    placement: str = "separate",
) -> dict[str, Any]:
    """The bench's JSON document: one testbed of the demo's switch config, its switch set to each mode
    in turn (rotated per repeat, so a drift in the machine's load hits all alike)."""
    from geryon.demo.defaults import intent_for
    from geryon.testbed import TestbedSpec, up

    spec = TestbedSpec(
        hosts=HOSTS,
        rate_bits=rate,
        buffer_bytes=buffer,
        switch=switches[0],
        host_queues=True,
        intent=intent_for(2),
        run_id=f"bsp{os.getpid() % 100000}",
    )
    payload_bps = rate * PAYLOAD_FRACTION
    runs: list[dict[str, Any]] = []
    with up(spec) as tb:
        tb.set_switch(switches[0])
        run_scenario(tb, "both", 0.5, payload_bps, placement)  # warm-up: imports, ARP
        for k in range(repeats):
            turn = k % len(switches)
            for sw in switches[turn:] + switches[:turn]:
                tb.set_switch(sw)
                for scenario in SCENARIOS:
                    row = run_scenario(tb, scenario, seconds, payload_bps, placement)
                    row.update(switch=sw, repeat=k)
                    runs.append(row)
                    time.sleep(0.2)  # queues drain
        spec_json = {"burst_bytes": spec.burst, "buffer_bytes": buffer, "rate_bits": rate}
    results = []
    for sw in switches:
        out: dict[str, Any] = {"switch": sw}
        for scenario, keys in SUMMARY_KEYS.items():
            rows = [r for r in runs if r["switch"] == sw and r["scenario"] == scenario]
            out[scenario] = {key: summarize(rows, key) for key in keys}
        results.append(out)
    return {
        "bench": "switch_priority",
        "hosts": list(HOSTS),
        "placement": placement,
        "senders": [{"host": h, "class": c, "dscp": CLASS_DSCP[c]} for h, c in PLACEMENTS[placement]],
        "testbed": spec_json,
        "payload_bps": payload_bps,
        "seconds": seconds,
        "repeats": repeats,
        "cc": runs[0]["cc"] if runs else None,
        "max_start_late_s": max((r["late_s"] for r in runs), default=None),
        "results": results,
        "runs": runs,
    }


def _fmt(st: dict[str, Any], scale: float = 1.0) -> tuple[float | None, str]:
    med, ci = st["median"], st["ci95"]
    shown = f"[{ci[0] * scale:.3f}, {ci[1] * scale:.3f}]" if ci else "-"
    if st["missing"]:
        shown += f" ({st['missing']} never)"
    return (med * scale if med is not None else None), shown


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sink"]:  # the sink inside ps0 (see run_scenario)
        port, t0, span, conns, timeout = argv[1:6]
        print(json.dumps(sink(int(port), float(t0), float(span), int(conns), float(timeout))), flush=True)
        return 0
    if argv[:1] == ["--send"]:  # a sender inside a worker's namespace
        to, cls, dscp, start, end, timeout = argv[1:7]
        result = sender(to, int(cls), int(dscp), float(start), float(end), float(timeout))
        print(json.dumps(result), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="rounds of every scenario on every switch, 1-100")
    ap.add_argument("--switch", choices=("priority", "fifo", "both"), default="both")
    ap.add_argument(
        "--placement",
        choices=tuple(PLACEMENTS),
        default="separate",
        help="separate: class 0 from worker0, class 1 from worker1 (the switch alone orders them); "
        "mixed: each worker sends both (its host queues, then the switch)",
    )
    ap.add_argument("--rate", type=int, default=DEMO_RATE, help="link rate, bits/s (1e6 to 1e9)")
    ap.add_argument("--buffer", type=int, default=DEMO_BUFFER, help="switch queue size, bytes")
    ap.add_argument("--seconds", type=float, default=2.0, help="how long both classes send, 0.3-30")
    ap.add_argument("--out", default="out/bench/switch_priority.json")
    args = ap.parse_args(argv)
    if not 1 <= args.repeats <= 100:
        ap.error(f"argument --repeats: {args.repeats}: expected 1-100")
    if not 1_000_000 <= args.rate <= 1_000_000_000:
        ap.error(f"argument --rate: {args.rate}: expected 1000000 to 1000000000 bits/s")
    if not 4096 <= args.buffer <= 64 * 1024 * 1024:
        ap.error(f"argument --buffer: {args.buffer}: expected 4096 bytes to 64 MiB")
    if not 0.3 <= args.seconds <= 30:
        ap.error(f"argument --seconds: {args.seconds}: expected 0.3 to 30")
    switches = ("priority", "fifo") if args.switch == "both" else (args.switch,)
    doc = on_testbeds(
        "bench_switch_priority",
        lambda: measure(args.repeats, switches, args.rate, args.buffer, args.seconds, args.placement),
    )
    who = ", ".join(f"class {c} from {h}" for h, c in PLACEMENTS[args.placement])
    print(
        f"bulk TCP into one switch port at {args.rate / 1e6:.0f} Mbit/s ({args.buffer // 1024} KiB "
        f"queues), class 0 DSCP 46, class 1 DSCP 26: {who}; {args.repeats} repeats, "
        f"{args.seconds:g} s each, cc {doc['cc']}; medians [95% CI]"
    )
    rows = []
    for r in doc["results"]:
        for scenario, keys in SUMMARY_KEYS.items():
            for key in keys:
                scale = 1000.0 if key.endswith("_s") else 1.0
                med, ci = _fmt(r[scenario][key], scale)
                name = f"{key.removesuffix('_s')} ms" if scale != 1.0 else key
                rows.append({"switch": r["switch"], "scenario": scenario, "what": name, "med": med, "ci": ci})
    print_table(
        rows,
        [
            ("switch", "switch", ""),
            ("scenario", "scenario", ""),
            ("what", "measure", ""),
            ("med", "median", ".3f"),
            ("ci", "95% CI", ""),
        ],
    )
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
