"""Agent apply on a host with 4 interfaces (veth pairs in a namespace this script creates and removes).

    .venv/bin/python bench/bench_agent_apply.py [--interfaces 4] [--repeats 15] [--out FILE]

Rows, each a median over repeats (the host is put back to its pre-Geryon state between repeats):
  plan+apply (linux)      plan and transactional apply of the HTB trees and the sysctl, in-process
  plan+apply (all)        the same with the DCB and sysfs drivers loaded (veth: their targets skip)
  verify (in sync)        the plan that finds nothing to do: the daemon's periodic/netlink check
  restore                 back to the pre-Geryon state from the journal
  repair one qdisc        the daemon's work after a qdisc was deleted by hand (plan + apply of 1 target)
  geryon agent apply      the CLI as a subprocess, including interpreter start-up and imports
  daemon repair           a running `geryon agent run`: root qdisc deleted by hand -> HTB back
Target (issue 6): apply under 200 ms. Needs root. Prints a table, writes JSON (default
out/bench/agent_apply.json).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json
from pyroute2 import IPRoute, netns

from geryon.agent.config import parse_config
from geryon.agent.engine import apply_plan, make_plan, restore
from geryon.agent.journal import Journal
from geryon.agent.registry import open_slots

TARGET_MS = 200.0


def make_namespace(name: str, n: int) -> list[str]:
    netns.create(name)
    ifnames = [f"bh{i}" for i in range(n)]
    with IPRoute(netns=name) as ipr:
        for ifname in ifnames:
            ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": f"{ifname}p"})
            for end in (ifname, f"{ifname}p"):
                ipr.link("set", index=ipr.link_lookup(ifname=end)[0], state="up")
    return ifnames


def has_htb(ipr: IPRoute, index: int) -> bool:
    return any(q.get("TCA_KIND") == "htb" and q["parent"] == 0xFFFFFFFF for q in ipr.get_qdiscs(index=index))


def daemon_repair_latency(ns: str, ifname: str, cfg_file: Path, journal: Path, repeats: int) -> list[float]:
    """A real `geryon agent run`; delete the root qdisc by hand and time until the HTB is back
    (netlink event + default 0.2 s debounce + verify + apply), polling every 5 ms."""
    cmd = [sys.executable, "-m", "geryon", "agent", "run", "--config", str(cfg_file), "--netns", ns,
           "--journal", str(journal), "--api-socket", "", "--metrics", ""]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    out: list[float] = []
    try:
        with IPRoute(netns=ns) as ipr:
            index = ipr.link_lookup(ifname=ifname)[0]
            deadline = time.monotonic() + 30
            while not has_htb(ipr, index):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the daemon did not apply within 30 s")
                time.sleep(0.05)
            for i in range(repeats):
                print(
                    f"[daemon {i + 1}/{repeats}] delete the qdisc, wait for the repair ...", file=sys.stderr
                )
                time.sleep(0.5)
                start = time.perf_counter()
                ipr.tc("del", index=index, handle=0, parent=0xFFFFFFFF)
                while not has_htb(ipr, index):
                    if time.perf_counter() - start > 10:
                        raise SystemExit("the daemon did not repair within 10 s")
                    time.sleep(0.005)
                out.append(time.perf_counter() - start)
    finally:
        proc.send_signal(signal.SIGTERM)  # by PID: the process this script started
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    restore_cmd = [
        sys.executable,
        "-m",
        "geryon",
        "agent",
        "restore",
        "--netns",
        ns,
        "--journal",
        str(journal),
    ]
    subprocess.run([*restore_cmd, "--quiet"], check=True, capture_output=True)
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interfaces", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=15, help="repeats per row (median reported)")
    ap.add_argument("--cli-repeats", type=int, default=5, help="repeats of the CLI subprocess row")
    ap.add_argument("--out", default="out/bench/agent_apply.json")
    args = ap.parse_args()
    if args.repeats < 1 or args.cli_repeats < 1 or not 1 <= args.interfaces <= 64:
        ap.error("--repeats and --cli-repeats must be >= 1, --interfaces 1..64")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")

    ns = f"gbench{os.getpid()}"
    samples: dict[str, list[float]] = {k: [] for k in ("linux", "all", "verify", "restore", "repair", "cli")}
    tmp = Path(tempfile.mkdtemp(prefix="geryon-bench-agent-"))
    try:
        ifnames = make_namespace(ns, args.interfaces)
        cfg_file = tmp / "agent.yaml"
        cfg_file.write_text(f"interfaces: [{', '.join(ifnames)}]\negress: {{rate: 1gbit}}\n")

        def timed(fn: Callable[[], object]) -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        # Both driver sets side by side, alternating every repeat, so drift in machine load hits both.
        opened = {}
        for name, setting in (("linux", "off"), ("all", "auto")):
            cfg = parse_config(
                {"interfaces": ifnames, "egress": {"rate": "1gbit"}, "dcb": setting, "rdma": setting}
            )
            opened[name] = (cfg, *open_slots(cfg, netns=ns, root=str(tmp / "sysroot")))
        try:
            for i in range(args.repeats):
                print(
                    f"[{i + 1}/{args.repeats}] apply, verify, repair, restore ...",
                    file=sys.stderr,
                    flush=True,
                )
                for name, (cfg, slots, _) in opened.items():
                    journal = Journal(tmp / f"j-{name}.json")
                    samples[name].append(
                        timed(lambda s=slots, c=cfg, j=journal: apply_plan(make_plan(s, c), s, j))
                    )
                    if not make_plan(slots, cfg).empty:
                        raise SystemExit("apply left drift behind: the numbers would be meaningless")
                    if name == "linux":
                        samples["verify"].append(timed(lambda s=slots, c=cfg: make_plan(s, c)))
                        delete = ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", ifnames[0], "root"]
                        subprocess.run(delete, check=True)
                        samples["repair"].append(
                            timed(lambda s=slots, c=cfg: apply_plan(make_plan(s, c), s, None))
                        )
                        samples["restore"].append(timed(lambda s=slots, j=journal: restore(s, j)))
                    else:
                        restore(slots, journal)
        finally:
            for _, _, close in opened.values():
                close()

        journal_file = tmp / "j-cli.json"
        for i in range(args.cli_repeats):
            print(f"[cli {i + 1}/{args.cli_repeats}] geryon agent apply ...", file=sys.stderr, flush=True)
            cmd = [sys.executable, "-m", "geryon", "agent", "apply", "--config", str(cfg_file), "--netns", ns,
                   "--journal", str(journal_file), "--quiet"]  # fmt: skip
            samples["cli"].append(timed(lambda c=cmd: subprocess.run(c, check=True, capture_output=True)))
            subprocess.run([sys.executable, "-m", "geryon", "agent", "restore", "--netns", ns, "--journal",
                            str(journal_file), "--quiet"], check=True, capture_output=True)  # fmt: skip

        samples["daemon"] = daemon_repair_latency(
            ns, ifnames[0], cfg_file, tmp / "j-daemon.json", args.cli_repeats
        )
    finally:
        netns.remove(ns)

    labels = {
        "linux": "plan+apply (linux)",
        "all": "plan+apply (all drivers)",
        "verify": "verify (in sync)",
        "restore": "restore",
        "repair": "repair one qdisc",
        "cli": "geryon agent apply (CLI)",
        "daemon": "daemon: qdisc deleted -> restored",
    }
    rows = [
        {
            "what": labels[k],
            "median_ms": median_ms(v),
            "min_ms": min(v) * 1000,
            "max_ms": max(v) * 1000,
            "n": len(v),
        }
        for k, v in samples.items()
    ]
    print(f"agent apply on {args.interfaces} veth interfaces (target: apply < {TARGET_MS:.0f} ms)")
    print_table(
        rows,
        [("what", "what", "s"), ("median_ms", "median ms", ".1f"), ("min_ms", "min ms", ".1f"),
         ("max_ms", "max ms", ".1f"), ("n", "n", "d")],
    )  # fmt: skip
    apply_ms = median_ms(samples["all"])
    verdict = "meets" if apply_ms < TARGET_MS else "MISSES"
    print(f"apply with all drivers: median {apply_ms:.1f} ms, {verdict} the {TARGET_MS:.0f} ms target")
    write_json(
        args.out,
        {
            "benchmark": "agent_apply",
            "interfaces": args.interfaces,
            "repeats": args.repeats,
            "target_ms": TARGET_MS,
            "rows": rows,
            "samples_ms": {k: [x * 1000 for x in v] for k, v in samples.items()},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
