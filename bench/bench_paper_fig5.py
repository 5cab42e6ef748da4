"""Geryon's Fig. 5 with the cluster simulator: several PSes send to one worker; network-level
priorities (Geryon) against end-host-only ordering (TicTac/P3-like) as the number of PSes grows.

    .venv/bin/python bench/bench_paper_fig5.py [--model vgg19] [--bandwidths 2.5 5] [--out FILE]

The paper's point: an end host orders only its own sends, so when PS0 sends a non-urgent parameter
and PS1 an urgent one, they share the worker's link fairly and the urgent one arrives late; strict
priority in the NICs and switch serves it first, and the gap grows with the number of PSes. The
placement that shows it is TF's default one (every variable whole on one PS, round-robin): each PS
holds different layers. With partition+slicing every PS holds a slice of every layer and sends in the
same order, so the PSes are coordinated anyway; that row is printed too, for honesty.
Geryon's flows are simulated sending their tensors one after another (interleave=False: one TCP
connection or RDMA queue pair per class, as Geryon's data plane does); fifo is TF's gRPC, whose
HTTP/2 streams interleave concurrent tensors.
One worker, P = 1, 2, 4, 8 PSes, 2 classes at threshold 0.5 and the best threshold over every cut;
a shard's next pull starts once it is aggregated, so pulls of the last layers (pushed first) compete
with the urgent first layers (--barrier makes every pull wait for the whole iteration instead; then
all pulls start together, small urgent slices finish first under fair sharing anyway, and every mode
is within about 2%). Prints a table and writes JSON (default out/bench/paper_fig5.json).
"""

from __future__ import annotations

import argparse
import itertools
import sys

from benchlib import print_table, write_json

from geryon.threshold.profiles import profile_from_model
from geryon.threshold.simulator import simulate

SLICE = 4 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--bandwidths", nargs="+", type=float, default=[2.5, 5.0], help="Gbit/s")
    ap.add_argument("--ps", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--barrier", action="store_true", help="pulls wait for the whole previous iteration")
    ap.add_argument("--out", default="out/bench/paper_fig5.json")
    args = ap.parse_args()

    print(f"building the {args.model} profile ...", file=sys.stderr, flush=True)
    profile = profile_from_model(args.model, batch_size=args.batch_size, device="k40")
    levels = sorted({p.urgency for p in profile.params})
    cuts = [(a + b) / 2 for a, b in itertools.pairwise(levels)] or [0.5]
    rows = []
    for gbit, placement, ps in itertools.product(args.bandwidths, ("whole", "sliced"), args.ps):
        plan = {"partition": False} if placement == "whole" else {"slice_bytes": SLICE}
        common = {"workers": 1, "num_ps": ps, "bandwidth_bps": gbit * 1e9, "barrier": args.barrier, **plan}
        t = {m: simulate(profile, mode=m, **common).iteration_s for m in ("fifo", "end-host", "ideal")}
        # Geryon's flows send their tensors one after another (interleave=False), see the docstring.
        t["network"] = simulate(profile, mode="network", interleave=False, **common).iteration_s
        t["network_il"] = simulate(profile, mode="network", **common).iteration_s
        best = min(
            simulate(profile, mode="network", thresholds=(c,), interleave=False, **common).iteration_s
            for c in cuts
        )
        rows.append(
            {
                "gbit": gbit,
                "placement": placement,
                "ps": ps,
                "fifo_ms": t["fifo"] * 1e3,
                "end_host_ms": t["end-host"] * 1e3,
                "network_ms": t["network"] * 1e3,
                "network_interleaved_ms": t["network_il"] * 1e3,
                "network_best_ms": best * 1e3,
                "ideal_ms": t["ideal"] * 1e3,
                "end_host_over_network": t["end-host"] / t["network"],
                "end_host_over_network_best": t["end-host"] / best,
            }
        )
        print(f"  {gbit} Gbit/s, {placement}, {ps} PS: done", file=sys.stderr, flush=True)

    print_table(
        rows,
        [
            ("gbit", "Gbit/s", "g"),
            ("placement", "placement", "s"),
            ("ps", "PSes", "d"),
            ("fifo_ms", "fifo ms", ".0f"),
            ("end_host_ms", "end-host ms", ".0f"),
            ("network_ms", "network ms", ".0f"),
            ("network_interleaved_ms", "net(il) ms", ".0f"),
            ("network_best_ms", "network* ms", ".0f"),
            ("ideal_ms", "ideal ms", ".0f"),
            ("end_host_over_network", "end-host/network", ".3f"),
            ("end_host_over_network_best", "end-host/network*", ".3f"),
        ],
    )
    print(
        "\nnetwork = Geryon (2 classes at 0.5; each class flow sends tensors in order); net(il) = the same"
        "\nwith tensors interleaved on a flow like gRPC streams; network* = Geryon at the best threshold."
    )
    write_json(
        args.out, {"model": args.model, "batch_size": args.batch_size, "barrier": args.barrier, "rows": rows}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
