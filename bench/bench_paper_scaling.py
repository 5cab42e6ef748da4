"""Geryon's Tables II, III and IV and Fig. 7 with the cluster simulator, side by side with the paper.

    .venv/bin/python bench/bench_paper_scaling.py [--models alexnet vgg19 resnet50 yolo]
                                                  [--compute achieved|achieved-k80|peak] [--efficiency 1.0]
                                                  [--ps-costs FILE] [--no-barrier] [--separate]
                                                  [--transport tf-verbs|tf-grpc|geryon]
                                                  [--geryon-interleave] [--endhost-gaps S ...]
                                                  [--verbs-acks S ...]
                                                  [--out FILE]

Settings (paper 002, Sec. V): 8 servers, each a worker and a PS (co-hosted, as the testbed; --separate
puts the PSes on hosts of their own), K40 compute from cited achieved throughput (--compute achieved,
the default: TensorFlow's K40c figure for AlexNet, the K80 rows of TensorFlow's benchmarks guide for
ResNet-50 and VGG16, VGG-19 and YOLO at VGG16's efficiency, YOLO's an assumption), as the fraction
of peak FLOP/s each cited run reached, applied to the paper's model (geryon/threshold/calibration.py
states every assumption); --compute achieved-k80 takes the K80 row for AlexNet too; --compute peak:
FLOP-derived at peak x --efficiency), batch 512 for AlexNet and 64 otherwise, 10 and 40 Gbit/s. Columns:
- vanilla: fifo, every variable whole on one PS round-robin and no slicing (TF without a partitioner);
- P+S: fifo with partition over the 8 PSes and 4 MiB slices (the paper's "1024K" elements);
- P+S+Geryon: network mode (2 strict-priority classes, FIFO inside a class) at the best threshold over
  every cut between distinct urgencies (what the adaptive search converges to).
All three run on --transport (simknobs.TRANSPORTS cites each): tf-verbs by default, the paper's stack
(TF r1.10's grpc+verbs: a channel writes one tensor at a time in posting order, one request per ACK
round trip; Geryon one such channel per class); tf-grpc replays TF's gRPC order for the baselines (a
channel serves about 3.5 pulls at once in a random order per iteration, simknobs.TF_INFLIGHT,
measured on this machine) and sends Geryon's classes one tensor at a time in ready order
(--geryon-interleave: in TF's window instead); --verbs-acks S ... adds a sensitivity table of the
ACK round trip (not a calibration);
- hybrid (issue 14's Geryon: urgency order with chunk preemption inside a class, best threshold too),
  end-host (TicTac-like, paying ByteScheduler's 300 us per transfer) and ideal, for reference.
Scaling efficiency = C / T (the simulator's GPU utilization). PS costs are 0 unless --ps-costs gives a
file (bench_ps_costs.py's document or a plain JSON object of the four keys); nothing here is fitted to
the paper's numbers: the tables are the validation. The targets (issue 15) are printed with "met" or
"NOT met":
- Tables II and III: every vanilla, P+S and Geryon efficiency within 10% (relative) of the paper's, and
  Geryon/P+S within 0.05 of the paper's ratio;
- Table IV (VGG-19, 10 Gbit/s): end-host at 256K-element (1 MiB) slices at least 15% below its 1024K
  (4 MiB) throughput; Geryon beside it, and end-host with its stop-and-wait per sending process
  (endhost_scope="sender") instead of per connection;
- Fig. 7 (2 servers, each a worker and a PS, VGG-19, 10 Gbit/s): partitioning gains 5-15% over vanilla
  (paper: 11.3%), slicing up to 9.6% more.
--endhost-gaps S ... adds a sensitivity table, not a calibration: end-host at 1024K and 256K with each
per-transfer gap, to show how large a per-transfer cost Table IV's drop would need in this model.
Prints the tables and writes JSON (default out/bench/paper_scaling.json).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from typing import Any

from benchlib import print_table, write_json

from geryon.threshold.calibration import paper_compute
from geryon.threshold.profiles import profile_from_model
from geryon.threshold.simknobs import TF_INFLIGHT, TRANSPORTS, VERBS_ACK_S, PsCosts
from geryon.threshold.simulator import simulate

PAPER = {  # scaling efficiency in %, (vanilla, P+S, P+S+Geryon), Tables II and III
    10: {
        "alexnet": (36.4, 80.2, 95.4),
        "vgg19": (26.9, 79.3, 94.6),
        "resnet50": (87.6, 90.0, 95.7),
        "yolo": (20.9, 75.8, 91.5),
    },
    40: {
        "alexnet": (79.4, 90.0, 95.1),
        "vgg19": (61.7, 85.3, 94.8),
        "resnet50": (94.1, 94.1, 96.1),
        "yolo": (53.2, 84.2, 93.6),
    },
}
PAPER_TABLE_IV = {  # images/s, (Geryon, TicTac), VGG-19 on 8 servers at 10 Gbit/s
    "1024K": (279.2, 272.0),
    "512K": (276.0, 268.0),
    "256K": (272.8, 216.8),
}
TABLE_IV_SLICES = {"1024K": 4 << 20, "512K": 2 << 20, "256K": 1 << 20}  # float32 elements -> bytes
PAPER_FIG7 = {"partition_gain": 0.113, "slicing_gain_max": 0.096}
FIG7_SLICES = {"1024K": 4 << 20, "512K": 2 << 20, "256K": 1 << 20, "128K": 512 << 10}
BATCH = {"alexnet": 512}
SLICE = 4 << 20


def cut_points(profile) -> list[float]:
    """Thresholds halfway between consecutive distinct urgencies: every split that moves something."""
    levels = sorted({p.urgency for p in profile.params})
    return [(a + b) / 2 for a, b in itertools.pairwise(levels)] or [0.5]


# The paper's own single-GPU figure where its text gives one (Fig. 8's bars are not in the text):
# VGG-19 on 8 workers with Geryon at 1024K slicing trained 279.2 images/s (Table IV) at 94.6% scaling
# efficiency (Table II), so one K40 alone trained 279.2 / 8 / 0.946 = 36.9 images/s at batch 64.
PAPER_SINGLE_GPU = {"vgg19": PAPER_TABLE_IV["1024K"][0] / 8 / (PAPER[10]["vgg19"][2] / 100)}


def build_profile(model: str, batch: int, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The model's profile and what its compute rests on: with achieved compute, the K40 at the
    fraction of peak FLOP/s the cited run reached (calibration.paper_compute states every assumption);
    with paper compute, the paper's own single-GPU throughput where it gives one (else as achieved)."""
    if args.compute == "peak":
        profile = profile_from_model(model, batch_size=batch, device=args.device, efficiency=args.efficiency)
        return profile, {"compute": "peak", "efficiency": args.efficiency}
    if args.compute == "paper" and model in PAPER_SINGLE_GPU:
        pc = paper_compute(model, "k40")
        achieved = profile_from_model(model, batch_size=batch, device=args.device, efficiency=pc.efficiency)
        # Every layer's FLOP-derived time scaled alike, to the paper's throughput. The fraction of the
        # K40's peak it implies (eff) may pass 1: the FLOP count is the model's, not cuDNN's (Winograd
        # and FFT convolutions do fewer).
        factor = batch / PAPER_SINGLE_GPU[model] / achieved.compute_s
        eff = pc.efficiency / factor
        profile = achieved.scaled(factor, source=f"paper002:{PAPER_SINGLE_GPU[model]:.2f}img/s")
        return profile, {
            "compute": "paper",
            "cited": f"paper 002: {PAPER_SINGLE_GPU[model]:.1f} img/s on one K40 @ {batch}",
            "source": "paper 002 Table IV (279.2 img/s, 8 workers, Geryon, 1024K) / Table II (94.6%)",
            "assumption": "the paper's scaling efficiency is against this single-GPU throughput",
            "efficiency": eff,
            "img_per_s": batch / profile.compute_s,
        }
    pc = paper_compute(model, "k80" if args.compute == "achieved-k80" else "k40")
    if not 0 < pc.efficiency <= 1:
        raise SystemExit(f"{model}: the cited throughput implies {pc.efficiency:.2f} of peak; check it")
    profile = profile_from_model(model, batch_size=batch, device=args.device, efficiency=pc.efficiency)
    basis = {
        "compute": args.compute,
        "cited": f"{pc.cited.device} {pc.cited.model} {pc.cited.images_per_s:.1f} img/s"
        f" @ {pc.cited.batch_size}",
        "source": pc.cited.source,
        "assumption": pc.assumption,
        "efficiency": pc.efficiency,
        "img_per_s": batch / profile.compute_s,
    }
    return profile, basis


def cluster(args: argparse.Namespace, gbit: float, workers: int | None = None) -> dict[str, Any]:
    """simulate()'s cluster arguments: the bench's shape at `gbit` Gbit/s (`workers` servers, each a
    worker and a PS, where given: Fig. 7's two)."""
    return {
        "workers": workers or args.workers,
        "num_ps": workers or args.ps,
        "bandwidth_bps": gbit * 1e9,
        "barrier": not args.no_barrier,
        "colocate": not args.separate,
    }


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["alexnet", "vgg19", "resnet50", "yolo"])
    ap.add_argument("--bandwidths", nargs="+", type=int, default=[10, 40], help="Gbit/s")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--ps", type=int, default=8)
    ap.add_argument(
        "--device", default="k40", help="compute device (the paper's: k40; v100 shows faster GPUs)"
    )
    ap.add_argument(
        "--compute",
        choices=("achieved", "achieved-k80", "paper", "peak"),
        default="achieved",
        help="achieved: cited K40 throughput where TF published one (AlexNet), else the K80 rows; "
        "achieved-k80: the K80 rows only; paper: the paper's own single-GPU throughput where its text "
        "gives one (VGG-19, from Tables II and IV), else as achieved; peak: the device's peak FLOP/s x "
        "--efficiency",
    )
    ap.add_argument(
        "--efficiency", type=float, default=1.0, help="with --compute peak: fraction of the device's peak"
    )
    ap.add_argument("--ps-costs", metavar="FILE", help="PS costs (bench_ps_costs.py's JSON); default: free")
    ap.add_argument("--no-barrier", action="store_true")
    ap.add_argument("--separate", action="store_true", help="PSes on hosts of their own, not co-hosted")
    ap.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="tf-verbs",
        help="what vanilla, P+S and Geryon run on (simknobs.TRANSPORTS): tf-verbs (default: the paper's "
        "TF r1.10 grpc+verbs), tf-grpc (TF's gRPC window for the baselines; Geryon as --geryon-interleave "
        "says) or geryon (this project's data plane)",
    )
    ap.add_argument(
        "--geryon-interleave",
        action="store_true",
        help="with --transport tf-grpc: Geryon's flows interleave tensors in TF's window (default: one "
        "at a time in ready order)",
    )
    ap.add_argument(
        "--verbs-acks",
        nargs="+",
        type=float,
        metavar="SECONDS",
        help="with tf-verbs: a sensitivity table of Table II's VGG-19 row at each ACK round trip (the "
        "model's value stays simknobs.VERBS_ACK_S)",
    )
    ap.add_argument(
        "--endhost-gaps",
        nargs="+",
        type=float,
        metavar="SECONDS",
        help="Table IV sensitivity: end-host at 1024K and 256K with each per-transfer gap (what the drop "
        "would need; not a calibration: the model's value stays ByteScheduler's 300 us)",
    )
    ap.add_argument("--out", default="out/bench/paper_scaling.json")
    args = ap.parse_args()
    if args.compute != "peak" and args.device != "k40":
        ap.error(
            f"--device {args.device}: cited achieved throughputs are for the paper's k40 only; "
            "use --compute peak for another device"
        )
    costs = PsCosts.load(args.ps_costs) if args.ps_costs else PsCosts()

    sim_walls: list[float] = []

    if args.geryon_interleave and args.transport != "tf-grpc":
        ap.error(f"--geryon-interleave: only with --transport tf-grpc, not {args.transport}")
    if args.verbs_acks and args.transport != "tf-verbs":
        ap.error(f"--verbs-acks: only with --transport tf-verbs, not {args.transport}")

    def run(profile: Any, mode: str, common: dict[str, Any], **kw: Any) -> Any:
        if args.transport != "tf-grpc":
            kw.setdefault("transport", args.transport)
        elif mode == "fifo":
            kw.setdefault("inflight", TF_INFLIGHT)
        elif mode == "network":
            kw.setdefault("interleave", args.geryon_interleave)
            kw.setdefault("inflight", TF_INFLIGHT if kw["interleave"] else None)
        r = simulate(profile, mode=mode, ps_costs=costs, **common, **kw)
        sim_walls.append(r.wall_s)
        return r

    def best_threshold(profile: Any, mode: str, common: dict[str, Any], cuts: list[float], **kw: Any) -> Any:
        return min(
            (run(profile, mode, common, thresholds=(t,), **kw) for t in cuts), key=lambda r: r.iteration_s
        )

    profiles = {}
    bases: dict[str, dict[str, Any]] = {}
    rows = []
    for model in args.models:
        print(f"building the {model} profile ...", file=sys.stderr, flush=True)
        profile, basis = build_profile(model, BATCH.get(model, 64), args)
        bases[model] = basis
        profiles[model] = profile
        cuts = cut_points(profile)
        for gbit in args.bandwidths:
            common = cluster(args, gbit)
            vanilla = run(profile, "fifo", common, partition=False)
            ps = run(profile, "fifo", common, slice_bytes=SLICE)
            print(f"  {model} @ {gbit} Gbit/s: trying {len(cuts)} thresholds", file=sys.stderr, flush=True)
            geryon = best_threshold(profile, "network", common, cuts, slice_bytes=SLICE)
            hybrid = best_threshold(profile, "hybrid", common, cuts, slice_bytes=SLICE)
            end_host = run(profile, "end-host", common, slice_bytes=SLICE)
            ideal = run(profile, "ideal", common, slice_bytes=SLICE)
            paper = PAPER.get(gbit, {}).get(model)
            row: dict[str, Any] = {
                "model": model,
                "gbit": gbit,
                "batch": profile.batch_size,
                "C_ms": profile.compute_s * 1e3,
                "vanilla": vanilla.gpu_utilization * 100,
                "ps": ps.gpu_utilization * 100,
                "geryon": geryon.gpu_utilization * 100,
                "threshold": geryon.thresholds[0],
                "hybrid": hybrid.gpu_utilization * 100,
                "end_host": end_host.gpu_utilization * 100,
                "ideal": ideal.gpu_utilization * 100,
                "geryon_vs_ps": ps.iteration_s / geryon.iteration_s,
                "paper_vanilla": paper[0] if paper else None,
                "paper_ps": paper[1] if paper else None,
                "paper_geryon": paper[2] if paper else None,
                "paper_geryon_vs_ps": paper[2] / paper[1] if paper else None,
            }
            if paper:
                rels = [abs(row[k] - p) / p for k, p in zip(("vanilla", "ps", "geryon"), paper, strict=True)]
                row["worst_rel_err"] = max(rels)
                row["efficiency_target"] = verdict(max(rels) <= 0.10)
                row["ratio_target"] = verdict(abs(row["geryon_vs_ps"] - row["paper_geryon_vs_ps"]) <= 0.05)
            # The paper's order in every row (issue 38): vanilla <= P+S <= Geryon.
            row["order_target"] = verdict(row["vanilla"] <= row["ps"] <= row["geryon"])
            rows.append(row)

    print("\nCompute per model (K40, per worker step):")
    print_table(
        [{"model": m, "C_ms": profiles[m].compute_s * 1e3, **b} for m, b in bases.items()],
        [
            ("model", "model", "s"),
            ("compute", "basis", "s"),
            ("C_ms", "C ms", ".0f"),
            ("efficiency", "of peak", ".2f"),
            *(
                [
                    ("img_per_s", "K40 img/s", ".1f"),
                    ("cited", "cited", "s"),
                    ("assumption", "assumption", "s"),
                ]
                if args.compute != "peak"
                else []
            ),
        ],
    )
    print("\nTables II (10 Gbit/s) and III (40 Gbit/s): scaling efficiency %, simulator beside (paper)")
    print_table(
        rows,
        [
            ("model", "model", "s"),
            ("gbit", "Gbit/s", "d"),
            ("C_ms", "C ms", ".0f"),
            ("vanilla", "vanilla", ".1f"),
            ("paper_vanilla", "(paper)", ".1f"),
            ("ps", "P+S", ".1f"),
            ("paper_ps", "(paper)", ".1f"),
            ("geryon", "Geryon", ".1f"),
            ("paper_geryon", "(paper)", ".1f"),
            ("geryon_vs_ps", "Geryon/P+S", ".3f"),
            ("paper_geryon_vs_ps", "(paper)", ".3f"),
            ("hybrid", "hybrid", ".1f"),
            ("end_host", "end-host", ".1f"),
            ("ideal", "ideal", ".1f"),
            ("efficiency_target", "within 10%", "s"),
            ("ratio_target", "ratio +-0.05", "s"),
            ("order_target", "v<=P+S<=G", "s"),
        ],
    )

    # tf-verbs sensitivity: Table II's VGG-19 row at other ACK round trips (not a calibration).
    ack_rows = []
    if "vgg19" in profiles and args.verbs_acks:
        profile = profiles["vgg19"]
        common = cluster(args, 10)
        cuts = cut_points(profile)
        for ack in args.verbs_acks:
            v = run(profile, "fifo", common, partition=False, verbs_ack_s=ack)
            q = run(profile, "fifo", common, slice_bytes=SLICE, verbs_ack_s=ack)
            g = best_threshold(profile, "network", common, cuts, slice_bytes=SLICE, verbs_ack_s=ack)
            ack_rows.append(
                {
                    "ack_us": ack * 1e6,
                    "vanilla": v.gpu_utilization * 100,
                    "ps": q.gpu_utilization * 100,
                    "geryon": g.gpu_utilization * 100,
                    "geryon_vs_ps": q.iteration_s / g.iteration_s,
                }
            )
        print("\ntf-verbs sensitivity (not a calibration): VGG-19 at 10 Gbit/s against the ACK round trip")
        print_table(
            ack_rows,
            [
                ("ack_us", "ACK us", ".2f"),
                ("vanilla", "vanilla", ".1f"),
                ("ps", "P+S", ".1f"),
                ("geryon", "Geryon", ".1f"),
                ("geryon_vs_ps", "Geryon/P+S", ".3f"),
            ],
        )

    # Table IV: VGG-19, end-host (TicTac) against Geryon as slices shrink.
    table_iv = []
    if "vgg19" in profiles:
        profile = profiles["vgg19"]
        common = cluster(args, 10)
        imgs = args.workers * profile.batch_size
        cuts = cut_points(profile)
        for label, slice_bytes in TABLE_IV_SLICES.items():
            g = best_threshold(profile, "network", common, cuts, slice_bytes=slice_bytes)
            e = run(profile, "end-host", common, slice_bytes=slice_bytes)
            es = run(profile, "end-host", common, slice_bytes=slice_bytes, endhost_scope="sender")
            h = best_threshold(profile, "hybrid", common, cuts, slice_bytes=slice_bytes)
            table_iv.append(
                {
                    "slice": label,
                    "shards": g.shards,
                    "geryon": imgs / g.iteration_s,
                    "paper_geryon": PAPER_TABLE_IV[label][0],
                    "end_host": imgs / e.iteration_s,
                    "paper_end_host": PAPER_TABLE_IV[label][1],
                    "end_host_sender": imgs / es.iteration_s,
                    "hybrid": imgs / h.iteration_s,
                }
            )
        print("\nTable IV: VGG-19 images/s at 10 Gbit/s, simulator beside (paper)")
        print_table(
            table_iv,
            [
                ("slice", "slicing", "s"),
                ("shards", "slices", "d"),
                ("geryon", "Geryon", ".1f"),
                ("paper_geryon", "(paper)", ".1f"),
                ("end_host", "end-host", ".1f"),
                ("paper_end_host", "(paper TicTac)", ".1f"),
                ("end_host_sender", "end-host per sender", ".1f"),
                ("hybrid", "hybrid", ".1f"),
            ],
        )
    table_iv_drop = 1 - table_iv[-1]["end_host"] / table_iv[0]["end_host"] if table_iv else None
    sender_drop = 1 - table_iv[-1]["end_host_sender"] / table_iv[0]["end_host_sender"] if table_iv else None
    gap_rows = []
    if "vgg19" in profiles and args.endhost_gaps:
        profile = profiles["vgg19"]
        common = cluster(args, 10)
        imgs = args.workers * profile.batch_size
        for gap in args.endhost_gaps:
            big, small = (
                imgs
                / run(
                    profile, "end-host", common, slice_bytes=TABLE_IV_SLICES[k], endhost_gap_s=gap
                ).iteration_s
                for k in ("1024K", "256K")
            )
            gap_rows.append(
                {"gap_ms": gap * 1e3, "1024K": big, "256K": small, "drop": (1 - small / big) * 100}
            )
        print("\nTable IV sensitivity (not a calibration): end-host images/s against its per-transfer gap")
        print_table(
            gap_rows,
            [
                ("gap_ms", "gap ms", ".2f"),
                ("1024K", "1024K", ".1f"),
                ("256K", "256K", ".1f"),
                ("drop", "256K below 1024K %", ".1f"),
            ],
        )

    # Fig. 7: 2 servers, each a worker and a PS: partitioning, then slicing.
    fig7: dict[str, Any] = {}
    if "vgg19" in profiles:
        profile = profiles["vgg19"]
        common = cluster(args, 10, workers=2)
        vanilla = run(profile, "fifo", common, partition=False)
        partition = run(profile, "fifo", common)
        sliced = {label: run(profile, "fifo", common, slice_bytes=b) for label, b in FIG7_SLICES.items()}
        fig7 = {
            "vanilla_ms": vanilla.iteration_s * 1e3,
            "partition_ms": partition.iteration_s * 1e3,
            "sliced_ms": {k: r.iteration_s * 1e3 for k, r in sliced.items()},
            "partition_gain": vanilla.iteration_s / partition.iteration_s - 1,
            "slicing_gain_max": partition.iteration_s / min(r.iteration_s for r in sliced.values()) - 1,
        }
        print(f"\nFig. 7: VGG-19, 2 servers (worker + PS each), 10 Gbit/s, fifo on {args.transport}")
        print_table(
            [
                {"what": "partitioning over vanilla", "sim": fig7["partition_gain"] * 100, "paper": 11.3},
                {
                    "what": "slicing over partitioning (best)",
                    "sim": fig7["slicing_gain_max"] * 100,
                    "paper": 9.6,
                },
            ],
            [("what", "throughput gain %", "s"), ("sim", "simulator", ".1f"), ("paper", "(paper)", ".1f")],
        )

    targets = []
    for r in rows:
        if "efficiency_target" in r:
            targets.append(
                (
                    f"Table {'II' if r['gbit'] == 10 else 'III'} {r['model']}: efficiencies within 10%",
                    r["efficiency_target"],
                    f"worst {r['worst_rel_err']:.0%} off",
                )
            )
            targets.append(
                (
                    f"Table {'II' if r['gbit'] == 10 else 'III'} {r['model']}: Geryon/P+S within 0.05",
                    r["ratio_target"],
                    f"{r['geryon_vs_ps']:.3f} vs {r['paper_geryon_vs_ps']:.3f}",
                )
            )
        if "order_target" in r:
            targets.append(
                (
                    f"Table {'II' if r['gbit'] == 10 else 'III'} {r['model']}: vanilla <= P+S <= Geryon",
                    r["order_target"],
                    f"{r['vanilla']:.1f} / {r['ps']:.1f} / {r['geryon']:.1f}",
                )
            )
    if table_iv_drop is not None:
        targets.append(
            (
                "Table IV: end-host at 256K >= 15% below 1024K",
                verdict(table_iv_drop >= 0.15),
                f"{table_iv_drop:.1%} below",
            )
        )
    if sender_drop is not None:
        targets.append(
            (
                "Table IV: end-host per sender at 256K >= 15% below 1024K",
                verdict(sender_drop >= 0.15),
                f"{sender_drop:.1%} below",
            )
        )
    if fig7:
        g = fig7["partition_gain"]
        targets.append(("Fig. 7: partitioning gains 5-15%", verdict(0.05 <= g <= 0.15), f"{g:.1%}"))
    print("\nTargets (issues 15 and 38):")
    print_table(
        [{"target": t, "verdict": v, "value": x} for t, v, x in targets],
        [("target", "target", "s"), ("verdict", "", "s"), ("value", "simulator", "s")],
    )
    met = sum(v == "met" for _, v, _ in targets)
    print(f"{met} of {len(targets)} targets met")
    print(f"\n{len(sim_walls)} simulations, median {statistics.median(sim_walls) * 1e3:.1f} ms each")
    write_json(
        args.out,
        {
            "workers": args.workers,
            "ps": args.ps,
            "device": args.device,
            "efficiency": args.efficiency,
            "compute": args.compute,
            "compute_basis": bases,
            "ps_costs": costs.to_dict(),
            "tf_inflight": TF_INFLIGHT,
            "barrier": not args.no_barrier,
            "geryon_interleave": args.geryon_interleave,
            "transport": args.transport,
            "verbs_ack_s": VERBS_ACK_S,
            "verbs_ack_sensitivity": ack_rows,
            "colocate": not args.separate,
            "slice_bytes": SLICE,
            "rows": rows,
            "table_iv": table_iv,
            "table_iv_end_host_drop": table_iv_drop,
            "table_iv_end_host_sender_drop": sender_drop,
            "table_iv_gap_sensitivity": gap_rows,
            "fig7": fig7,
            "targets": [{"target": t, "verdict": v, "value": x} for t, v, x in targets],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
