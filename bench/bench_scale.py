"""Scale (issue 16 item 5): one PS process serves 128 workers x 4 classes of data-plane flows.

    .venv/bin/python bench/bench_scale.py [--workers 128] [--classes 4] [--hosts 4] [--steps 3]
                                          [--library PATH] [--out out/bench/scale.json]

One PS process (a grpc+geryon server) and W worker tasks on loopback. W separate TF processes do not
fit a 2-core, 24 GB machine (each is ~300 MB), so the worker tasks are real grpc+geryon servers
hosted several to a process (`--hosts` processes; TF allows many servers per process, and each has
its own data plane: its own listener, dialer and hello naming its own task). The PS cannot tell
them from separate processes: every flow is a separate TCP connection whose hello names its worker
task, checked against the cluster spec. One client process runs a TF1 session over the whole
cluster: K variables on the PS, one per class (a native map_table binds variable c's reads to
class c), and every worker adds its index to a pull of each variable, so each step makes all
W x K flows carry a real pull (4 KiB), and the client checks every result's bytes.

Rows: per step (the first opens the W x K connections), the step's wall time and how many of the
W x K results were right; then the PS process as /proc shows it after the steps (threads, open
descriptors, RSS, its RLIMIT_NOFILE soft limit) and its producer flows (distinct (worker, class)
pairs that sent a response, from geryon.tf.flow_counters()). The PS's stderr tail is in the JSON
(refused connections are logged there). `--library`: run every process on another build of the
extension (e.g. main's, to record what it did before a change).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import child_env, child_servers, print_table, run_client, write_json

from geryon.progress import Progress
from geryon.tf.build import build
from geryon.tf.ports import free_port_pairs

DATA_OFFSET = -7000
FLOATS = 1024  # 4 KiB per pull

# The PS: a grpc+geryon server that writes its flow counters to spec["counters"] every 0.3 s.
_PS = r"""
import json, os, time
from pathlib import Path
import tensorflow as tf
import geryon.tf
spec = json.loads(os.environ["BENCH_SPEC"])
if spec.get("nofile"):  # a lower soft limit, as a service manager may start it with (e.g. 1024)
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (spec["nofile"], hard))
if spec.get("library"):
    geryon.tf.load(Path(spec["library"]))
server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), "ps", 0)
print("READY", flush=True)
out = spec["counters"]
while True:
    with open(out + ".tmp", "w") as f:
        json.dump([c.__dict__ for c in geryon.tf.flow_counters()], f)
    os.replace(out + ".tmp", out)
    time.sleep(0.3)
"""

# A worker host: the grpc+geryon servers of the worker tasks spec["indices"], in one process.
_HOST = r"""
import json, os, time
from pathlib import Path
import tensorflow as tf
import geryon.tf
spec = json.loads(os.environ["BENCH_SPEC"])
if spec.get("library"):
    geryon.tf.load(Path(spec["library"]))
cluster = tf.train.ClusterSpec(spec["cluster"])
servers = [geryon.tf.server(cluster, "worker", i) for i in spec["indices"]]
print("READY", flush=True)
while True:
    time.sleep(1)
"""

_CLIENT = r"""
import json, os, sys, time
from pathlib import Path
import numpy as np
import tensorflow as tf
import geryon.tf
from geryon.tf.strategy import native_ops
from geryon.tf.tf1 import producer_bindings
spec = json.loads(os.environ["BENCH_SPEC"])
if spec.get("library"):
    geryon.tf.load(Path(spec["library"]))
tf.compat.v1.disable_eager_execution()
W, K, N = spec["workers"], spec["classes"], spec["floats"]
target = "grpc://" + spec["cluster"]["worker"][0]  # the master outside the PS, like a chief
timeout_ms = int(spec["step_timeout_s"] * 1000)
graph = tf.Graph()
with graph.as_default():
    with tf.device("/job:ps/task:0"):
        variables = [
            tf.Variable(tf.range(N, dtype=tf.float32) + 1000.0 * c, name=f"class{c}") for c in range(K)
        ]
    outs = {}
    for i in range(W):
        with tf.device(f"/job:worker/task:{i}"):
            for c, v in enumerate(variables):
                outs[f"{i}/{c}"] = tf.identity(v) + float(i)  # the add runs on the worker: the pulled bytes
    init = tf.compat.v1.global_variables_initializer()
# Variable c's reads -> parameter c -> class c (the TF1 producer bindings, geryon.tf.tf1).
bindings = producer_bindings(graph, {v.op.name: c for c, v in enumerate(variables)})
lines = ["geryon.map_table.native 2", "version 1", f"classes {K}", f"default {K - 1}", f"params {K}"]
lines += [f"{c} {c} {c} class{c}" for c in range(K)]
lines += [f"bindings {len(bindings)}"] + [f"{p} {name}" for name, p in sorted(bindings.items())]
text = "\n".join(lines + ["end"]) + "\n"
ops = native_ops()
install = tf.Graph()
with install.as_default():
    versions = []
    for job, n in (("ps", 1), ("worker", W)):
        for i in range(n):
            with tf.device(f"/job:{job}/task:{i}"):
                versions.append(ops.geryon_set_map_table(tf.constant(text)))
options = tf.compat.v1.RunOptions(timeout_in_ms=timeout_ms)
result = {"bindings": len(bindings), "steps": []}
start = time.perf_counter()
with tf.compat.v1.Session(target, graph=install) as s:
    installed = s.run(versions, options=options)
result["install_s"] = time.perf_counter() - start
assert set(installed) == {1}, installed
sess = tf.compat.v1.Session(target, graph=graph)
sess.run(init, options=options)
expected = [np.arange(N, dtype=np.float32) + 1000.0 * c for c in range(K)]
for step in range(spec["steps"]):
    start = time.perf_counter()
    try:
        got = sess.run(outs, options=options)
        error = None
    except tf.errors.OpError as e:
        got, error = {}, f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
    wall = time.perf_counter() - start
    ok = sum(
        1 for i in range(W) for c in range(K)
        if f"{i}/{c}" in got and np.array_equal(got[f"{i}/{c}"], expected[c] + float(i))
    )
    result["steps"].append({"step": step, "wall_s": wall, "pulls_ok": ok, "error": error})
    print(f"bench: step {step}: {ok} of {W * K} right in {wall:.2f} s {error or ''}", file=sys.stderr)
    if error is not None:
        break
print("RESULT " + json.dumps(result), flush=True)
os._exit(0)
"""


def proc_facts(pid: int) -> dict[str, Any]:
    """Threads, open descriptors, RSS and the soft/hard RLIMIT_NOFILE of a live process, from /proc."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    limits = next(
        line.split()
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
        if line.startswith("Max open files")
    )
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = sum(1 for fd in fds if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
    # Who the threads are (a thread's name, or its creator's where it set none): tells TF's and
    # gRPC's pools from the data plane's.
    names: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
        except OSError:  # ended meanwhile
            continue
        names[name] = names.get(name, 0) + 1
    return {
        "threads": int(status["Threads"]),
        "thread_names": names,
        "fds": len(fds),
        "sockets": sockets,
        "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
        "nofile_soft": int(limits[3]),
        "nofile_hard": int(limits[4]),
    }


def producer_flows(path: Path, classes: int) -> dict[str, Any]:
    """From the PS's flow counters: the distinct (worker task, class) producer flows that answered."""
    rows = json.loads(path.read_text()) if path.exists() else []
    served = {
        (r["peer_task"], r["klass"])
        for r in rows
        if r["role"] == "producer" and r["messages_sent"] > 0 and "/job:worker/" in r["peer_task"]
    }
    return {
        "flows_served": len(served),
        "classes_served": sorted({c for _, c in served}),
        "workers_served": len({t for t, _ in served}),
        "connections": sum(r["connections"] for r in rows if r["role"] == "producer"),
        "errors": sum(r["errors"] for r in rows if r["role"] == "producer"),
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def run_scale(
    workers: int,
    classes: int,
    hosts: int,
    steps: int,
    library: Path | None,
    progress: Progress,
    step_timeout_s: float = 120,
    ps_nofile: int | None = None,
) -> dict[str, Any]:
    """Starts the PS and the worker hosts, runs the client, returns what it and /proc saw.

    A start is retried (3 tries) when a port picked free was taken before its server bound it: on a
    machine shared with other jobs, 129 free ports picked at once race with every other port picker.
    """
    for attempt in range(1, 4):
        try:
            result = _run_once(workers, classes, hosts, steps, library, progress, step_timeout_s, ps_nofile)
        except RuntimeError as e:
            port_taken = any(m in str(e) for m in ("Could not start gRPC server", "already in use"))
            if attempt == 3 or not port_taken:
                raise
            progress.say(f"a port was taken before its server started (try {attempt}); new ports")
            continue
        result["start_attempts"] = attempt
        return result
    raise AssertionError("unreachable")


def _run_once(
    workers: int,
    classes: int,
    hosts: int,
    steps: int,
    library: Path | None,
    progress: Progress,
    step_timeout_s: float,
    ps_nofile: int | None,
) -> dict[str, Any]:
    ports = free_port_pairs(1 + workers, DATA_OFFSET)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    offset = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    lib = str(library) if library is not None else None
    with tempfile.TemporaryDirectory(prefix="geryon-bench-scale-") as tmp:
        counters = Path(tmp) / "ps-counters.json"
        ps_spec = {"cluster": cluster, "counters": str(counters), "library": lib, "nofile": ps_nofile}
        envs = [child_env(ps_spec, **offset, TF_CPP_MIN_LOG_LEVEL="1")]  # the PS's warnings: its limits
        per_host = [list(range(workers))[h::hosts] for h in range(hosts)]
        envs += [
            child_env({"cluster": cluster, "indices": ix, "library": lib}, **offset) for ix in per_host if ix
        ]
        logs = [Path(tmp) / f"server{i}.stderr" for i in range(len(envs))]
        start = time.perf_counter()
        # The PS's script and the hosts' differ: the PS is server 0, started alone first.
        with child_servers(_PS, envs[:1], logs[:1]) as ps, child_servers(_HOST, envs[1:], logs[1:]) as hs:
            up_s = time.perf_counter() - start
            progress.say(f"PS + {len(hs)} worker hosts ({workers} worker servers) up in {up_s:.1f} s")
            before = proc_facts(ps[0].pid)
            hosts_before = [proc_facts(h.pid) for h in hs]  # each server's loop started with it
            spec = {
                "cluster": cluster,
                "workers": workers,
                "classes": classes,
                "floats": FLOATS,
                "steps": steps,
                "library": lib,
                "step_timeout_s": step_timeout_s,
            }
            client = run_client(
                _CLIENT, child_env(spec, **offset), timeout=steps * step_timeout_s + 300, servers=[*ps, *hs]
            )
            time.sleep(0.8)  # the PS writes its counters every 0.3 s
            after = proc_facts(ps[0].pid)
            hosts_facts = [proc_facts(h.pid) for h in hs]
            flows = producer_flows(counters, classes)
        ps_log = logs[0].read_text() if logs[0].exists() else ""
    refused = [line for line in ps_log.splitlines() if "refused a connection" in line]
    return {
        "workers": workers,
        "classes": classes,
        "hosts": hosts,
        "flows_expected": workers * classes,
        "startup_s": up_s,
        "client": client,
        "ps_before": before,
        "ps_after": after,
        "worker_hosts_before": hosts_before,
        "worker_hosts": hosts_facts,
        "producer": flows,
        "ps_nofile_at_start": ps_nofile,
        "ps_refusals": len(refused),
        "ps_log_geryon": [line for line in ps_log.splitlines() if "Geryon data plane" in line][:20],
        "ps_log_tail": ps_log[-3000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=128)
    parser.add_argument("--classes", type=int, default=4, choices=range(1, 9), metavar="1..8")
    parser.add_argument("--hosts", type=int, default=4, help="processes hosting the worker servers")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ps-nofile", type=int, help="start the PS with this RLIMIT_NOFILE soft limit")
    parser.add_argument(
        "--library", type=Path, help="a built libgeryon_rendezvous.so (default: this checkout's)"
    )
    parser.add_argument("--out", default="out/bench/scale.json")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.hosts < 1 or args.steps < 1:
        parser.error("--workers, --hosts and --steps must be at least 1")
    if args.library is not None and not args.library.is_file():
        parser.error(f"--library: {args.library} is not a file (a built libgeryon_rendezvous.so)")
    progress = Progress("bench_scale")
    library = args.library.resolve() if args.library is not None else build(progress=progress)
    load_before = uptime()
    result = run_scale(
        args.workers, args.classes, args.hosts, args.steps, library, progress, ps_nofile=args.ps_nofile
    )
    result.update(library=str(library), uptime_before=load_before, uptime_after=uptime())
    rows = [
        {
            "what": f"step {s['step']}",
            "wall": s["wall_s"],
            "ok": s["pulls_ok"],
            "of": result["flows_expected"],
        }
        for s in result["client"]["steps"]
    ]
    print_table(
        rows, [("what", "step", "s"), ("wall", "wall s", ".2f"), ("ok", "pulls ok", "d"), ("of", "of", "d")]
    )
    for s in result["client"]["steps"]:
        if s["error"]:
            print(f"step {s['step']} failed: {s['error']}")
    ps, flows = result["ps_after"], result["producer"]
    facts = [
        {"k": "flows served (worker, class)", "v": f"{flows['flows_served']} of {result['flows_expected']}"},
        {"k": "PS producer connections", "v": str(flows["connections"])},
        {"k": "PS refused connections (log)", "v": str(result["ps_refusals"])},
        {"k": "PS threads before -> after", "v": f"{result['ps_before']['threads']} -> {ps['threads']}"},
        {"k": "PS fds (sockets) after", "v": f"{ps['fds']} ({ps['sockets']})"},
        {"k": "PS RSS MB before -> after", "v": f"{result['ps_before']['rss_mb']:.0f} -> {ps['rss_mb']:.0f}"},
        {"k": "PS RLIMIT_NOFILE soft/hard", "v": f"{ps['nofile_soft']}/{ps['nofile_hard']}"},
        {"k": "startup s", "v": f"{result['startup_s']:.1f}"},
        {"k": "load", "v": result["uptime_after"].split("load average:")[-1].strip()},
    ]
    print()
    print_table(facts, [("k", "PS process", "s"), ("v", "value", "s")])
    write_json(args.out, result)
    last = result["client"]["steps"][-1]
    return 0 if last["pulls_ok"] == result["flows_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
