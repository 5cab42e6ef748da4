"""NIC-side apply cost of the host agent on 4 interfaces: DCB (dcbnl) and RoCE sysfs/configfs drivers.

No NIC here has DCB ops or RoCE sysfs, so DCB runs against the fake kernel at the netlink socket
(tests/agent/dcb_fake.py: the same encode/decode and engine code, minus the NIC firmware time) and
sysfs against a temporary tree laid out like an mlx5 host's. One real-kernel number is measured too:
a dcbnl GET round trip on a veth in a namespace (the kernel answers EOPNOTSUPP), which is the
syscall path a real NIC adds its driver time to.

Prints a table of medians and writes out/bench/agent_nic.json. Target from the issue: apply < 200 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from agent.dcb_fake import FakeDcbKernel, FakeNic
from agent.ethtool_fake import FakeEthtool, FakeEthtoolNic
from agent.kernel_tree import create_rdma_cm_group, mlx5_host
from benchlib import print_table, write_json

from geryon.agent.config import parse_config
from geryon.agent.dcb_driver import DcbDriver
from geryon.agent.dcbnl import DcbnlClient, DcbUnsupported, encode_request
from geryon.agent.engine import Slot, apply_plan, make_plan
from geryon.agent.ethtool import Ethtool
from geryon.agent.sysfs_driver import SysfsDriver

IFACES = ["eth0", "eth1", "eth2", "eth3"]


def median_ms(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times)


def nic_host() -> tuple[list[Slot], FakeDcbKernel, Path]:
    kernel = FakeDcbKernel({i: FakeNic() for i in IFACES})
    root = Path(tempfile.mkdtemp(prefix="geryon-bench-"))
    for n, ifname in enumerate(IFACES):
        mlx5_host(root, ifname, f"mlx5_{n}")
        create_rdma_cm_group(root, f"mlx5_{n}")
    slots = [
        Slot(
            DcbDriver(
                client_factory=lambda: DcbnlClient(sock_factory=kernel.socket),
                ethtool=Ethtool(FakeEthtool({i: FakeEthtoolNic() for i in IFACES})),
            )
        ),
        Slot(SysfsDriver(root)),
    ]
    return slots, kernel, root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    cfg = parse_config({"interfaces": IFACES})
    rows = []

    # a fresh host per repeat, built outside the timing
    hosts = [nic_host()[0] for _ in range(args.reps)]
    apply_times = []
    for slots in hosts:
        t0 = time.perf_counter()
        apply_plan(make_plan(slots, cfg), slots, None)
        apply_times.append((time.perf_counter() - t0) * 1000)
    print("[1/3] apply", file=sys.stderr)
    slots = hosts[0]
    n_changes = len(make_plan(nic_host()[0], cfg).changes)
    verify_med, verify_min = median_ms(lambda: make_plan(slots, cfg), args.reps)
    print("[2/3] verify", file=sys.stderr)
    apply_med = statistics.median(apply_times)
    rows.append(
        {
            "op": f"plan + apply, 4 ifaces ({n_changes} targets)",
            "median_ms": apply_med,
            "min_ms": min(apply_times),
        }
    )
    rows.append({"op": "verify (plan, in sync)", "median_ms": verify_med, "min_ms": verify_min})

    real = None
    if os.geteuid() == 0:
        ns = f"gbench{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            subprocess.run(
                ["ip", "-n", ns, "link", "add", "gb0", "type", "veth", "peer", "name", "gb1"], check=True
            )
            client = DcbnlClient(netns=ns)

            def get() -> None:
                with contextlib.suppress(DcbUnsupported):
                    client.get_ieee("gb0")

            real, real_min = median_ms(get, args.reps * 10)
            client.close()
            rows.append(
                {"op": "dcbnl GET round trip, real kernel (veth)", "median_ms": real, "min_ms": real_min}
            )
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=False)
    enc, enc_min = median_ms(lambda: encode_request(78, 21, "eth0", None, 1), args.reps * 10)
    rows.append({"op": "encode one dcbnl request", "median_ms": enc, "min_ms": enc_min})
    print("[3/3] dcbnl", file=sys.stderr)

    print_table(
        rows, [("op", "operation", "s"), ("median_ms", "median ms", ".3f"), ("min_ms", "min ms", ".3f")]
    )
    print(f"apply / 200 ms target: {apply_med / 200:.3f}")
    write_json(
        "out/bench/agent_nic.json",
        {
            "interfaces": len(IFACES),
            "reps": args.reps,
            "targets": n_changes,
            "rows": rows,
            "apply_vs_target_200ms": apply_med / 200,
            "note": "DCB: fake kernel at the netlink socket; sysfs: a tmp tree (no DCB/RoCE NIC here)",
        },
    )


if __name__ == "__main__":
    main()
