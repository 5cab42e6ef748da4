"""Order inside a class (issue 14 item 1): urgency order vs arrival order on the real data plane.

    .venv/bin/python bench/bench_rendezvous.py --order [--repeats 15] [--runs 3]

One PS and one worker process (`grpc+geryon`, loopback) and a TF1 client. The worker's step pulls 64
parameters of mixed sizes (log-uniform 4 KiB..4 MiB, seeded) from the PS, all in ONE class. They form
a chain, so the tagger ranks them 0..63 in chain order; they are created in a random (seeded) order,
so the worker asks for them in random order. Each repeat runs the step under `urgency` and then under
`arrival` (A B A B ..., set on both tasks between steps, the way GeryonStrategy.set_order does), then
a step of 200 tiny (4 B) parameters and a step pulling one 64 MiB parameter under each. Per run:
  tau            Kendall tau of the order in which the worker's receives completed against the
                 urgency rank (GeryonTakeArrivals on the worker), median over repeats; target >= 0.95
  ordering cost  ns per response in the producer's ordered-queue code (insert + pick; the PS's
                 `order_ns` / responses), and the paired urgency - arrival step-time difference per
                 tiny tensor (what the whole ordering path costs end to end); target < 2 us
  throughput     MB/s of the mixed step and of the 64 MiB pull (urgency sends it in chunks: 256 KiB
                 on links up to 10 Gbit/s, sized to the link above (chunk_scale); arrival whole); the
                 ratio urgency / arrival is the median of per-repeat paired ratios with a bootstrap
                 95% interval; target >= 0.95
Several runs (fresh processes each) show the spread. Writes JSON (default out/bench/rendezvous_order.json).

`--consumers 2`: two workers pull the same 64 parameters at once, so the PS serves two connections
of the class (what sender_order=host orders together; variant urgency-connection against urgency).
`--variants a,b,...` (bench_rendezvous.py --order --variants ...) measures sender settings apart, all
interleaved in one run (a b c a b c ...), each against `arrival` paired per repeat (see VARIANTS):
the burst hold (hold=off), the inline write of small responses (inline=off: everything through
the event loop's write passes, the writer thread until issue 16; inline=drain: the producing
thread writes what is pending, most urgent first), the unsent-bytes bound of the socket
(notsent_lowat), and fixed chunks whatever the link (urgency-fixed: chunk_scale=off).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import child_env, child_servers, print_table, run_client, write_json

from geryon.demo.paired import bootstrap_ci
from geryon.progress import Progress
from geryon.tf.build import build
from geryon.tf.ports import free_port_pairs

DATA_OFFSET = -7000
TENSORS = 64
TINY = 200
BULK_MB = 64
SEED = 14
TARGET_TAU = 0.95
TARGET_COST_US = 2.0
TARGET_RATIO = 0.95
# The sender settings every variant starts from (the data plane's defaults, transport.h).
SENDER_DEFAULTS = {
    "sender_order": "host",
    "hold": "on",
    "hold_gap_us": "300",
    "inline": "arrival",
    "notsent_lowat": "0",
    "chunk_scale": "link",
}
# name -> (order, sender settings that differ from SENDER_DEFAULTS)
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "urgency": ("urgency", {}),
    "arrival": ("arrival", {}),
    "urgency-nohold": ("urgency", {"hold": "off"}),
    "urgency-gap0": ("urgency", {"hold_gap_us": "0"}),
    "urgency-gap100": ("urgency", {"hold_gap_us": "100"}),
    "urgency-gap300": ("urgency", {"hold_gap_us": "300"}),
    "urgency-writer": ("urgency", {"inline": "off"}),
    "urgency-inline": ("urgency", {"inline": "small"}),
    "urgency-drain": ("urgency", {"inline": "drain"}),
    "urgency-nohold-drain": ("urgency", {"hold": "off", "inline": "drain"}),
    "urgency-connection": ("urgency", {"sender_order": "connection"}),
    "urgency-lowat": ("urgency", {"notsent_lowat": str(256 * 1024)}),
    "urgency-fixed": ("urgency", {"chunk_scale": "off"}),  # every chunk chunk_bytes, whatever the link
    "arrival-writer": ("arrival", {"inline": "off"}),
    "arrival-drain": ("arrival", {"inline": "drain"}),
}
REFERENCE = "arrival"

_SERVER = r"""
import json, os, sys, time
import tensorflow as tf
import geryon.tf
spec = json.loads(os.environ["BENCH_SPEC"])
server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), spec["job"], spec["task"])
print("READY", flush=True)
while True:  # the producer's counters (order_ns) for the bench to read
    rows = [c.__dict__ for c in geryon.tf.flow_counters()]
    with open(spec["counters"] + ".tmp", "w") as f:
        json.dump(rows, f)
    os.replace(spec["counters"] + ".tmp", spec["counters"])
    time.sleep(0.2)
"""

_CLIENT = r"""
import json, os, random, sys, time
import tensorflow as tf
from geryon.tf.strategy import native_ops
from geryon.tf.tf1 import Tf1Classes
spec = json.loads(os.environ["BENCH_SPEC"])
v1 = tf.compat.v1
v1.disable_eager_execution()
ops = native_ops()
rng = random.Random(spec["seed"])
# Sizes in float32 elements, log-uniform 4 KiB .. 4 MiB.
sizes = [int(1024 * 2 ** rng.uniform(0, 10)) for _ in range(spec["tensors"])]
created = list(range(spec["tensors"]))
rng.shuffle(created)  # creation order = the order the worker's executor asks in
tiny_created = list(range(spec["tiny"]))
rng.shuffle(tiny_created)
cluster = tf.train.ClusterSpec(spec["cluster"])


def chain(prefix, n, sizes, order, x, consumers=1):
    weights = {}
    with v1.device("/job:ps/task:0"):
        for i in order:
            with v1.variable_scope(f"{prefix}{i:03d}"):
                weights[i] = v1.get_variable("w", [sizes[i]], initializer=v1.ones_initializer(),
                                             use_resource=True)
    outs = []
    for w in range(consumers):  # every consumer pulls every parameter: one PS connection each
        with v1.device(f"/job:worker/task:{w}"):
            h = x
            for i in range(n):  # layer i needs layer i-1's output: the tagger ranks them in this order
                h = h + tf.reduce_sum(weights[i] * (h / h))
        outs.append(h[0])
    return outs if consumers > 1 else outs[0]


graph = tf.Graph()
with graph.as_default():
    with v1.device("/job:worker/task:0"):
        x = v1.placeholder(tf.float32, [1], name="x")
        x_tiny = v1.placeholder(tf.float32, [1], name="x_tiny")
    mixed = chain("mixed", spec["tensors"], sizes, created, x, spec["consumers"])
    tiny = chain("tiny", spec["tiny"], [1] * spec["tiny"], tiny_created, x_tiny)
    with v1.device("/job:ps/task:0"):
        bulk_var = v1.get_variable("bulk/w", [spec["bulk_mb"] << 18], initializer=v1.ones_initializer(),
                                   use_resource=True)
    with v1.device("/job:worker/task:0"):
        bulk = tf.reduce_sum(bulk_var)
    order_in = v1.placeholder(tf.string, [])
    option_in = {name: v1.placeholder(tf.string, []) for name in spec["defaults"]}
    set_order = []
    for device in ["/job:ps/task:0"] + [f"/job:worker/task:{w}" for w in range(spec["consumers"])]:
        with v1.device(device):
            set_order.append(ops.geryon_set_order(order_in))
            for name, value in option_in.items():
                set_order.append(ops.geryon_set_sender_option(tf.constant(name), value))
    with v1.device("/job:worker/task:0"):
        take = ops.geryon_take_arrivals(tf.constant(100000, tf.int64))
    init = v1.global_variables_initializer()
classes = Tf1Classes(graph, cluster, thresholds=[1.0])  # every parameter in one class
target = "grpc://" + spec["worker"]
classes.install(target)
feed = {x: [1.0], x_tiny: [1.0]}
samples = []


def settings(variant):
    order, changed = spec["variants"][variant]
    feed = {order_in: order}
    for name, value in {**spec["defaults"], **changed}.items():
        feed[option_in[name]] = value
    return feed


with v1.Session(target, graph=graph) as sess:
    sess.run(init)
    for variant in spec["variants"]:  # warm-up: connections, each fetch's graph, every path
        sess.run(set_order, settings(variant))
        sess.run(take)
        sess.run(mixed, {x: [1.0]})
        sess.run(take)
        sess.run(tiny, {x_tiny: [1.0]})
        sess.run(bulk)
    for r in range(spec["repeats"]):
        for order in spec["variants"]:  # A B C A B C ...: each variant in turn
            sess.run(set_order, settings(order))
            sess.run(take)  # clears the log; logs this step's receives
            start = time.perf_counter()
            value = sess.run(mixed, {x: [1.0]})
            mixed_s = time.perf_counter() - start
            rows = sess.run(take).tolist()
            start = time.perf_counter()
            sess.run(tiny, {x_tiny: [1.0]})
            tiny_s = time.perf_counter() - start
            start = time.perf_counter()
            sess.run(bulk)
            bulk_s = time.perf_counter() - start
            ranks = [row[1] for row in rows if row[1] >= 0]
            ok = all(abs(float(v) - (1 + sum(sizes))) < 1e-3 * (1 + sum(sizes))
                     for v in (value if isinstance(value, list) else [value]))
            samples.append({"repeat": r, "order": order, "mixed_s": mixed_s, "tiny_s": tiny_s,
                            "bulk_s": bulk_s, "ranks": ranks, "value_ok": ok})
        print(f"bench: repeat {r + 1} done", file=sys.stderr, flush=True)
print("RESULT " + json.dumps({"sizes": sizes, "samples": samples}), flush=True)
os._exit(0)
"""


def kendall_tau(seq: list[int]) -> float:
    """Kendall's tau-a of `seq` against its sorted order (1: sorted, -1: reversed)."""
    n = len(seq)
    pairs = n * (n - 1) // 2
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            score += (seq[i] < seq[j]) - (seq[i] > seq[j])
    return score / pairs if pairs else 1.0


def one_run(
    repeats: int, run: int, progress: Progress, variants: list[str], consumers: int = 1
) -> dict[str, Any]:
    offset = str(DATA_OFFSET)
    with tempfile.TemporaryDirectory(prefix="geryon-order-") as tmp:
        ps_port, *worker_ports = free_port_pairs(1 + consumers, DATA_OFFSET)
        cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{p}" for p in worker_ports]}
        counters = str(Path(tmp) / "ps0.json")
        tasks = [("ps", 0)] + [("worker", w) for w in range(consumers)]
        envs = [
            child_env(
                {"cluster": cluster, "job": job, "task": i, "counters": str(Path(tmp) / f"{job}{i}.json")},
                GERYON_DATA_PORT_OFFSET=offset,
            )
            for job, i in tasks
        ]
        with child_servers(_SERVER, envs) as servers:
            progress.say(f"run {run + 1}: {len(tasks)} servers up; measuring")
            spec = {
                "cluster": cluster,
                "worker": cluster["worker"][0],
                "tensors": TENSORS,
                "tiny": TINY,
                "seed": SEED + run,
                "repeats": repeats,
                "bulk_mb": BULK_MB,
                "defaults": SENDER_DEFAULTS,
                "variants": {v: VARIANTS[v] for v in variants},
                "consumers": consumers,
            }
            result = run_client(
                _CLIENT, child_env(spec, GERYON_DATA_PORT_OFFSET=offset), timeout=1800, servers=servers
            )
            time.sleep(0.5)  # one more counters dump after the last step
            rows = json.loads(Path(counters).read_text())
            result["producer"] = [r for r in rows if r["role"] == "producer"]
            return dict(result)


def summarize(result: dict[str, Any], variant: str) -> dict[str, Any]:
    """`variant` against REFERENCE (arrival), paired by repeat."""
    samples = result["samples"]
    by = {o: [s for s in samples if s["order"] == o] for o in (variant, REFERENCE)}
    total_mb = sum(result["sizes"]) * 4 / 1e6
    taus = {o: [kendall_tau(s["ranks"]) for s in by[o]] for o in by}
    pairs = list(zip(by[variant], by[REFERENCE], strict=True))
    ratios = [a["mixed_s"] / u["mixed_s"] for u, a in pairs]  # the variant's throughput over arrival's
    bulk_ratios = [a["bulk_s"] / u["bulk_s"] for u, a in pairs]
    tiny_diff_us = [(u["tiny_s"] - a["tiny_s"]) / TINY * 1e6 for u, a in pairs]
    producer = result["producer"]
    responses = sum(r["messages_sent"] for r in producer)
    return {
        "variant": variant,
        "repeats": len(pairs),
        "tensors": len(result["sizes"]),
        "mixed_mb": total_mb,
        "all_values_ok": all(s["value_ok"] for s in samples),
        "all_ranks_seen": all(
            sorted(s["ranks"])[: len(result["sizes"])] == list(range(len(result["sizes"]))) for s in samples
        ),
        "tau_urgency": statistics.median(taus[variant]),
        "tau_urgency_min": min(taus[variant]),
        "tau_arrival": statistics.median(taus[REFERENCE]),
        "mbps_urgency": total_mb / statistics.median(s["mixed_s"] for s in by[variant]),
        "mbps_arrival": total_mb / statistics.median(s["mixed_s"] for s in by[REFERENCE]),
        "ratio": statistics.median(ratios),
        "ratio_ci": bootstrap_ci(ratios),
        "bulk_mbps_urgency": BULK_MB * 1.048576 / statistics.median(s["bulk_s"] for s in by[variant]),
        "bulk_mbps_arrival": BULK_MB * 1.048576 / statistics.median(s["bulk_s"] for s in by[REFERENCE]),
        "bulk_ratio": statistics.median(bulk_ratios),
        "bulk_ratio_ci": bootstrap_ci(bulk_ratios),
        # Over every variant of the run (the producer's counters are per process).
        "queue_ns_per_response": sum(r["order_ns"] for r in producer) / responses if responses else None,
        "tiny_diff_us": statistics.median(tiny_diff_us),
        "tiny_diff_ci": bootstrap_ci(tiny_diff_us),
        "tiny_us_urgency": statistics.median(s["tiny_s"] for s in by[variant]) / TINY * 1e6,
        "tiny_us_arrival": statistics.median(s["tiny_s"] for s in by[REFERENCE]) / TINY * 1e6,
        "chunks_sent": sum(r["chunks_sent"] for r in producer),
        "preemptions": sum(r["preemptions"] for r in producer),
        "taus": taus,
        "ratios": ratios,
        "bulk_ratios": bulk_ratios,
        "tiny_diff_us_all": tiny_diff_us,
    }


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def check_variants(names: list[str]) -> list[str]:
    """The variants to run, REFERENCE included once (ValueError naming an unknown one)."""
    for name in names:
        if name not in VARIANTS:
            raise ValueError(f"--variants: {name!r} is not one of {', '.join(VARIANTS)}")
    return [REFERENCE, *dict.fromkeys(n for n in names if n != REFERENCE)]


def run(repeats: int, runs: int, out: str, variants: list[str] | None = None, consumers: int = 1) -> int:
    chosen = check_variants(variants or ["urgency"])
    progress = Progress("bench_rendezvous --order")
    build(progress=progress)
    results, summaries, loads = [], [], []
    for r in range(runs):
        before = load_average()
        result = one_run(repeats, r, progress, chosen, consumers)
        loads.append({"before": before, "after": load_average()})
        results.append(result)
        summaries.append([summarize(result, v) for v in chosen if v != REFERENCE])
    rows = []
    for i, per_variant in enumerate(summaries):
        for s in per_variant:
            lo, hi = s["ratio_ci"] or (None, None)
            dlo, dhi = s["tiny_diff_ci"] or (None, None)
            blo, bhi = s["bulk_ratio_ci"] or (None, None)
            rows.append(
                {"run": i + 1, **s, "ratio_lo": lo, "ratio_hi": hi, "diff_lo": dlo, "diff_hi": dhi,
                 "bulk_lo": blo, "bulk_hi": bhi}
            )  # fmt: skip
    print(
        f"{TENSORS} tensors ({summaries[0][0]['mixed_mb']:.1f} MB, seed {SEED}+run) in random request order, "
        f"one class, loopback, pulled by {consumers} worker(s) at once (tau: worker 0's); {repeats} repeats "
        f"of {', '.join(chosen)} in turn per run, {runs} run(s); "
        f"every ratio is the variant's throughput over {REFERENCE}'s, paired by repeat; load average "
        f"(1 min) at the runs' starts: {', '.join(format(x['before'][0], '.1f') for x in loads)}:"
    )
    print_table(
        rows,
        [("run", "run", "d"), ("variant", "variant", "s"), ("tau_urgency", "tau", ".3f"),
         ("tau_urgency_min", "min", ".3f"),
         ("tau_arrival", "tau arr", ".3f"), ("mbps_urgency", "MB/s var", ".0f"),
         ("mbps_arrival", "MB/s arr", ".0f"),
         ("ratio", "var/arr", ".3f"), ("ratio_lo", "lo", ".3f"), ("ratio_hi", "hi", ".3f"),
         ("bulk_mbps_urgency", "64MiB var", ".0f"), ("bulk_mbps_arrival", "64MiB arr", ".0f"),
         ("bulk_ratio", "var/arr", ".3f"), ("bulk_lo", "lo", ".3f"), ("bulk_hi", "hi", ".3f"),
         ("queue_ns_per_response", "queue ns/resp", ".0f"), ("tiny_diff_us", "tiny var-arr us", ".2f"),
         ("diff_lo", "lo", ".2f"), ("diff_hi", "hi", ".2f"), ("chunks_sent", "chunks", "d"),
         ("preemptions", "preempt", "d")],
    )  # fmt: skip
    print(
        f"targets: tau >= {TARGET_TAU}; ordering cost < {TARGET_COST_US} us per tensor; "
        f"urgency throughput >= {TARGET_RATIO:.2f} x arrival's. Values checked: "
        f"{all(s['all_values_ok'] for per in summaries for s in per)}."
    )
    write_json(
        out,
        {
            "tensors": TENSORS,
            "tiny": TINY,
            "seed": SEED,
            "repeats": repeats,
            "runs": runs,
            "consumers": consumers,
            "variants": {v: VARIANTS[v] for v in chosen},
            "sender_defaults": SENDER_DEFAULTS,
            "load_average": loads,
            "targets": {"tau": TARGET_TAU, "cost_us": TARGET_COST_US, "ratio": TARGET_RATIO},
            "summaries": summaries,
            "results": results,
        },
    )
    return 0
