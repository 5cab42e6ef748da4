"""The data plane against itself: two builds of the extension, same workload, interleaved (issue 16).

    .venv/bin/python bench/bench_rendezvous.py --baseline-ref main [--repeats 15] [--runs 3]
    .venv/bin/python bench/bench_rendezvous.py --baseline-lib PATH/libgeryon_rendezvous.so

Two `grpc+geryon` clusters on loopback (one PS and one worker process each): one loads the baseline
library (`--baseline-lib`, or `--baseline-ref REF`: that git ref's native/rendezvous built into its own
cache entry, the same one `geryon native build` makes on that commit), the other this checkout's. One
TF1 client holds a session to each; every round runs every row once on each, the order of the two
alternating from round to round (A B, B A, ...), so both see the same machine load. Rows:
  pull 1 MB, pull 100 MB    one step whose worker receives an N MB float32 variable from the PS
  200 x 4 KiB, 1 x 4 KiB    steps moving 200 (1) float32 variables of 4 KiB each
  per-tensor 4 KiB          (t(200 x 4 KiB) - t(1 x 4 KiB)) / 199 of the same round: what one more
                            4 KiB tensor costs, without the step's fixed cost
  per-tensor over floor     the same less the floor of the same round: the two small rows with the
                            variables on the worker task itself (TensorFlow's own cost of reading and
                            adding a variable, no Send/Recv, no transfer), in a fifth process so that
                            it warms neither build's worker, taking its turn first, between or last
                            among the two builds round by round: the ratio is what the transfer costs
                            on each build, TF's share left out
Per run (fresh processes each): medians per build and the median of per-round paired ratios
baseline / new (> 1: the new build is faster) with a bootstrap 95% interval; across runs, the same
over every run's rounds pooled, with a verdict per target: met (the interval above it), NOT met
(below), not proven (containing it). Targets (issue 16): the
per-tensor ratios >= 2 (the issue's "per-tensor overhead"; both printed), the pulls >= 1. Writes
JSON with `uptime`'s load before and after each run (default out/bench/rendezvous_libs.json).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchlib import (
    PULL_SESSIONS,
    REPO_ROOT,
    child_env,
    child_servers,
    print_table,
    ps_worker_clusters,
    run_client,
    write_json,
)

from geryon.demo.paired import bootstrap_ci
from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tf.build import build

DATA_OFFSET = -7000
BUILDS = ("baseline", "new")
PULLS_MB = (1, 100)
SMALL = 200
SMALL_FLOATS = 1024  # 4 KiB
# The client's small rows (PULL_SESSIONS): 200 x 4 KiB, 1 x 4 KiB, each row run 3 times before timing.
SMALL_SPEC = {"small": SMALL, "small_floats": SMALL_FLOATS, "small_label": "4 KiB", "warmups": 3}
TARGET_PER_TENSOR = 2.0
TARGET_PULL = 1.0

_SERVER = r"""
import json, os, sys, time
from pathlib import Path
import tensorflow as tf
import geryon.tf
spec = json.loads(os.environ["BENCH_SPEC"])
try:
    geryon.tf.load(Path(spec["library"]))  # this cluster's build of the extension
except AttributeError as e:
    # An older build (--baseline-ref) lacks a symbol today's loader binds; the library itself is
    # loaded by then (tf.load_library comes first) and its server protocol registered.
    print(f"note: {e}", file=sys.stderr, flush=True)
server = tf.distribute.Server(
    tf.train.ClusterSpec(spec["cluster"]), job_name=spec["job"], task_index=0, protocol="grpc+geryon"
)
if spec.get("pid_file"):
    Path(spec["pid_file"]).write_text(str(os.getpid()))
print("READY", flush=True)
while True:
    time.sleep(1)
"""

# After PULL_SESSIONS (one session per build): rounds of every row on each build, the order alternating.
_CLIENT = (
    PULL_SESSIONS
    + r"""
names = list(fetches)
samples = {b: {name: [] for name in names} for b in sessions}
# TF's own floor: the same small variables on a worker task of their own (no transfer, no Send/Recv;
# a process of its own, so that neither build's worker is warmed by it); only the small rows exist.
graph = tf.Graph()
with graph.as_default():
    with tf.device("/job:worker/task:0"):
        local = [tf.Variable(tf.zeros([n]), name=f"l{i}") for i in range(spec["small"])]
        local_fetches = {
            f"{spec['small']} x {label}": tf.add_n([tf.identity(v)[0] for v in local]),
            f"1 x {label}": tf.identity(local[0])[0],
        }
    init = tf.compat.v1.global_variables_initializer()
local_sess = tf.compat.v1.Session("grpc://" + spec["floor_worker"], graph=graph)
local_sess.run(init)
for _ in range(spec["warmups"]):
    for f in local_fetches.values():
        local_sess.run(f)
samples["local"] = {name: [] for name in local_fetches}
pair = list(sessions)
for r in range(spec["repeats"]):
    slot = r % 3  # the floor's place among the pair: first, between, last in turn
    order = pair[:slot] + ["local"] + pair[slot:]
    for name in names:
        for build in order:
            sess, f = (local_sess, local_fetches) if build == "local" else sessions[build]
            if name not in f:
                continue
            start = time.perf_counter()
            sess.run(f[name])
            samples[build][name].append(time.perf_counter() - start)
    pair.reverse()  # A B, then B A: neither build always goes first
print("RESULT " + json.dumps(samples), flush=True)
os._exit(0)
"""
)


# --syscalls: the same graphs; after the warm-up the client says WARM and waits for the bench to attach
# strace to the servers, then runs `steps` steps of one row (spec["fetch"]: 200 x 4 KiB, or the 100 MB
# pull) on each build.
_SYSCALL_CLIENT = (
    PULL_SESSIONS
    + r"""
print("WARM", flush=True)
while not os.path.exists(spec["go_file"]):
    time.sleep(0.05)
for build, (sess, f) in sessions.items():
    for _ in range(spec["steps"]):
        sess.run(f[spec["fetch"]])
print("RESULT {}", flush=True)
os._exit(0)
"""
)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def build_ref(ref: str, progress: Progress) -> Path:
    """`ref`'s native/rendezvous, built into the usual cache (the entry is named by the sources' hash,
    so it is the one `geryon native build` makes on that commit)."""
    with tempfile.TemporaryDirectory(prefix="geryon-baseline-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", ref, "native/rendezvous"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise UsageError(f"--baseline-ref: git archive {ref!r} failed: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        return build(source_dir=Path(tmp) / "native" / "rendezvous", progress=progress)


def measure(
    libraries: dict[str, Path], repeats: int, progress: Progress
) -> dict[str, dict[str, list[float]]]:
    offset = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    clusters = ps_worker_clusters((*BUILDS, "floor"), DATA_OFFSET)
    # The floor's worker: a one-task cluster of its own (the new build loaded, its data plane unused).
    floor_cluster = {"worker": clusters.pop("floor")["worker"]}
    workers = {name: cluster["worker"][0] for name, cluster in clusters.items()}
    envs = [
        child_env({"cluster": cluster, "job": job, "library": str(libraries[name])}, **offset)
        for name, cluster in clusters.items()
        for job in ("ps", "worker")
    ]
    envs.append(
        child_env({"cluster": floor_cluster, "job": "worker", "library": str(libraries["new"])}, **offset)
    )
    with child_servers(_SERVER, envs) as servers:
        progress.say(
            "5 servers up (2 builds, the floor's worker); measuring, the client alternates between them"
        )
        spec = {
            "workers": workers,
            "floor_worker": floor_cluster["worker"][0],
            "pulls_mb": list(PULLS_MB),
            **SMALL_SPEC,
            "repeats": repeats,
        }
        result: dict[str, dict[str, list[float]]] = run_client(
            _CLIENT, child_env(spec, **offset), servers=servers
        )
        return result


def _strace_summary(text: str) -> dict[str, int]:
    """Calls per syscall from `strace -c`'s table (columns: % time, seconds, usecs/call, calls, errors,
    syscall)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


MALLOC_EVENT = "probe_libc:malloc"


def _libc_of(pid: str) -> str | None:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1]
        if "/libc.so" in path:
            return path
    return None


@contextmanager
def _malloc_probe(pid: str) -> Iterator[bool]:
    """A uprobe on libc's malloc (`perf probe`), so `perf stat` can count calls; removed afterwards if
    this made it. Yields False (and counts nothing) where perf or uprobes are not available."""
    libc = _libc_of(pid)
    made = False
    if shutil.which("perf") and libc:
        listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True, check=False).stdout
        if MALLOC_EVENT not in listed:
            made = (
                subprocess.run(
                    ["perf", "probe", "-q", "-x", libc, "malloc"], capture_output=True, check=False
                ).returncode
                == 0
            )
            listed = MALLOC_EVENT if made else ""
    try:
        yield MALLOC_EVENT in listed if shutil.which("perf") and libc else False
    finally:
        if made:
            subprocess.run(["perf", "probe", "-q", "-d", MALLOC_EVENT], capture_output=True, check=False)


# What --syscalls counts: (row the client runs, what one step of it moves, how many of them, the pull
# sizes the client builds: one, the row's own or the smallest).
SYSCALL_ROWS = {
    "tensor": (f"{SMALL} x 4 KiB", "4 KiB tensor", SMALL, [1]),
    "pull": (f"pull {PULLS_MB[-1]} MB", f"{PULLS_MB[-1]} MB pull", 1, [PULLS_MB[-1]]),
}


def count_syscalls(
    libraries: dict[str, Path], steps: int, progress: Progress, what: str = "tensor"
) -> dict[str, Any]:
    """Syscalls and malloc calls of the PS and the worker process per unit of SYSCALL_ROWS[what] (per
    4 KiB tensor, or per 100 MB pull) (`strace -c -f`, and `perf stat` on a uprobe on libc's malloc,
    attached to both servers of each build while `steps` steps of that row run): what the frame
    reader and the allocation cuts save, and how often the event loop wakes (epoll_wait) for a large
    pull, counted, not timed (strace slows every call down, so no time from this run is reported).
    Both processes' counts include TF's own calls, the same in both builds; the difference is ours."""
    fetch, _, per_step, pulls_mb = SYSCALL_ROWS[what]
    if shutil.which("strace") is None:
        raise UsageError("--syscalls needs strace (apt-get install strace)")
    offset = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    with tempfile.TemporaryDirectory(prefix="geryon-syscalls-") as tmp:
        clusters = ps_worker_clusters(BUILDS, DATA_OFFSET)
        workers = {name: cluster["worker"][0] for name, cluster in clusters.items()}
        envs, pid_files = [], {}
        for name, cluster in clusters.items():
            for job in ("ps", "worker"):
                pid_files[(name, job)] = Path(tmp, f"{name}-{job}.pid")
                spec = {"cluster": cluster, "job": job, "library": str(libraries[name])}
                envs.append(child_env({**spec, "pid_file": str(pid_files[(name, job)])}, **offset))
        go = Path(tmp, "go")
        with child_servers(_SERVER, envs), ExitStack() as stack:
            spec = {"workers": workers, "pulls_mb": pulls_mb, **SMALL_SPEC}
            client = subprocess.Popen(
                [sys.executable, "-c", _SYSCALL_CLIENT],
                env=child_env({**spec, "fetch": fetch, "steps": steps, "go_file": str(go)}, **offset),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert client.stdout is not None
            try:
                if not client.stdout.readline().startswith("WARM"):
                    raise RuntimeError("the syscall client did not start")
                tracers = {}
                probe = stack.enter_context(_malloc_probe(pid_files[("new", "worker")].read_text().strip()))
                counters = {}
                for key, pid_file in pid_files.items():
                    if probe:  # malloc calls, counted by the kernel (uprobe), not by strace
                        stat = Path(tmp, f"{key[0]}-{key[1]}.perf")
                        pid = pid_file.read_text().strip()
                        command = ["perf", "stat", "-x,", "-e", MALLOC_EVENT, "-o", str(stat), "-p", pid]
                        counters[key] = (subprocess.Popen(command, stderr=subprocess.DEVNULL), stat)
                    out = Path(tmp, f"{key[0]}-{key[1]}.strace")
                    pid = pid_file.read_text().strip()
                    tracers[key] = (
                        subprocess.Popen(
                            ["strace", "-c", "-f", "-o", str(out), "-p", pid], stderr=subprocess.DEVNULL
                        ),
                        out,
                    )
                time.sleep(2)  # every thread attached
                progress.say(f"strace attached to 4 servers; {steps} steps of {fetch} per build")
                go.touch()
                client.wait(timeout=600)
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
            result: dict[str, Any] = {}
            units = steps * per_step
            for key, (tracer, out) in tracers.items():
                tracer.send_signal(signal.SIGINT)
                tracer.wait(timeout=60)
                calls = _strace_summary(out.read_text())
                result.setdefault(key[0], {})[key[1]] = {
                    name: round(n / units, 2) for name, n in sorted(calls.items()) if n >= units // 10
                }
            for key, (perf, stat) in counters.items():
                perf.send_signal(signal.SIGINT)
                perf.wait(timeout=60)
                for line in stat.read_text().splitlines():
                    fields = line.split(",")
                    if len(fields) > 2 and fields[2] == MALLOC_EVENT and fields[0].isdigit():
                        result[key[0]][key[1]]["malloc"] = round(int(fields[0]) / units, 2)
            return result


def per_tensor(samples: dict[str, list[float]]) -> list[float]:
    """Per round: (t(200 x 4 KiB) - t(1 x 4 KiB)) / 199, seconds."""
    many, one = samples[f"{SMALL} x 4 KiB"], samples["1 x 4 KiB"]
    return [(m - o) / (SMALL - 1) for m, o in zip(many, one, strict=True)]


def over_floor(samples: dict[str, dict[str, list[float]]], build_name: str) -> list[float]:
    """Per round: a build's per-tensor 4 KiB cost minus the floor's (the same variables on the worker's
    own task) in that round: what the transfer adds to TensorFlow's own per-tensor work."""
    floor = per_tensor(samples["local"])
    return [t - f for t, f in zip(per_tensor(samples[build_name]), floor, strict=True)]


def summarize(samples: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    series = {b: {**samples[b], "per-tensor 4 KiB": per_tensor(samples[b])} for b in BUILDS}
    if "local" in samples:  # JSON of runs before the floor was measured beside lack it
        for b in BUILDS:
            series[b]["per-tensor over floor"] = over_floor(samples, b)
    rows = []
    for name in series["new"]:
        base, new = series["baseline"][name], series["new"][name]
        # A round whose cost over the floor is not positive (noise larger than the cost) has no
        # ratio; "pairs" says how many rounds remain.
        ratios = [b / n for b, n in zip(base, new, strict=True) if n > 0 and b > 0]
        ci = bootstrap_ci(ratios)
        unit = 1e6 if name.startswith("per-tensor") else 1e3
        row: dict[str, Any] = {
            "what": name,
            "unit": "us" if unit == 1e6 else "ms",
            "baseline": statistics.median(base) * unit,
            "new": statistics.median(new) * unit,
            "ratio": statistics.median(ratios) if ratios else None,
            "ci_low": ci[0] if ci else None,
            "ci_high": ci[1] if ci else None,
            "pairs": len(ratios),
            "round_ratios": ratios,  # for the pooled figure across runs
        }
        if name.startswith("pull"):
            mb = int(name.split()[1])
            row["baseline_mbps"] = mb / statistics.median(base)
            row["new_mbps"] = mb / statistics.median(new)
        rows.append(row)
    return rows


def print_syscalls(counts: dict[str, Any], what: str = "tensor") -> None:
    names = ("recvfrom", "sendmsg", "epoll_wait", "ioctl", "futex", "malloc")
    rows = []
    for build_name in BUILDS:
        for job in ("ps", "worker"):
            per = counts[build_name][job]
            rows.append({"build": build_name, "process": job, **{n: per.get(n, 0.0) for n in names}})
    print(
        f"\nsyscalls per {SYSCALL_ROWS[what][1]} (strace -c -f on the servers; recv() is recvfrom),"
        " and malloc calls (perf stat on a uprobe; 0 where perf or uprobes are missing):"
    )
    print_table(rows, [("build", "build", "s"), ("process", "process", "s"), *[(n, n, ".2f") for n in names]])


def run(
    baseline_lib: str | None,
    baseline_ref: str | None,
    repeats: int,
    runs: int,
    out: str,
    syscall_steps: int = 0,
) -> int:
    progress = Progress("bench_rendezvous --baseline")
    new = build(progress=progress)
    if baseline_lib is not None:
        baseline = Path(baseline_lib).resolve()
        if not baseline.is_file():
            raise UsageError(
                f"--baseline-lib: {baseline_lib} is not a file (a built libgeryon_rendezvous.so)"
            )
    else:
        assert baseline_ref is not None
        baseline = build_ref(baseline_ref, progress)
    libraries = {"baseline": baseline, "new": new}
    progress.say(f"baseline {baseline}\n  new      {new}")
    results = []
    for i in range(runs):
        load_before = _uptime()
        samples = measure(libraries, repeats, progress)
        rows = summarize(samples)
        load_after = _uptime()
        print(f"\nrun {i + 1} of {runs}: {repeats} rounds; load before: {load_before}; after: {load_after}")
        print_table(
            rows,
            [("what", "what", "s"), ("unit", "unit", "s"), ("baseline", "baseline", ".2f"),
             ("new", "new", ".2f"), ("baseline_mbps", "base MB/s", ".0f"), ("new_mbps", "new MB/s", ".0f"),
             ("ratio", "base/new", ".2f"), ("ci_low", "95% lo", ".2f"), ("ci_high", "95% hi", ".2f")],
        )  # fmt: skip
        floor_us = statistics.median(per_tensor(samples["local"])) * 1e6
        print(
            f"floor: {floor_us:.2f} us per 4 KiB tensor with the variables on the worker's own task (TF's"
            " own cost, no transfer); 'per-tensor over floor' is each build's per-tensor cost less the"
            " floor of the same round"
        )
        results.append(
            {
                "rows": rows,
                "floor_us": floor_us,
                "samples_s": samples,
                "load_before": load_before,
                "load_after": load_after,
            }
        )
    print(
        "\nacross runs (median of per-round ratios baseline/new, each run's; then pooled: the median of"
        " every run's round ratios together, bootstrap 95% interval):"
    )
    pooled = {}
    for name in [r["what"] for r in results[0]["rows"]]:
        rows = [next(r for r in res["rows"] if r["what"] == name) for res in results]
        every = [x for row in rows for x in row["round_ratios"]]
        ci = bootstrap_ci(every)
        pooled[name] = {
            "ratio": statistics.median(every) if every else None,
            "ci_low": ci[0] if ci else None,
            "ci_high": ci[1] if ci else None,
            "pairs": len(every),
        }
        targets = {"per-tensor": TARGET_PER_TENSOR, "pull": TARGET_PULL}
        target = next((t for prefix, t in targets.items() if name.startswith(prefix)), None)
        verdict = ""
        if target is not None and ci:
            verdict = "met" if ci[0] >= target else ("NOT met" if ci[1] < target else "not proven")
            verdict = f" target >= {target}: {verdict}"
        pooled_text = f"{pooled[name]['ratio']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "-"
        print(
            f"  {name:21s} " + "  ".join(f"{r['ratio']:.2f}" for r in rows)
            + f"  | pooled {pooled_text} ({len(every)} pairs){verdict}"
        )  # fmt: skip
    syscalls, pull_syscalls = None, None
    if syscall_steps > 0:
        syscalls = count_syscalls(libraries, syscall_steps, progress)
        print_syscalls(syscalls)
        # The large pull: how many loop wake-ups and reads a 100 MB response takes (a tenth of the
        # steps: each moves 25,000 times the bytes of a 4 KiB tensor, and strace slows every call).
        pull_syscalls = count_syscalls(libraries, max(1, syscall_steps // 10), progress, "pull")
        print_syscalls(pull_syscalls, "pull")
    write_json(
        out,
        {
            "syscalls_per_tensor": syscalls,
            "syscalls_per_pull_mb": {"mb": PULLS_MB[-1], "counts": pull_syscalls},
            "syscall_steps": syscall_steps,
            "baseline_library": str(baseline),
            "baseline_ref": baseline_ref,
            "new_library": str(new),
            "repeats": repeats,
            "runs": results,
            "cpus": os.cpu_count(),
            "targets": {"per_tensor_ratio": TARGET_PER_TENSOR, "pull_ratio": TARGET_PULL},
            "pooled": pooled,
        },
    )
    return 0


# --floor: what a 4 KiB tensor costs without our transport. One grpc+geryon cluster (this build) and
# one plain grpc cluster; the client's sessions: "geryon" and "grpc" (variables on the PS), "local"
# (the same variables on the worker's own task: TF's own per-op cost, no transfer).
_FLOOR_CLIENT = r"""
import json, os, time
import tensorflow as tf
spec = json.loads(os.environ["BENCH_SPEC"])
tf.compat.v1.disable_eager_execution()
sessions = {}
for name, (worker, place) in spec["targets"].items():
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(place):
            small = [tf.Variable(tf.zeros([spec["floats"]]), name=f"s{i}") for i in range(spec["small"])]
        with tf.device("/job:worker/task:0"):
            many = tf.add_n([tf.identity(v)[0] for v in small])
            one = tf.identity(small[0])[0]
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session("grpc://" + worker, graph=graph)
    sess.run(init)
    for _ in range(3):
        sess.run(many)
        sess.run(one)
    sessions[name] = (sess, many, one)
samples = {name: [] for name in sessions}
for _ in range(spec["repeats"]):
    for name, (sess, many, one) in sessions.items():  # round robin: the same load for all three
        t0 = time.perf_counter()
        sess.run(many)
        t1 = time.perf_counter()
        sess.run(one)
        t2 = time.perf_counter()
        samples[name].append(((t1 - t0) - (t2 - t1)) / (spec["small"] - 1))
print("RESULT " + json.dumps(samples), flush=True)
os._exit(0)
"""


def run_floor(repeats: int, out: str) -> int:
    """Per-tensor 4 KiB cost, (t(200) - t(1)) / 199 per round: this build's data plane, plain grpc,
    and the variables on the worker's own task (the floor that any transport adds to)."""
    progress = Progress("bench_rendezvous --floor")
    build(progress=progress)
    from bench_rendezvous import DATA_PORT_ENV, protocol_clusters  # here: it imports this module

    load_before = _uptime()
    with protocol_clusters(("grpc+geryon", "grpc")) as (clusters, servers):
        geryon_worker, grpc_worker = clusters["grpc+geryon"]["worker"][0], clusters["grpc"]["worker"][0]
        targets = {
            "geryon": (geryon_worker, "/job:ps/task:0"),
            "grpc": (grpc_worker, "/job:ps/task:0"),
            "local": (geryon_worker, "/job:worker/task:0"),
        }
        progress.say("4 servers up; the client runs geryon, grpc and local round robin")
        spec = {"targets": targets, "small": SMALL, "floats": SMALL_FLOATS, "repeats": repeats}
        samples: dict[str, list[float]] = run_client(
            _FLOOR_CLIENT, child_env(spec, **DATA_PORT_ENV), servers=servers
        )
    load_after = _uptime()
    rows = []
    for name, values in samples.items():
        ordered = sorted(values)
        rows.append(
            {
                "what": name,
                "median_us": statistics.median(values) * 1e6,
                "q25_us": ordered[len(ordered) // 4] * 1e6,
                "q75_us": ordered[(3 * len(ordered)) // 4] * 1e6,
            }
        )
    print(f"\nper-tensor 4 KiB, {repeats} rounds; load before: {load_before}; after: {load_after}")
    print_table(
        rows,
        [("what", "what", "s"), ("median_us", "median us", ".1f"), ("q25_us", "q25 us", ".1f"),
         ("q75_us", "q75 us", ".1f")],
    )  # fmt: skip
    write_json(
        out,
        {
            "rows": rows,
            "samples_s": samples,
            "repeats": repeats,
            "load_before": load_before,
            "load_after": load_after,
        },
    )
    return 0
