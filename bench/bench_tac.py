"""TicTac's TAC against TIC in the cluster simulator (paper 000, Sec. 4.3 vs 4.2), a paper-style grid.

    .venv/bin/python bench/bench_tac.py [--models vgg19 resnet50 inceptionv3] [--workers 2 4 8]
                                        [--bandwidths 1gbit 10gbit] [--batch-size 32]
                                        [--forward dag chain] [--oracle share|link] [--out FILE]

Per model: one FLOPs profile (K40, `profile_from_model`) and the tagger's TIC order; TAC's op times
come from that same profile (`geryon.threshold.tac_times`: a cost model, not a measured trace) with
transfers at the rate `--oracle` says: a worker's share of the PSes' links when all workers pull at
once, min(rate, rate x PSes / workers), the time TicTac's tracer would measure in the running
cluster (paper 000 Sec. 5: op times from an execution's runtime stats; the default), or the full
link rate (Sec. 3.1's op on a dedicated resource). Cells: workers x PS at the paper's 4:1 ratio
(Sec. 6.1, Fig. 9; at least one PS) x bandwidth (1 GbE is the paper's env C) x the simulator's
forward pass (`dag`: the model's dataflow, geryon.threshold.forward_dag, so a tower whose parameters
TAC pulls early can compute early; `chain`: layers one after another in consumption order), in
`end-host` (TicTac's enforcement: the PS sends in priority order, Sec. 5.1) and `ideal` (one global
priority order) modes, one class (threshold 1.0) so only the order differs. Prints model, shape,
forward pass, TIC and TAC iteration time and their ratio (TAC / TIC; below 1 is TAC faster), and per
forward pass the cells where TAC is slower and the worst ratio; writes JSON (default
out/bench/tac.json).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Any

from benchlib import print_table, write_json

from geryon.tfenv import import_tensorflow
from geryon.units import parse_rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["vgg19", "resnet50", "inceptionv3"])
    ap.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--bandwidths", nargs="+", default=["1gbit", "10gbit"])
    ap.add_argument("--modes", nargs="+", default=["end-host", "ideal"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument(
        "--forward",
        nargs="+",
        choices=["chain", "dag"],
        default=["dag", "chain"],
        help="the simulator's forward pass: the model's dataflow (dag, geryon.threshold.forward_dag) and/or "
        "layers one after another in consumption order (chain); default both, dag first",
    )
    ap.add_argument(
        "--oracle",
        choices=["share", "link"],
        default="share",
        help="the transfer times TAC's oracle is given: at a worker's share of the PSes' links, min(rate, "
        "rate x PSes / workers), what TicTac's tracer measures in the running cluster (default), or at the "
        "full link rate (the op alone on a dedicated link)",
    )
    ap.add_argument("--out", default="out/bench/tac.json")
    args = ap.parse_args()

    import_tensorflow()
    from geryon.tagger import tag_model
    from geryon.tagger.models import build_model
    from geryon.threshold.forward_dag import with_forward_dag
    from geryon.threshold.profiles import profile_from_model
    from geryon.threshold.simulator import simulate
    from geryon.threshold.tac_times import tac_profile

    rows = []
    for name in args.models:
        print(f"{name}: building, profiling, tagging ...", file=sys.stderr, flush=True)
        model = build_model(name)
        tic_profile = profile_from_model(model, batch_size=args.batch_size, device="k40", urgency="tic")
        tagging = tag_model(model, "tic")
        dag_tic = with_forward_dag(tic_profile, tagging)
        tic_rank = sorted(range(len(tic_profile.params)), key=lambda i: -tic_profile.params[i].urgency)
        tacs: dict[float, tuple[Any, Any, Any, int, float]] = {}  # oracle rate -> TAC, its DAG twin, ...
        for bw_text, w in itertools.product(args.bandwidths, args.workers):
            bw = parse_rate(bw_text, "--bandwidths")
            ps = max(1, w // 4)
            rate = oracle_rate(args.oracle, bw, w, ps)
            if rate not in tacs:
                start = time.perf_counter()
                tac, times = tac_profile(tic_profile, tagging, rate)
                tac_s = time.perf_counter() - start
                tic_rank = sorted(
                    range(len(tic_profile.params)), key=lambda i: -tic_profile.params[i].urgency
                )
                tac_rank = sorted(range(len(tac.params)), key=lambda i: -tac.params[i].urgency)
                moved = sum(a != b for a, b in zip(tic_rank, tac_rank, strict=True))
                tacs[rate] = (tac, with_forward_dag(tac, tagging), times, moved, tac_s)
            tac, dag_tac, times, moved, tac_s = tacs[rate]
            pairs = {"chain": (tic_profile, tac), "dag": (dag_tic, dag_tac)}
            for forward, mode in itertools.product(args.forward, args.modes):
                tic_p, tac_p = pairs[forward]
                kw = dict(workers=w, num_ps=ps, bandwidth_bps=bw, mode=mode, thresholds=(1.0,))
                t_tic = simulate(tic_p, **kw).iteration_s
                t_tac = simulate(tac_p, **kw).iteration_s
                rows.append(
                    {
                        "model": name,
                        "forward": forward,
                        "shape": f"{w}w x {ps}ps @ {bw_text}",
                        "workers": w,
                        "num_ps": ps,
                        "bandwidth_bps": bw,
                        "oracle_bps": rate,
                        "mode": mode,
                        "tic_s": t_tic,
                        "tac_s": t_tac,
                        "ratio": t_tac / t_tic,
                        "positions_moved": moved,
                        "tac_compute_s": tac_s,
                        "op_times_source": times.source,
                    }
                )
    print_table(
        rows,
        [
            ("model", "model", ""),
            ("shape", "shape", ""),
            ("forward", "forward", ""),
            ("mode", "mode", ""),
            ("tic_s", "TIC s", ".4f"),
            ("tac_s", "TAC s", ".4f"),
            ("ratio", "TAC/TIC", ".4f"),
            ("positions_moved", "moved", "d"),
        ],
    )
    summary = {}
    for forward in args.forward:
        cells = [r for r in rows if r["forward"] == forward]
        slower = [r for r in cells if r["ratio"] > 1 + 1e-9]
        worst = max(cells, key=lambda r: r["ratio"])
        summary[forward] = {"cells": len(cells), "slower_cells": len(slower), "worst_ratio": worst["ratio"]}
        print(
            f"forward {forward}: TAC slower than TIC in {len(slower)} of {len(cells)} cells; worst TAC/TIC "
            f"{worst['ratio']:.4f} ({worst['model']}, {worst['shape']}, {worst['mode']})"
        )
    write_json(args.out, {"rows": rows, "summary": summary})
    return 0


def oracle_rate(oracle: str, bw: float, workers: int, num_ps: int) -> float:
    """The bit rate of one transfer for TAC's oracle: the link's, or a worker's share of the PSes' links
    when every worker pulls at once (all W workers split each PS's uplink; a worker takes at most its
    own link)."""
    return bw if oracle == "link" else min(bw, bw * num_ps / workers)


if __name__ == "__main__":
    sys.exit(main())
