"""The emulated priority fabric (geryon.testbed): build/teardown time, link throughput, and what strict
priority on the switch buys an urgent transfer that meets a bulk flow at a shared egress port.

    .venv/bin/python bench/bench_testbed.py [--repeats 5] [--out FILE]

Rows (medians over repeats; runs in a private state dir, every testbed taken down after use):
  up / down, 5 hosts          up() and down() of ps0,ps1,worker0,worker1,chief at 100 Mbit
  one flow at R               goodput of one 2-second DSCP-26 transfer (TCP payload, so at most about
                              1448/1514 = 95.6 % of the wire rate); offloads off (MTU packets) unless
                              the row says "TSO"
  urgent vs bulk at R         completion time of an urgent transfer (DSCP 46, 0.2 s of the link) that
                              starts while a DSCP-26 bulk flow from another host saturates the same
                              switch port: priority vs fifo switch, and the urgent transfer alone
Needs root. Prints tables, writes JSON (default out/bench/testbed.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.testbed import TestbedSpec, down, up
from geryon.testbed.traffic import result, start_send, start_sink

HOSTS = ("ps0", "ps1", "worker0", "worker1", "chief")


def bench_up_down(repeats: int) -> dict[str, Any]:
    ups, downs = [], []
    for i in range(repeats):
        spec = TestbedSpec(hosts=HOSTS, run_id=f"bud{os.getpid() % 10000}{i}")
        t = time.perf_counter()
        up(spec)
        ups.append(time.perf_counter() - t)
        t = time.perf_counter()
        down(spec.run_id)
        downs.append(time.perf_counter() - t)
    return {"up_s": statistics.median(ups), "down_s": statistics.median(downs), "repeats": repeats}


def bench_throughput(rate: int, offloads: bool, repeats: int) -> dict[str, Any]:
    spec = TestbedSpec(
        hosts=("a", "b"), rate_bits=rate, offloads=offloads, run_id=f"btp{os.getpid() % 10000}"
    )
    with up(spec) as tb:
        start_sink(tb, "a")
        got = [
            result(start_send(tb, "b", "a", rate // 8 * 2, 26, cc="cubic"))["mbit_s"] for _ in range(repeats)
        ]
    mbit = statistics.median(got)
    return {"rate_mbit": rate / 1e6, "offloads": offloads, "goodput_mbit": mbit, "of_rate": mbit * 1e6 / rate}


def bench_urgent(rate: int, repeats: int, cc: str | None) -> dict[str, Any]:
    urgent, bulk = rate // 8 // 5, rate // 8 * 3
    spec = TestbedSpec(hosts=("recv", "bulk", "urgent"), rate_bits=rate, run_id=f"bur{os.getpid() % 10000}")
    out: dict[str, Any] = {"rate_mbit": rate / 1e6, "cc": cc or "default (bbr)", "ideal_s": urgent * 8 / rate}
    with up(spec) as tb:
        start_sink(tb, "recv")
        out["alone_s"] = statistics.median(
            result(start_send(tb, "urgent", "recv", urgent, 46, cc=cc))["seconds"] for _ in range(repeats)
        )
        for mode in ("priority", "fifo"):
            tb.set_switch(mode)
            times, drops, urgent_drops = [], 0, 0
            for _ in range(repeats):
                before = tb.class_counters()["recv"]
                b = start_send(tb, "bulk", "recv", bulk, 26, cc=cc)
                time.sleep(0.7)
                times.append(result(start_send(tb, "urgent", "recv", urgent, 46, cc=cc))["seconds"])
                result(b)
                after = tb.class_counters()["recv"]
                drops += sum(after[k]["drops"] - before.get(k, {}).get("drops", 0) for k in after)
                urgent_drops += after[0]["drops"] - before[0]["drops"]
            out[f"{mode}_s"] = statistics.median(times)
            out[f"{mode}_drops"] = drops  # all classes of the port toward recv, over all repeats
            if mode == "priority":
                out["urgent_class_drops"] = urgent_drops
    out["fifo_over_priority"] = out["fifo_s"] / out["priority_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="out/bench/testbed.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_testbed: needs root (network namespaces)", file=sys.stderr)
        return 2
    os.environ["GERYON_TESTBED_STATE"] = tempfile.mkdtemp(prefix="bench-testbed-")
    try:
        updown = bench_up_down(args.repeats)
        up_ms, down_ms = updown["up_s"] * 1000, updown["down_s"] * 1000
        print(f"5 hosts: up {up_ms:.0f} ms, down {down_ms:.0f} ms (median of {args.repeats})\n")
        tput = [
            bench_throughput(r, off, 3)
            for r, off in (
                (50_000_000, False),
                (100_000_000, False),
                (200_000_000, False),
                (1_000_000_000, False),
                (1_000_000_000, True),
            )
        ]
        print_table(
            tput,
            [
                ("rate_mbit", "rate Mbit/s", ".0f"),
                ("offloads", "TSO", ""),
                ("goodput_mbit", "goodput Mbit/s", ".1f"),
                ("of_rate", "of rate", ".3f"),
            ],
        )
        print()
        urgent = [
            bench_urgent(r, args.repeats, cc)
            for r, cc in ((100_000_000, "cubic"), (200_000_000, "cubic"), (100_000_000, None))
        ]
        print_table(
            urgent,
            [
                ("rate_mbit", "rate Mbit/s", ".0f"),
                ("cc", "cc", ""),
                ("ideal_s", "ideal s", ".3f"),
                ("alone_s", "alone s", ".3f"),
                ("priority_s", "priority s", ".3f"),
                ("fifo_s", "fifo s", ".3f"),
                ("fifo_over_priority", "fifo/prio", ".2f"),
                ("priority_drops", "drops prio", "d"),
                ("urgent_class_drops", "of them urgent", "d"),
                ("fifo_drops", "drops fifo", "d"),
            ],
        )
        write_json(args.out, {"up_down": updown, "throughput": tput, "urgent_vs_bulk": urgent})
    finally:
        down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
