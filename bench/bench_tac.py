"""TicTac's TAC against TIC in the cluster simulator (paper 000, Sec. 4.3 vs 4.2), a paper-style grid.

    .venv/bin/python bench/bench_tac.py [--models vgg19 resnet50 inceptionv3] [--workers 2 4 8]
                                        [--bandwidths 1gbit 10gbit] [--batch-size 32] [--out FILE]

Per model: one FLOPs profile (K40, `profile_from_model`) and the tagger's TIC order; TAC's op times
come from that same profile (`geryon.threshold.tac_times`: a cost model, not a measured trace) with
transfers at the cell's bandwidth. Cells: workers x PS at the paper's 4:1 ratio (Sec. 6.1, Fig. 9;
at least one PS) x bandwidth (1 GbE is the paper's env C), in `end-host` (TicTac's enforcement: the
PS sends in priority order, Sec. 5.1) and `ideal` (one global priority order) modes, one class
(threshold 1.0) so only the order differs. Prints model, shape, TIC and TAC iteration time and
their ratio (TAC / TIC; below 1 is TAC faster) and writes JSON (default out/bench/tac.json).
The simulator runs the forward pass as a chain of layers in the tagger's consumption order, not as
a DAG: a TAC order that pulls a later-consumed tower first cannot make that tower run earlier there.
"""

from __future__ import annotations

import argparse
import sys
import time

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
    ap.add_argument("--out", default="out/bench/tac.json")
    args = ap.parse_args()

    import_tensorflow()
    from geryon.tagger import tag_model
    from geryon.tagger.models import build_model
    from geryon.threshold.profiles import profile_from_model
    from geryon.threshold.simulator import simulate
    from geryon.threshold.tac_times import tac_profile

    rows = []
    for name in args.models:
        print(f"{name}: building, profiling, tagging ...", file=sys.stderr, flush=True)
        model = build_model(name)
        tic_profile = profile_from_model(model, batch_size=args.batch_size, device="k40", urgency="tic")
        tagging = tag_model(model, "tic")
        for bw_text in args.bandwidths:
            bw = parse_rate(bw_text, "--bandwidths")
            start = time.perf_counter()
            tac, times = tac_profile(tic_profile, tagging, bw)
            tac_s = time.perf_counter() - start
            tic_rank = sorted(range(len(tic_profile.params)), key=lambda i: -tic_profile.params[i].urgency)
            tac_rank = sorted(range(len(tac.params)), key=lambda i: -tac.params[i].urgency)
            moved = sum(a != b for a, b in zip(tic_rank, tac_rank, strict=True))
            for w in args.workers:
                ps = max(1, w // 4)
                for mode in args.modes:
                    kw = dict(workers=w, num_ps=ps, bandwidth_bps=bw, mode=mode, thresholds=(1.0,))
                    t_tic = simulate(tic_profile, **kw).iteration_s  # type: ignore[arg-type]
                    t_tac = simulate(tac, **kw).iteration_s  # type: ignore[arg-type]
                    rows.append(
                        {
                            "model": name,
                            "shape": f"{w}w x {ps}ps @ {bw_text}",
                            "workers": w,
                            "num_ps": ps,
                            "bandwidth_bps": bw,
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
            ("mode", "mode", ""),
            ("tic_s", "TIC s", ".4f"),
            ("tac_s", "TAC s", ".4f"),
            ("ratio", "TAC/TIC", ".4f"),
            ("positions_moved", "moved", "d"),
        ],
    )
    slower = [r for r in rows if r["ratio"] > 1 + 1e-9]
    print(f"TAC slower than TIC in {len(slower)} of {len(rows)} cells")
    write_json(args.out, {"rows": rows, "slower_cells": len(slower)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
