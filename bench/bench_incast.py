"""How much of a PS port's rate two senders pushing at once get, on the demo's own switch emulation.

    .venv/bin/python bench/bench_incast.py [--repeats 15] [--bytes 6415528] [--switch fifo|priority|both]
                                           [--rate 200000000] [--buffer 262144] [--class-split 0.5]
                                           [--out out/bench/incast.json]

In the demo's ps mode both workers push their gradients to each PS at the same time, so the switch
port toward a PS carries two TCP senders whose NICs each run at the port's rate: the port's queue
(a 256 KiB bfifo under HTB) overflows and the senders recover from loss. The simulator's fluid model
gives a port's full rate to whoever shares it. This bench measures what the port really delivers: a
testbed of the demo's shape (geryon.demo.defaults: link rate, queue size, host queues and 2-class QoS
intent; hosts ps0, ps1, worker0, worker1) with a sink in each PS, then per repeat, in rotating order:

  1 sender    worker0 sends N bytes to ps0 (the port is then limited by worker0's own NIC queue);
  2 senders   worker0 and worker1 each send N/2 bytes to ps0, starting at the same instant;
  2x2         each worker sends N/2 to each PS at once (the demo's push phase: every NIC and every
              PS port carries two flows), N through each PS port;
  2 senders per class, 2x2 per class
              the same with one connection per class per worker-PS pair, as geryon and paper push
              (grpc+geryon, 2 classes): each marked with its class's DSCP (46 and 26, the data
              plane's marks for the demo's 2 classes), class 0 carrying --class-split of the pair's
              bytes (default 0.5, a documented fixed split: the searched threshold moves the demo's
              own between 0.18 and 0.997 of vggmini's bytes). Under `--switch priority` the two
              classes meet in the switch's strict-priority queues; under fifo in one queue.

The time is from the common start until the sink has acknowledged the last byte (each sender connects
before the start, so the handshake is not timed). The efficiency of a pattern is the 1-sender time
over the pattern's time in the same repeat (both deliver N per PS port; 1: the port loses nothing to
the second sender), the median over repeats with a 95% bootstrap interval, and the mean: the 2x2
times are bimodal (the four flows settle near their fair shares, or one lags behind the others and
its port idles at the end), so their median swings between runs (0.73-0.92) where the mean holds
(0.82-0.87, 4 runs of 15-30 repeats); geryon.demo.predict takes the mean. Drops at the switch ports
toward the PSes are read from their HTB class counters. N defaults to one demo step's gradients for
one PS from both workers (vggmini's 6,415,528 parameter bytes: each worker pushes half of them to
each of the 2 PSes). Under `--switch priority` every flow of the one-class patterns carries one DSCP
(26). geryon.demo.predict gives geryon and paper the per-class patterns' means, the other modes the
one-class ones. TCP
congestion control is the namespaces' default, as gRPC's sockets get it (recorded in the JSON).

Needs root (network namespaces); traffic stays inside the namespaces it makes, every testbed is
taken down at the end. Prints a table, writes JSON (default out/bench/incast.json).
"""

from __future__ import annotations

import argparse
import json
import os
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
DEMO_BYTES = 6_415_528  # vggmini's parameter bytes (the demo's profile): one step's pushes to one PS
HOSTS = ("ps0", "ps1", "worker0", "worker1")
DSCP = 26  # one class for both senders (fifo ignores it)
START_LEAD_S = 1.0  # senders are started this long before the common start: Python's start-up


def send_at(to: str, nbytes: int, dscp: int, at: float, timeout: float) -> dict[str, float]:
    """Connects to a geryon.testbed.traffic sink, waits until CLOCK_MONOTONIC `at` (one clock for
    every namespace of the machine), sends `nbytes` and returns when the sink acknowledged them."""
    from geryon.testbed.traffic import send_counted

    host, port = to.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        s.settimeout(timeout)
        deadline = time.monotonic() + timeout
        for _ in range(200):  # the sink listens before the bench starts a sender; this is a margin
            try:
                s.connect((host, int(port)))
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
        late = time.monotonic() - at
        if late < 0:
            time.sleep(-late)
        start = time.monotonic()
        send_counted(s, nbytes, deadline, timeout)
        end = time.monotonic()
    return {"start": start, "end": end, "late_s": max(0.0, late), "cc": cc}


# What crosses the switch per transfer: (sender, receiver, class) flows. The one-class patterns share
# the bytes evenly; the per-class ones split each worker-PS pair's share between its two class
# connections by --class-split (class 0 the more urgent, DSCP CLASS_DSCP[0]).
PATTERNS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "1 sender": (("worker0", "ps0", 0),),
    "2 senders": (("worker0", "ps0", 0), ("worker1", "ps0", 0)),
    # The demo's push phase: each worker to both PSes, so each NIC and each PS port has two flows.
    "2x2": (("worker0", "ps0", 0), ("worker1", "ps0", 0), ("worker0", "ps1", 0), ("worker1", "ps1", 0)),
    # As geryon and paper push (grpc+geryon with 2 classes): one connection per class per worker-PS
    # pair, each marked with its class's DSCP, so a PS port carries 4 flows in 2 strict-priority queues.
    "2 senders per class": tuple((w, "ps0", c) for w in ("worker0", "worker1") for c in (0, 1)),
    "2x2 per class": tuple(
        (w, ps, c) for w in ("worker0", "worker1") for ps in ("ps0", "ps1") for c in (0, 1)
    ),
}
PER_CLASS = ("2 senders per class", "2x2 per class")
# The DSCP of each class in a per-class pattern: geryon.demo.defaults.class_dscp(2), as the data plane
# marks the demo's 2 classes (46 strict high, 26 the lower queue of the switch's 2-class intent).
CLASS_DSCP = (46, 26)
# Class 0's share of a pair's bytes: an even split, documented rather than taken from one demo, since
# the searched threshold moves it between runs (5 saved demos: 0.18, 0.83 and 0.997 of vggmini's bytes).
CLASS_SPLIT = 0.5


def flow_bytes(pattern: str, nbytes: int, split: float) -> list[int]:
    """Each flow's bytes, in PATTERNS order, summing to `nbytes`: pairs share evenly, and in the
    per-class patterns class 0 gets `split` of its pair's share (at least 1 byte per flow)."""
    flows = PATTERNS[pattern]
    pairs = sorted({(h, d) for h, d, _ in flows})
    share = nbytes // len(pairs)
    out = []
    for h, d, c in flows:
        pair = share + (nbytes - share * len(pairs) if (h, d) == pairs[0] else 0)
        if pattern in PER_CLASS:
            first = min(pair - 1, max(1, round(pair * split)))
            out.append(first if c == 0 else pair - first)
        else:
            out.append(pair)
    return out


def transfer(
    tb: Any, pattern: str, nbytes: int, dscp: int, timeout: float, split: float = CLASS_SPLIT
) -> dict[str, Any]:
    """One timed delivery of `nbytes` over the pattern's flows starting together (flow_bytes); the
    one-class patterns mark every flow `dscp`, the per-class ones their class's CLASS_DSCP."""
    from geryon.testbed.traffic import PORT

    flows = PATTERNS[pattern]
    # 8 senders start Python on a loaded machine: a longer lead so none starts late.
    lead = START_LEAD_S * max(1.0, len(flows) / 4)
    at = time.monotonic() + lead
    procs = []
    for (host, dst, cls), part in zip(flows, flow_bytes(pattern, nbytes, split), strict=True):
        mark = CLASS_DSCP[cls] if pattern in PER_CLASS else dscp
        argv = [sys.executable, __file__, "--send", f"{tb.address(dst)}:{PORT}", str(part), str(mark)]
        argv += [repr(at), str(timeout)]
        procs.append(tb.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout + lead + 10)
        if p.returncode != 0:
            raise RuntimeError(f"a sender failed (exit {p.returncode}): {err.strip()[-400:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max(o["end"] for o in outs) - at
    return {
        "pattern": pattern,
        "bytes": nbytes,
        "seconds": seconds,
        "goodput_mbit": nbytes * 8 / seconds / 1e6,
        "late_s": max(o["late_s"] for o in outs),
        "each_s": [o["end"] - at for o in outs],
        "cc": outs[0]["cc"],
    }


def port_drops(tb: Any) -> int:
    """Drops so far at the switch ports toward the PSes (every class)."""
    counters = tb.class_counters()
    return sum(c["drops"] for ps in ("ps0", "ps1") for c in counters[ps].values())


def bench_switch(
    switch: str, rate: int, buffer: int, nbytes: int, repeats: int, split: float = CLASS_SPLIT
) -> dict[str, Any]:
    from geryon.demo.defaults import intent_for
    from geryon.demo.paired import bootstrap_ci
    from geryon.testbed import TestbedSpec, up
    from geryon.testbed.traffic import start_sink

    # As geryon.demo.runner.testbed_spec builds the demo's (host queues by the agent, 2-class intent).
    spec = TestbedSpec(
        hosts=HOSTS,
        rate_bits=rate,
        buffer_bytes=buffer,
        switch=switch,
        host_queues=True,
        intent=intent_for(2),
        run_id=f"bic{os.getpid() % 10000}{switch[0]}",
    )
    timeout = max(30.0, nbytes * 8 / rate * 40)
    runs: list[dict[str, Any]] = []
    with up(spec) as tb:
        for ps in ("ps0", "ps1"):
            start_sink(tb, ps, timeout=repeats * len(PATTERNS) * (timeout + 2 * START_LEAD_S + 5) + 60)
        transfer(tb, "2x2", nbytes // 4, DSCP, timeout)  # warm-up: imports, ARP
        for k in range(repeats):
            # Rotate which goes first, so a drift in the machine's load hits all alike.
            order = list(PATTERNS)
            turn = k % len(order)
            for pattern in order[turn:] + order[:turn]:
                # Every PS port gets N bytes: 2x2 moves N to each of the two.
                total = nbytes * len({dst for _, dst, _ in PATTERNS[pattern]})
                before = port_drops(tb)
                row = transfer(tb, pattern, total, DSCP, timeout, split)
                row["drops"] = port_drops(tb) - before
                row["repeat"] = k
                runs.append(row)
                time.sleep(0.2)  # queues drain, and the next transfer starts from idle like a step
    by = {p: [r for r in runs if r["pattern"] == p] for p in PATTERNS}
    one = by["1 sender"]

    def stats(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
        values = [r[key] for r in rows]
        return {"median": statistics.median(values), "ci95": bootstrap_ci(values), "n": len(values)}

    def efficiency(pattern: str) -> dict[str, Any]:
        # Time for the 1-sender delivery of N over time for the pattern's (N per PS port), per repeat.
        ratios = [a["seconds"] / b["seconds"] for a, b in zip(one, by[pattern], strict=True)]
        # The mean beside the median: the 2x2 times are bimodal (the flows balance or one lags).
        return {
            "median": statistics.median(ratios),
            "ci95": bootstrap_ci(ratios),
            "mean": statistics.fmean(ratios),
            "n": len(ratios),
        }

    return {
        "switch": switch,
        "rate_bits": rate,
        "buffer_bytes": buffer,
        "bytes": nbytes,
        "repeats": repeats,
        "class_split": split,
        "class_dscp": list(CLASS_DSCP),
        "cc": runs[0]["cc"],
        "patterns": {
            p: {k: stats(rows, k) for k in ("seconds", "goodput_mbit", "drops")} for p, rows in by.items()
        },
        "efficiency": {p: efficiency(p) for p in PATTERNS if p != "1 sender"},
        "max_start_late_s": max(r["late_s"] for r in runs),
        "runs": runs,
    }


def measure(
    repeats: int,
    switches: tuple[str, ...] = ("fifo", "priority"),
    rate: int = DEMO_RATE,
    buffer: int = DEMO_BUFFER,
    nbytes: int = DEMO_BYTES,
    split: float = CLASS_SPLIT,
) -> dict[str, Any]:
    """The bench's JSON document (what geryon.demo.predict.load_incast reads) for `switches`: one
    testbed per switch mode, each taken down when its patterns are measured. `geryon demo` calls this
    when the file is absent (geryon.demo.incastcal)."""
    results = [bench_switch(sw, rate, buffer, nbytes, repeats, split) for sw in switches]
    return {"bench": "incast", "hosts": list(HOSTS), "results": results}


def _ci(value: Any) -> str:
    return f"[{value[0]:.3f}, {value[1]:.3f}]" if value else "-"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--send"]:  # a sender inside a host namespace (see transfer)
        to, nbytes, dscp, at, timeout = argv[1:6]
        print(json.dumps(send_at(to, int(nbytes), int(dscp), float(at), float(timeout))), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15, help="rounds of every pattern, 1-200")
    ap.add_argument(
        "--bytes", type=int, default=DEMO_BYTES, help="bytes delivered to each PS port per transfer"
    )
    ap.add_argument("--switch", choices=("fifo", "priority", "both"), default="both")
    ap.add_argument("--rate", type=int, default=DEMO_RATE, help="link rate, bits/s")
    ap.add_argument("--buffer", type=int, default=DEMO_BUFFER, help="switch queue size, bytes")
    ap.add_argument(
        "--class-split",
        type=float,
        default=CLASS_SPLIT,
        help="class 0's share of each worker-PS pair's bytes in the per-class patterns, 0.01-0.99",
    )
    ap.add_argument("--out", default="out/bench/incast.json")
    args = ap.parse_args(argv)
    if not 1 <= args.repeats <= 200:
        ap.error(f"argument --repeats: {args.repeats}: expected 1-200")
    if not 64 * 1024 <= args.bytes <= 1 << 30:
        ap.error(f"argument --bytes: {args.bytes}: expected 64 KiB to 1 GiB")
    if not 0.01 <= args.class_split <= 0.99:
        ap.error(f"argument --class-split: {args.class_split}: expected 0.01-0.99")
    switches = ("fifo", "priority") if args.switch == "both" else (args.switch,)

    def run() -> dict[str, Any]:
        return measure(args.repeats, switches, args.rate, args.buffer, args.bytes, args.class_split)

    doc = on_testbeds("bench_incast", run)
    results = doc["results"]
    rows = []
    for r in results:
        for p, st in r["patterns"].items():
            eff = r["efficiency"].get(p)
            rows.append(
                {
                    "switch": r["switch"],
                    "pattern": p,
                    "s": st["seconds"]["median"],
                    "s_ci": _ci(st["seconds"]["ci95"]),
                    "mbit": st["goodput_mbit"]["median"],
                    "drops": st["drops"]["median"],
                    "eff": eff["median"] if eff else None,
                    "eff_mean": eff["mean"] if eff else None,
                    "eff_ci": _ci(eff["ci95"]) if eff else "-",
                }
            )
    print(
        f"{args.bytes} bytes to each PS port at {args.rate / 1e6:.0f} Mbit/s, "
        f"{args.buffer // 1024} KiB queues, {args.repeats} repeats each, cc {results[0]['cc']}, "
        f"per-class: class 0 gets {args.class_split:.2f} of a pair's bytes, DSCP {CLASS_DSCP}"
    )
    print_table(
        rows,
        [
            ("switch", "switch", ""),
            ("pattern", "pattern", ""),
            ("s", "time s", ".3f"),
            ("s_ci", "95% CI", ""),
            ("mbit", "goodput Mbit/s", ".1f"),
            ("drops", "port drops", ".0f"),
            ("eff", "efficiency", ".3f"),
            ("eff_ci", "95% CI", ""),
            ("eff_mean", "mean", ".3f"),
        ],
    )
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
