"""The --transport and --verbs-ack flags of every command that simulates (geryon simulate, geryon plan
training, geryon simulate-jobs): what fifo and network connections run on (simknobs.TRANSPORTS)."""

from __future__ import annotations

import argparse
from typing import Any

from geryon.errors import UsageError
from geryon.threshold.simknobs import TRANSPORTS, VERBS_ACK_S


def add_transport_flags(p: Any, what: str = "fifo and network connections") -> None:
    """Adds --transport and --verbs-ack to `p` (`what` runs on the transport); parse_transport reads them."""
    p.add_argument(
        "--transport",
        default=TRANSPORTS[0],
        choices=TRANSPORTS,
        help=f"what {what} run on: tf-grpc (default: TensorFlow's gRPC channel, its streams "
        "interleaved), tf-verbs (TensorFlow 1.x's RDMA rendezvous, grpc+verbs, as its "
        "contrib/verbs/README.md documents it: one control message in flight per channel, each waiting "
        "for its ACK, and a channel's tensor writes one at a time in posting order; the paper's "
        "Geryon is network mode on it) or geryon (this project's data plane: network runs as hybrid, "
        "fifo as hybrid with one class). In geryon simulate, end-host, hybrid and ideal keep their own order",
    )
    p.add_argument(
        "--verbs-ack",
        type=float,
        metavar="SECONDS",
        help=f"tf-verbs: a control message's ACK round trip (default {VERBS_ACK_S:.3g}: twice "
        "ib_send_lat's one-way 32-byte latency on an RC queue pair; geryon/threshold/simknobs.py cites it)",
    )


def parse_transport(args: argparse.Namespace) -> tuple[str, float]:
    """(transport, ACK round trip in seconds) of add_transport_flags' flags, checked and named."""
    ack = VERBS_ACK_S if args.verbs_ack is None else args.verbs_ack
    if not (ack >= 0 and ack < float("inf")):
        raise UsageError(f"--verbs-ack: expected seconds >= 0, got {args.verbs_ack}")
    if args.verbs_ack is not None and args.transport != "tf-verbs":
        raise UsageError(f"--verbs-ack: only with --transport tf-verbs, not {args.transport}")
    return str(args.transport), float(ack)
