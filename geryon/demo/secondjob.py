"""A second, concurrent training job on the demo's testbed (issue 14 item 5): other traffic on the same
links that no end-host scheduler of the measured job can order against.

    with second_job(tb, cfg, log_dir, progress) as record:   # cfg["second_job"]: "MODEL[:BATCH]" or None
        ...measured modes...

The job has its own processes on the measured job's hosts: one PS in ps0's host and one worker in
every worker's host (so its pulls leave ps0's port and arrive on the workers' ports, like the
measured job's), and its own chief in the chief's host. It listens on PORT (its data plane on PORT +
geryon.cluster.procs.DATA_PORT_OFFSET), apart from the measured job's ports. Its tensors travel on Geryon's
data plane with every class marked DSCP (10, AF11: in no class of the demo's intents, so the priority
switch puts it in the least urgent queue, and not the background's 8, so counters tell them apart)
and SO_PRIORITY 0 (the host qdisc's band of unmarked traffic), partitioned like the measured job,
in its data plane's default order (urgency inside a class). It trains STEPS rounds, so it runs until
the `with` ends; then every process is stopped by PID and the record says how many rounds it ran and
their median time.

Why Geryon's data plane and not plain gRPC: only the data plane marks DSCP per flow, and a job in
its own class is what the issue asks for.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from geryon.cluster.models import MODELS, ModelError, check_model
from geryon.cluster.procs import REPO_ROOT, LineReader, base_env, stop, wait_ready
from geryon.cluster.protocol import MARKER
from geryon.demo import modes as modes_mod
from geryon.demo.defaults import TASK_START_S, chief_spec, task_spec
from geryon.errors import UsageError

PORT = 2322  # the measured job's tasks use defaults.GRPC_PORT (2222) in the same hosts
DSCP = 10
PRIORITY = 0
STEPS = 1_000_000  # it trains until stopped
BATCH = 16  # default per-worker batch: vggmini moves 6.4 MB per worker per step in about 50 ms of compute
FIRST_STEP_S = 240.0  # TF import, server start, model build and one round, on 2 loaded cores
MODE = modes_mod.Mode("second-job", "grpc+geryon", True, "priority", True, False, False, "urgency")


def parse(text: str | None) -> str | None:
    """`MODEL[:BATCH]` (or none) -> the canonical "MODEL:BATCH", or None; UsageError names --second-job."""
    if text is None or text.strip().lower() in ("", "none"):
        return None
    model, _, batch = text.strip().partition(":")
    if model not in MODELS:
        raise UsageError(f"--second-job {text!r}: model must be one of {', '.join(MODELS)}")
    try:
        check_model(model)
        size = int(batch) if batch else BATCH
    except (ModelError, ValueError):
        raise UsageError(f"--second-job {text!r}: expected MODEL[:BATCH], BATCH an integer") from None
    if not 1 <= size <= 4096:
        raise UsageError(f"--second-job {text!r}: BATCH must be in 1..4096")
    return f"{model}:{size}"


class ChiefEvents(threading.Thread):
    """Reads a job's chief's JSON lines: counts its rounds, keeps their times and its error, and the
    measured (not warm-up) rounds as (when their line arrived, monotonic s; seconds)."""

    def __init__(self, proc: Any, marker: str) -> None:
        super().__init__(daemon=True)
        self.proc, self.marker = proc, marker
        self.times: list[float] = []
        self.error: str | None = None
        self.first = threading.Event()
        # Set at the first measured round (or an error, or the chief's end), as `first` is at any.
        self.first_measured = threading.Event()
        self.stopping = False
        self._lock = threading.Lock()
        self._measured: list[tuple[float, float]] = []

    def measured(self) -> list[tuple[float, float]]:
        with self._lock:
            return list(self._measured)

    def run(self) -> None:
        for line in self.proc.stdout:
            if not line.startswith(self.marker):
                continue
            event = json.loads(line[len(self.marker) :])
            if event.get("event") == "step":
                seconds = float(event["seconds"])
                self.times.append(seconds)
                if not event.get("warmup"):
                    with self._lock:
                        self._measured.append((time.monotonic(), seconds))
                    self.first_measured.set()
                self.first.set()
            elif event.get("event") == "error" and not self.stopping:
                self.error = str(event.get("error"))
                self.first.set()
                self.first_measured.set()
        self.first.set()  # the chief ended (killed, or failed)
        self.first_measured.set()


@contextlib.contextmanager
def second_job(tb: Any, cfg: dict[str, Any], log_dir: Path, progress: Any) -> Iterator[dict[str, Any] | None]:
    """With cfg["second_job"]: the job trains from before the first measured mode until the `with`
    ends; yields its record (rounds and median round time filled in at the end). A job that fails to
    start raises RuntimeError (the demo then fails whole: its modes would not be what they say)."""
    if not cfg.get("second_job"):
        yield None
        return
    model, batch = cfg["second_job"].split(":")
    workers = [f"worker{i}" for i in range(cfg["workers"])]
    cluster = {
        "chief": [f"{tb.address('chief')}:{PORT}"],
        "worker": [f"{tb.address(w)}:{PORT}" for w in workers],
        "ps": [f"{tb.address('ps0')}:{PORT}"],
    }
    marks = {"class_dscp": [DSCP] * cfg["classes"], "class_priority": [PRIORITY] * cfg["classes"]}
    record: dict[str, Any] = {
        "model": model,
        "batch_size": int(batch),
        "ps": ["ps0"],
        "workers": workers,
        "port": PORT,
        "dscp": DSCP,
        "rounds": 0,
        "median_round_s": None,
        "error": None,
    }
    procs: dict[str, Any] = {}
    env = base_env()

    def popen(host: str, argv: list[str]) -> Any:
        log = (log_dir / f"second-job-{host}.log").open("w")
        try:
            return tb.popen(
                host, argv, env=env, stdout=subprocess.PIPE, stderr=log, cwd=str(REPO_ROOT), text=True
            )
        finally:
            log.close()

    events: ChiefEvents | None = None
    try:
        readers = {}
        for job, hosts in (("ps", ["ps0"]), ("worker", workers)):
            for index, host in enumerate(hosts):
                spec = task_spec(cluster, job, index, MODE.protocol, cfg["threads"], **marks)
                procs[host] = popen(host, [sys.executable, "-m", "geryon.cluster.task", json.dumps(spec)])
                readers[host] = LineReader(procs[host])
        record["pids"] = {h: p.pid for h, p in procs.items()}
        wait_ready(readers, procs, TASK_START_S, name=lambda host: f"second job: {host}'s task")
        job_cfg = {
            **cfg,
            "model": model,
            "input_shape": list(check_model(model)),
            "batch_size": int(batch),
            "steps": STEPS,
            "warmup": 1,
        }
        thresholds = list(modes_mod.initial_thresholds(cfg["classes"]))
        spec = {**chief_spec(job_cfg, MODE, cluster, thresholds, False), **marks}
        spec_path = log_dir / "second-job-chief.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        procs["chief"] = popen("chief", [sys.executable, "-m", "geryon.demo.chief", str(spec_path)])
        events = ChiefEvents(procs["chief"], MARKER)
        events.start()
        if not events.first.wait(FIRST_STEP_S) or not events.times:
            raise RuntimeError(
                f"second job: no round within {FIRST_STEP_S:.0f} s"
                + (f": {events.error}" if events.error else f" (logs: {log_dir}/second-job-*.log)")
            )
        record["pids"] = {h: p.pid for h, p in procs.items()}  # the chief's too
        progress.say(
            f"second job: {model} batch {batch} on ps0 + {', '.join(workers)} (port {PORT}, DSCP {DSCP}), "
            f"first round {events.times[0]:.2f} s"
        )
        yield record
    finally:
        if events is not None:
            events.stopping = True  # what the chief says while its cluster goes down is not its error
        # The chief first: with its tasks gone first it reports them unavailable.
        for host in sorted(procs, key=lambda h: h != "chief"):
            stop(procs[host])
        if events is not None:
            events.join(timeout=10)
            times = events.times[1:]  # the first round builds the graph
            record["rounds"] = len(events.times)
            record["median_round_s"] = statistics.median(times) if times else None
            record["error"] = events.error
        if procs:
            progress.say(f"second job: stopped after {record['rounds']} rounds")
