"""`geryon plan`: communication plans for a server's links; `plan aggregation` solves paper 003's LP."""

from __future__ import annotations

import argparse
import json
from typing import Any

from geryon.plan.topology import BUILTINS

AGGREGATION_HELP = (
    "The optimal gradient aggregation schedule of paper 003 (Wang, Li, Liberty, Smola, SysML'18): a convex "
    "combination of spanning trees (eq. 2; with switches, of schedules whose routes cross switches, Sec. 3) "
    "found by a linear program (SciPy's HiGHS) with column generation and a minimum-spanning-tree oracle. "
    "Prints the schedule, C(G), the bounds of Lemma 2.1 (eq. 3), and the time of one aggregation against a "
    "single best tree (eq. 1), a ring (Sec. 2: n chains of a cycle) and a PS sharded over every node "
    "(Sec. 4), in units of the gradients over a link of capacity 1. With switches it prints the links' "
    "utilisation by group beside the paper's 15:14:8 for P2.16xlarge. See docs/planning.md."
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="plan communication over a server's links (aggregation schedules)",
        description="Communication plans for a server's topology.",
    )
    plan_sub = p.add_subparsers(dest="plan_command", metavar="PLAN", required=True)
    agg = plan_sub.add_parser(
        "aggregation",
        help="optimal gradient aggregation over spanning trees (paper 003's LP)",
        description=AGGREGATION_HELP,
    )
    agg.add_argument(
        "--topology",
        required=True,
        metavar="FILE|NAME",
        help=f"a built-in ({', '.join(BUILTINS)}) or a JSON file: "
        '{"nodes": [...], "switches": [...], "edges": [{"ends": [a, b], "capacity": x, "group": g}]} '
        "(docs/planning.md)",
    )
    agg.add_argument("--json", action="store_true", help="print the report as JSON")
    agg.set_defaults(run=_run_aggregation)


def _run_aggregation(args: argparse.Namespace) -> int:
    from geryon.plan.aggregation import plan, to_json, to_text
    from geryon.plan.topology import load_topology

    report = plan(load_topology(args.topology))
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(to_text(report), end="")
    return 0
