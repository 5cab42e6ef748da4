"""Two training jobs on the demo's testbed, sharing its hosts and links, their bands switched live
(issue 39 item 5; docs/jobs.md): what `bench/bench_jobs_testbed.py` runs.

    with cluster_store(tb, "chief", log_dir) as store:        # etcd in the chief's host, over https
        with TwoJobLaunch(tb, spec_a, store, ...) as a, ...:  # each job's PS, workers and chief
            store.write_bands(policy_bands("combined", ["a", "b"]), hosts)   # every task re-marks live
            a.steps_between(t0, t1)                           # the job's steps inside a window

Each job is the demo's chief driving its own PS and worker tasks (geryon.cluster.task on Geryon's data
plane, the second job on ports of its own, as geryon.demo.secondjob places it). Every task follows
its job's band from the store (geryon.tf.band_follow, GERYON_BANDS_*): a policy is a set of bands
written to bands/hosts/<host> in one transaction, and the tasks' open flows carry the new marks within
milliseconds (docs/jobs.md measured 9-13 ms), without a reconnect or a failed step. The bench writes
the bands itself, as the controller would for each policy (the controller computes only "combined"):

| policy | job class c of the more intense job -> fabric class | of the other job |
|---|---|---|
| fifo | 3 (every class of every job in one queue) | 3 |
| geryon | c (each job's own classes: the two bulks share a queue) | c |
| job-priority | rank 0 (all of the job in one class) | rank 1 |
| combined | geryon.jobs.bands: urgent 0, bulk 2 | urgent 1, bulk 3 |

The store is etcd in the chief's namespace: the tasks reach it at the chief's address over https
(geryon's etcd client allows plain http only to loopback; geryon.testbed.pki makes the certificates),
and the band writer, a small process in the same namespace, at loopback (the bench's own process is in
no namespace of the testbed and cannot reach it).
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geryon.jobs.bands import Demand, compute_bands

POLICIES = ("fifo", "geryon", "job-priority", "combined")
QUEUES = 4  # the fabric's classes: the testbed's intent for 4 classes (geryon.demo.defaults.intent_for)
JOB_CLASSES = 2  # each job's own classes (Geryon's urgent and bulk)
ETCD_PORT = 2379
ETCD_LOCAL_PORT = 2381  # the band writer's loopback endpoint, inside the store's namespace
ETCD_PEER_PORT = 2380
STORE_START_S = 30.0


def policy_bands(
    policy: str, ranked: Sequence[str], queues: int = QUEUES, classes: int = JOB_CLASSES
) -> dict[str, list[int]]:
    """Each job's band (job class c -> fabric class) under `policy`; `ranked`: the jobs, most intense
    first. Pure; ValueError names an unknown policy."""
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
    if policy == "fifo":
        return {job: [queues - 1] * classes for job in ranked}
    if policy == "geryon":
        return {job: list(range(classes)) for job in ranked}
    # Intensities only order the jobs here: the ranking is given.
    one = policy == "job-priority"
    demands = [
        Demand(job, 1 if one else classes, 1.0 - i / (len(ranked) + 1)) for i, job in enumerate(ranked)
    ]
    bands = compute_bands(demands, queues)
    return {job: list(bands[job].classes) * (classes if one else 1) for job in ranked}


# Probes beside the four policies, for what a difference between them comes from (every job alike):
# strict-one puts all of every job in one strict queue (class 1: geryon's bulk queue), geryon-low is
# geryon one level down (urgent in strict class 2, bulk in the DWRR class 3 that fifo uses).
PROBES: dict[str, tuple[int, int] | None] = {
    "strict-one": (1, 1),
    "geryon-low": (2, 3),
    # Combined with the bulks sharing one queue: every job's urgent tensors above every bulk, by rank
    # (the most intense job's on 0, the next's on 1, ...), all bulk in the last (DWRR) queue, FIFO among
    # jobs. What combined gives the less intense job back, and what it costs the other.
    "shared-bulk": None,
}


def bands_for(policy: str, ranked: Sequence[str]) -> dict[str, list[int]]:
    """policy_bands for the four policies, and the PROBES."""
    if policy == "shared-bulk":
        return {job: [min(i, QUEUES - 2), QUEUES - 1] for i, job in enumerate(ranked)}
    band = PROBES.get(policy)
    if band is not None:
        return {job: list(band) for job in ranked}
    return policy_bands(policy, ranked)


@dataclass(frozen=True)
class Window:
    """One policy in force from `start` (the bands written, monotonic s) to `end`."""

    label: str
    cycle: int
    start: float
    end: float


def steps_in(steps: Sequence[tuple[float, float]], start: float, end: float, settle: float) -> list[float]:
    """Step seconds of the steps (end time, seconds) that began at least `settle` after `start` and
    ended by `end`: the ones that ran wholly under one policy, after its marks took hold."""
    return [s for t, s in steps if t - s >= start + settle and t <= end]


class Store:
    """etcd in one testbed host, https for the tasks, loopback http for the band writer beside it."""

    def __init__(self, tb: Any, host: str, log_dir: Path) -> None:
        from geryon.testbed.pki import Authority

        self.tb, self.host, self.log_dir = tb, host, log_dir
        pki_dir = log_dir / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True)
        ca = Authority(pki_dir, "twojobs-ca")
        address = tb.address(host)
        self.server = ca.issue("etcd", server=True, ips=[address])
        self.client = ca.issue("task", server=False)
        self.ca = ca.pem.cert
        self.url = f"https://{address}:{ETCD_PORT}"
        self.generation = 0
        self._etcd: subprocess.Popen[Any] | None = None
        self._writer: subprocess.Popen[str] | None = None
        self._lines: Any = None  # geryon.cluster.procs.LineReader of the band writer's answers
        self._controller: subprocess.Popen[Any] | None = None

    def register_spec(self, job: str, compute_s: float) -> dict[str, Any]:
        """A chief's spec["register"] (geryon.demo.jobmeter) for this store."""
        return {
            "etcd": self.url,
            "cacert": self.ca,
            "cert": self.client.cert,
            "key": self.client.key,
            "job": job,
            "compute_s": compute_s,
        }

    def start_controller(self, hosts: Sequence[str]) -> None:
        """`geryon controller` beside etcd (its loopback endpoint), knowing the testbed `hosts`: it
        bands the jobs the chiefs register, from their measured intensities, instead of the writer."""
        from geryon.cluster.procs import REPO_ROOT, base_env

        argv = [
            sys.executable, "-m", "geryon", "controller",
            "--etcd", f"http://127.0.0.1:{ETCD_LOCAL_PORT}", "--queues", str(QUEUES),
            "--hosts", ",".join(self.tb.address(h) for h in hosts), "--name", "testbed",
        ]  # fmt: skip
        with (self.log_dir / "controller.log").open("w") as log:
            self._controller = self.tb.popen(
                self.host, argv, env=base_env(), stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT)
            )

    def task_env(self, job: str, host: str) -> dict[str, str]:
        """What a task of `job` on `host` needs to follow its band (geryon.tf.band_follow). The band's
        host is the testbed host's address: what the job's registration names its tasks by (the
        cluster spec's host:port), so the controller writes its bands under that key."""
        return {
            "GERYON_BANDS_ETCD": self.url,
            "GERYON_JOB": job,
            "GERYON_BANDS_HOST": self.tb.address(host),
            "GERYON_BANDS_CACERT": self.ca,
            "GERYON_BANDS_CERT": self.client.cert,
            "GERYON_BANDS_KEY": self.client.key,
        }

    def start(self) -> Store:
        import shutil

        from geryon.cluster.procs import REPO_ROOT, LineReader, base_env

        etcd = shutil.which("etcd")
        if etcd is None:
            raise RuntimeError(
                "etcd is not installed (Debian: apt-get install etcd-server; scripts/bootstrap.sh does)"
            )
        data = self.log_dir / "etcd-data"
        local = f"http://127.0.0.1:{ETCD_LOCAL_PORT}"
        peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
        argv = [
            etcd, "--name", "twojobs", "--data-dir", str(data),
            "--listen-client-urls", f"{self.url},{local}", "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"twojobs={peer}", "--initial-cluster-state", "new",
            "--cert-file", self.server.cert, "--key-file", self.server.key,
            "--trusted-ca-file", self.ca, "--client-cert-auth",
        ]  # fmt: skip
        with (self.log_dir / "etcd.log").open("w") as log:
            self._etcd = self.tb.popen(self.host, argv, stdout=log, stderr=subprocess.STDOUT)
        with (self.log_dir / "bandwriter.log").open("w") as log:
            self._writer = self.tb.popen(
                self.host,
                [sys.executable, "-m", "geryon.demo.bandwriter", local],
                env=base_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=str(REPO_ROOT),
                text=True,
            )
        self._lines = LineReader(self._writer)
        line = self._next(STORE_START_S)
        if line != "ready":
            raise RuntimeError(
                f"the store did not start: {line!r} (logs: {self.log_dir}/etcd.log, bandwriter.log)"
            )
        return self

    def _next(self, timeout: float) -> str | None:
        try:
            line = self._lines.get(timeout)
        except queue.Empty:
            return f"no answer in {timeout:.0f} s"
        return None if line is None else line.strip()

    def write_bands(self, bands: Mapping[str, Sequence[int]], hosts: Mapping[str, Sequence[str]]) -> float:
        """Writes one generation: for every host, the bands of the jobs with a task there (`hosts`: job
        -> its hosts), in one transaction; returns when it is written (monotonic s)."""
        assert self._writer is not None and self._writer.stdin is not None
        self.generation += 1
        per_host: dict[str, dict[str, list[int]]] = {}
        for job, job_hosts in hosts.items():
            for h in job_hosts:
                per_host.setdefault(self.tb.address(h), {})[job] = list(bands[job])
        values = {
            h: {"generation": self.generation, "queues": QUEUES, "jobs": jobs} for h, jobs in per_host.items()
        }
        self._writer.stdin.write(json.dumps(values) + "\n")
        self._writer.stdin.flush()
        line = self._next(10.0)
        if line != "ok":
            raise RuntimeError(f"band writer: {line!r} (log: {self.log_dir}/bandwriter.log)")
        return time.monotonic()

    def stop(self) -> None:
        from geryon.cluster.procs import stop

        for proc in (self._controller, self._writer, self._etcd):
            if proc is not None:
                stop(proc)


@contextlib.contextmanager
def cluster_store(tb: Any, host: str, log_dir: Path) -> Iterator[Store]:
    store = Store(tb, host, log_dir)
    try:
        yield store.start()
    finally:
        store.stop()


@dataclass(frozen=True)
class JobSpec:
    name: str
    model: str
    batch_size: int
    port: int
    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]
    chief_host: str = "chief"

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host with a task of the job, the chief's too (its step calls follow the band)."""
        return tuple(dict.fromkeys((*self.ps_hosts, *self.worker_hosts, self.chief_host)))


class Job:
    """One job's tasks and chief in the testbed; its steps as (monotonic end time, seconds)."""

    def __init__(
        self,
        tb: Any,
        spec: JobSpec,
        cfg: dict[str, Any],
        store: Store,
        log_dir: Path,
        marks: dict[str, list[int]],
        register_compute_s: float | None = None,
    ) -> None:
        self.tb, self.spec, self.cfg, self.store, self.log_dir, self.marks = (
            tb,
            spec,
            cfg,
            store,
            log_dir,
            marks,
        )
        # Given: the chief registers the job in the store and meters its intensity with this compute
        # per step (geryon.demo.jobmeter), for a controller to band it.
        self.register_compute_s = register_compute_s
        self.procs: dict[str, Any] = {}
        self.events: Any = None  # geryon.demo.secondjob.ChiefEvents of its chief, once started

    def _popen(self, label: str, host: str, argv: list[str], env: dict[str, str]) -> Any:
        from geryon.cluster.procs import REPO_ROOT

        with (self.log_dir / f"{self.spec.name}-{label}.log").open("w") as log:
            return self.tb.popen(
                host, argv, env=env, stdout=subprocess.PIPE, stderr=log, cwd=str(REPO_ROOT), text=True
            )

    def start(self, first_step_s: float) -> Job:
        from geryon.cluster.models import check_model
        from geryon.cluster.procs import LineReader, base_env, wait_ready
        from geryon.cluster.protocol import MARKER
        from geryon.demo import modes as modes_mod
        from geryon.demo.defaults import TASK_START_S, chief_spec, task_spec
        from geryon.demo.secondjob import MODE, ChiefEvents

        s, tb = self.spec, self.tb
        cluster = {
            "chief": [f"{tb.address(s.chief_host)}:{s.port}"],
            "worker": [f"{tb.address(h)}:{s.port}" for h in s.worker_hosts],
            "ps": [f"{tb.address(h)}:{s.port}" for h in s.ps_hosts],
        }
        readers = {}
        for role, hosts in (("ps", s.ps_hosts), ("worker", s.worker_hosts)):
            for index, host in enumerate(hosts):
                spec = task_spec(cluster, role, index, MODE.protocol, self.cfg["threads"], **self.marks)
                env = {**base_env(), **self.store.task_env(s.name, host)}
                label = f"{role}{index}"
                self.procs[label] = self._popen(
                    label, host, [sys.executable, "-m", "geryon.cluster.task", json.dumps(spec)], env
                )
                readers[label] = LineReader(self.procs[label])
        wait_ready(readers, self.procs, TASK_START_S, name=lambda label: f"job {s.name}: {label}")
        job_cfg = {
            **self.cfg,
            "model": s.model,
            "input_shape": list(check_model(s.model)),
            "batch_size": s.batch_size,
            "steps": 1_000_000,
            "warmup": 1,
            "classes": JOB_CLASSES,
        }
        thresholds = list(modes_mod.initial_thresholds(JOB_CLASSES))
        chief = {**chief_spec(job_cfg, MODE, cluster, thresholds, False), **self.marks}
        if self.register_compute_s is not None:
            chief["register"] = self.store.register_spec(s.name, self.register_compute_s)
        path = self.log_dir / f"{s.name}-chief.json"
        path.write_text(json.dumps(chief, indent=1))
        env = {**base_env(), **self.store.task_env(s.name, s.chief_host)}
        self.procs["chief"] = self._popen(
            "chief", s.chief_host, [sys.executable, "-m", "geryon.demo.chief", str(path)], env
        )
        self.events = ChiefEvents(self.procs["chief"], MARKER)
        self.events.start()
        if not self.events.first_measured.wait(first_step_s) or not self.events.measured():
            raise RuntimeError(
                f"job {s.name}: no step within {first_step_s:.0f} s: "
                + (self.events.error or f"see {self.log_dir}")
            )
        return self

    @property
    def error(self) -> str | None:
        return None if self.events is None else self.events.error

    def steps_between(self, start: float, end: float, settle: float) -> list[float]:
        return steps_in(self.events.measured() if self.events else [], start, end, settle)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values()) and self.error is None

    def stop(self) -> None:
        from geryon.cluster.procs import stop

        if self.events is not None:
            self.events.stopping = True  # what the chief says while its cluster goes down is not its error
        for label in sorted(self.procs, key=lambda name: name != "chief"):  # the chief first
            stop(self.procs[label])
