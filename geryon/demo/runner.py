"""Runs the demo: a testbed, then per mode the TF tasks in their hosts and the chief's training loop.

    result = run_demo(config, out_dir, progress)       # one testbed, every mode; the result JSON
    results = run_bench(config, out_dir, progress)     # list-valued knobs: one result per combination

Per mode (see geryon.demo.modes): set the switch (priority or fifo), read the switch's class
counters, start one `python -m geryon.cluster.task` per PS and worker in its host (tb.popen), wait for
READY, run `python -m geryon.demo.chief` in the chief host and follow its JSON lines (progress on
stderr), read the counters again (the run's share is the difference), stop the tasks by PID. A mode
that fails records its error and the others still run; the testbed always comes down (the `with`,
plus SIGTERM turned into an exception so the `with` unwinds; `geryon testbed down` cleans up after
a kill -9). The result JSON follows demo_common's schema ("format": "geryon.demo", version 1).

With `profile_source` "cluster" (the default) the first run of CAPTURE_MODES also traces worker 0
(its task gets a profiler server; geryon.demo.capture runs beside it in worker0's host, protocol in
that module) for CAPTURE_MS over unmeasured rounds the chief runs after the measured ones
("trace_tail_s" in its spec); the profile (or why there is none) goes to `result["incluster"]` and
from there into the prediction (geryon.demo.predict). The single mode's first run is traced the same
way into `result["incluster_single"]`: one worker computes on the 2 cores there, not two, so its
compute is measured in its own cluster and its prediction uses that profile. So is the paired
modes' first cluster (`result["incluster_paired"]`, over unmeasured rounds of its rotation): its
tasks run Geryon's data plane, not gRPC.

Beside the measured job, for the whole run: the background stream (`background`, default half the
link rate) and, with cfg["second_job"], a second training job on the same hosts and links
(geryon.demo.secondjob); both are stopped by PID when the run ends and reported in the result.

The paired modes (geryon, paper, endhost: modes.Mode.paired) share one cluster instead (PairedRun):
the chief alternates them round by round and, before each round, asks the runner (a "round" line;
the runner answers "go" on its stdin) to set the switch's queue mode and read the counters, so each
mode keeps its own bytes. Each paired mode still gets its own run record, with `paired` naming the
rotation. Within a repeat the grpc modes and the paired cluster run in MODES' order.

The defaults, and why they are what they are: geryon.demo.defaults; the config's validation:
geryon.demo.config; the processes' helpers (line readers, READY, stop by PID): geryon.cluster.procs.

"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from geryon.cluster.procs import REPO_ROOT, LineReader, base_env, stop, wait_ready
from geryon.cluster.protocol import MARKER
from geryon.demo import modes as modes_mod
from geryon.demo.config import bench_configs, validate
from geryon.demo.defaults import (
    BACKGROUND_DSCP,
    BACKGROUND_HOST,
    BACKGROUND_MAX_S,
    BACKGROUND_PORT,
    CAPTURE_MODES,
    CAPTURE_MS,
    CHIEF_STALL_S,
    DEFAULTS,
    GRPC_PORT,
    PAIRED,
    PROFILER_PORT,
    SHAPE,
    SHAPE_WHY,
    SINGLE_MODE,
    TASK_START_S,
    TRACE_MARGIN_S,
    chief_spec,
    class_dscp,
    host_names,
    intent_for,
    task_spec,
)
from geryon.demo.lines import result_line, step_line
from geryon.demo.local import run_local
from geryon.demo.secondjob import second_job
from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.testbed.procs import cpu_per_round, cpu_snapshot
from geryon.units import format_rate

FORMAT = "geryon.demo"
VERSION = 1

Progressish = Progress | None


def cluster_for(tb: Any, cfg: dict[str, Any], workers: int) -> dict[str, list[str]]:
    def at(host: str) -> str:
        return f"{tb.address(host)}:{GRPC_PORT}"

    return {
        "chief": [at("chief")],
        "worker": [at(f"worker{i}") for i in range(workers)],
        "ps": [at(f"ps{i}") for i in range(cfg["ps"])],
    }


def counter_add(total: dict[str, Any], delta: dict[str, Any]) -> None:
    """Adds a counter_delta into `total` (same shape), in place."""
    for host, classes in delta.items():
        for cls, values in classes.items():
            into = total.setdefault(host, {}).setdefault(str(cls), {})
            for k, v in values.items():
                into[k] = into.get(k, 0) + int(v)


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """after - before per host and class (JSON keys: class index as a string)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for host, classes in after.items():
        out[host] = {}
        for cls, values in classes.items():
            base = before.get(host, {}).get(cls, {})
            out[host][str(cls)] = {k: int(v) - int(base.get(k, 0)) for k, v in values.items()}
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class ModeRun:
    """One mode of one repeat: tasks up, chief to the end, counters, tasks down."""

    def __init__(
        self,
        tb: Any,
        cfg: dict[str, Any],
        mode: modes_mod.Mode,
        repeat: int,
        thresholds: list[float] | None,
        want_params: bool,
        log_dir: Path,
        progress: Progress,
    ) -> None:
        self.tb, self.cfg, self.mode, self.repeat = tb, cfg, mode, repeat
        self.thresholds = thresholds
        self.want_params = want_params
        self.log_dir = log_dir
        self.progress = progress
        self.workers = 1 if mode.single_worker else cfg["workers"]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.params: list[dict[str, Any]] | None = None
        # capture=True: trace worker 0 during this run (see geryon.demo.capture); the outcome goes to
        # `incluster` ({"mode", "service", "duration_ms", "profile" | None, "error" | None}).
        self.capture = False
        self.incluster: dict[str, Any] | None = None
        self._capture_reader: LineReader | None = None
        self._trace_asked = False
        self._capture_spec: dict[str, Any] = {}
        self._capture_ready = False
        self._cpu_ready: dict[str, float] | None = None  # every process's CPU when the chief was ready

    def say(self, message: str) -> None:
        self.progress.say(f"mode {self.mode.name}: {message}")

    def new_record(self, mode: modes_mod.Mode) -> dict[str, Any]:
        return {
            "mode": mode.name,
            "repeat": self.repeat,
            "workers": self.workers,
            "ps": self.cfg["ps"],
            "slice_bytes": self.cfg["slice_bytes"] if mode.partitioned else None,
            "protocol": mode.protocol,
            "switch": mode.switch,
            "partitioned": mode.partitioned,
            "order": mode.order,
            "single_class": mode.single_class,
            "paired": None,
            "step_times": [],
            "median_step_s": None,
            "images_per_s": None,
            "thresholds": None,
            "search": None,
            "switch_counters": None,
            "wall_s": None,
            "error": None,
        }

    def run_all(self) -> list[dict[str, Any]]:
        """This run's records: one (PairedRun: one per mode of its rotation)."""
        return [self.run()]

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        record = self.new_record(self.mode)
        try:
            self._run(record)
        except Exception as e:
            record["error"] = str(e) or type(e).__name__
        finally:
            for proc in self.procs.values():
                stop(proc)
            record["pids"] = {h: proc.pid for h, proc in self.procs.items()}
            record["wall_s"] = round(time.monotonic() - started, 3)
        return record

    def _run(self, record: dict[str, Any]) -> None:
        tb, cfg = self.tb, self.cfg
        tb.set_switch(self.mode.switch)
        before = tb.class_counters()
        cluster = cluster_for(tb, cfg, self.workers)
        self._start_tasks(cluster)
        spec = chief_spec(cfg, self.mode, cluster, self.thresholds, self.want_params)
        if self.capture:
            spec["trace_tail_s"] = CAPTURE_MS / 1000 + TRACE_MARGIN_S
        done = self._chief(spec, record)
        after = tb.class_counters()
        record["switch_counters"] = counter_delta(before, after)
        self._fill(record, done)
        self._finish_capture()

    def _start_tasks(self, cluster: dict[str, list[str]]) -> dict[str, int]:
        """One task per PS and worker in its host; returns once every one printed READY."""
        cfg = self.cfg
        self.self_check_hosts(cluster)
        env = base_env()
        self.say(f"starting {len(cluster['ps'])} PS and {self.workers} worker task(s) ({self.mode.protocol})")
        readers: dict[str, LineReader] = {}
        for job in ("ps", "worker"):
            for index in range(len(cluster[job])):
                host = f"{job}{index}"
                spec = task_spec(
                    cluster,
                    job,
                    index,
                    self.mode.protocol,
                    cfg["threads"],
                    class_dscp=class_dscp(cfg["classes"]) if self.mode.classes else None,
                )
                if self.capture and job == "worker" and index == 0:
                    spec["profiler_port"] = PROFILER_PORT
                self.procs[host] = self._popen(
                    host, [sys.executable, "-m", "geryon.cluster.task", json.dumps(spec)], env
                )
                readers[host] = LineReader(self.procs[host])
        if self.capture:
            self._start_capture(env)
        deadline = time.monotonic() + TASK_START_S
        wait_ready(readers, self.procs, TASK_START_S, tail=self._tail)
        if self._capture_reader is not None:
            # Its TF import done before the chief starts: not competing with any timed round.
            try:
                self._capture_wait(self._capture_reader, "READY", max(deadline - time.monotonic(), 10))
                self._capture_ready = True
            except RuntimeError as e:
                if self.incluster is not None:
                    self.incluster["error"] = str(e)
        return {h: p.pid for h, p in self.procs.items()}

    # --- the in-cluster profile (geryon.demo.capture's protocol) ----------------------------------
    def _start_capture(self, env: dict[str, str]) -> None:
        """The capture process in worker 0's host: it imports TF while the cluster starts."""
        cfg = self.cfg
        label = f"{self._label()}-capture"
        spec = {
            "service": f"grpc://127.0.0.1:{PROFILER_PORT}",  # worker 0's loopback: off the shaped links
            "duration_ms": CAPTURE_MS,
            "model": cfg["model"],
            "input_shape": cfg["input_shape"],
            "batch_size": cfg["batch_size"],
            "mode": self._capture_mode(),
            "logdir": str(self.log_dir / f"{label}-trace"),
            "out": str(self.log_dir / f"{label}-profile.json"),
        }
        self.incluster = {
            "mode": self._capture_mode(),
            "host": "worker0",
            "service": spec["service"],
            "duration_ms": CAPTURE_MS,
            "profile": None,
            "error": "the capture did not finish",
        }
        self._capture_spec = spec
        log = (self.log_dir / f"{label}.log").open("w")
        try:
            proc: subprocess.Popen[str] = self.tb.popen(
                "worker0",
                [sys.executable, "-m", "geryon.demo.capture", json.dumps(spec)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=str(REPO_ROOT),
                text=True,
            )
        finally:
            log.close()
        self.procs["capture"] = proc
        self._capture_reader = LineReader(proc)

    def _tell_capture(self, line: str | None) -> None:
        """A line to the capture process's stdin (None: close it); a dead capture is not an error here."""
        proc = self.procs.get("capture")
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if line is None:
                proc.stdin.close()
            else:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()

    def _on_trace(self) -> None:
        """The chief's measured steps are over and it waits: start the trace, then let it run its
        tail rounds. A capture that is not ready only loses the profile; the chief always goes on."""
        try:
            if self._capture_reader is None or self.incluster is None or not self._capture_ready:
                raise RuntimeError((self.incluster or {}).get("error") or "the capture process did not start")
            self._trace_asked = True
            self._tell_capture("trace")
            self._capture_wait(self._capture_reader, "TRACING", 30)
            self.say(f"tracing worker 0 for {CAPTURE_MS} ms over unmeasured rounds (in-cluster profile)")
        except Exception as e:
            if self.incluster is not None:
                self.incluster["error"] = str(e) or type(e).__name__
        chief = self.procs["chief"]
        assert chief.stdin is not None
        chief.stdin.write("go\n")
        chief.stdin.flush()

    def _finish_capture(self) -> None:
        """Waits for the trace, has it converted, loads the profile; failures only record why."""
        reader, rec = self._capture_reader, self.incluster
        if reader is None or rec is None:
            return
        try:
            if not self._trace_asked:
                raise RuntimeError(rec["error"] or "the chief never asked for the trace")
            self._capture_wait(reader, "TRACED", CAPTURE_MS / 1000 + 120)
            self._tell_capture("convert")
            self._tell_capture(None)
            self._capture_wait(reader, "DONE", 180)
            from geryon.threshold.profile import Profile

            profile = Profile.load(self._capture_spec["out"])
            rec["profile"] = profile.to_dict()
            rec["error"] = None
            rec["steps"] = profile.meta.get("steps")
            rec["compute_s"] = profile.compute_s
            rec["unattributed_s_per_step"] = profile.meta.get("unattributed_s_per_step")
            self.say(
                f"in-cluster profile: C = {profile.compute_s * 1e3:.1f} ms per step over "
                f"{profile.meta.get('steps')} traced step(s) of worker 0"
            )
        except Exception as e:
            rec["error"] = str(e) or type(e).__name__
            self.say(f"in-cluster profile not captured ({rec['error']}); the prediction falls back")
        finally:
            if "capture" in self.procs:
                stop(self.procs["capture"])

    def _capture_wait(self, reader: LineReader, word: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = reader.get(deadline - time.monotonic())
            except queue.Empty:
                raise RuntimeError(f"capture: no {word} within {timeout_s:.0f} s") from None
            if line is None:
                raise RuntimeError(f"capture exited before {word}: {self._capture_tail()}")
            if line.startswith("ERROR"):
                raise RuntimeError(f"capture: {line[6:]}")
            if line.startswith(word):
                return

    def _capture_tail(self) -> str:
        path = self.log_dir / f"{self._label()}-capture.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = [ln for ln in text.splitlines() if ln.strip() and "oneDNN" not in ln]
        return " | ".join(lines)[-800:]

    def _chief(self, spec: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        """Runs the chief on `spec` and follows it to its "done" event (returned)."""
        spec_path = self.log_dir / f"{self._label()}-chief.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        self.say("tasks ready; training")
        extra = {"stdin": subprocess.PIPE} if spec.get("rotation") or spec.get("trace_tail_s") else {}
        chief = self._popen(
            "chief", [sys.executable, "-m", "geryon.demo.chief", str(spec_path)], base_env(), **extra
        )
        self.procs["chief"] = chief
        return self._follow(LineReader(chief))

    def _on_round(self, event: dict[str, Any]) -> None:
        raise RuntimeError(f"chief: a paired round event in a single-mode run: {event}")

    def self_check_hosts(self, cluster: dict[str, list[str]]) -> None:
        hosts = set(self.tb.hosts)
        for job, names in (("ps", range(len(cluster["ps"]))), ("worker", range(self.workers))):
            for i in names:
                if f"{job}{i}" not in hosts:
                    raise RuntimeError(f"the testbed has no host {job}{i}")

    def _label(self) -> str:
        return f"r{self.repeat}-{self.mode.name}"

    def _capture_mode(self) -> str:
        """What the in-cluster capture names as the mode it traced."""
        return self.mode.name

    def _popen(self, host: str, argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen[str]:
        log = (self.log_dir / f"{self._label()}-{host}.log").open("w")
        try:
            proc: subprocess.Popen[str] = self.tb.popen(
                host, argv, env=env, stdout=subprocess.PIPE, stderr=log, cwd=str(REPO_ROOT), text=True, **kw
            )
        finally:
            log.close()  # the child holds its own copy
        return proc

    def _tail(self, host: str, chars: int = 1500) -> str:
        path = self.log_dir / f"{self._label()}-{host}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = [
            ln
            for ln in text.splitlines()
            if ln.strip() and "oneDNN" not in ln and "WARNING: All log" not in ln
        ]
        return " | ".join(lines)[-chars:]

    def _follow(self, reader: LineReader) -> dict[str, Any]:
        """Reads the chief's events until "done" (returned) or "error" / exit / stall (raised)."""
        last_said = 0.0
        last_trial = None
        while True:
            try:
                line = reader.get(CHIEF_STALL_S)
            except queue.Empty:
                raise RuntimeError(f"the chief printed nothing for {CHIEF_STALL_S:.0f} s") from None
            if line is None:
                code = self.procs["chief"].wait()
                raise RuntimeError(f"the chief exited {code} without a result: {self._tail('chief')}")
            if not line.startswith(MARKER):
                continue
            event = json.loads(line[len(MARKER) :])
            kind = event.get("event")
            if kind == "error":
                raise RuntimeError(f"chief: {event['error']}")
            if kind == "done":
                return event
            if kind == "ready":
                self.say(f"cluster connected, model built in {event['seconds']:.1f} s")
                self._cpu_ready = cpu_snapshot(self._pids())
            if kind == "round":
                self._on_round(event)
            if kind == "trace":
                self._on_trace()
            if kind == "step":
                # Every 2 s, and at every new search trial (a quick run would skip them all).
                now = time.monotonic()
                trial = event.get("trial")
                if now - last_said >= 2.0 or event["step"] in (1, event["of"]) or trial != last_trial:
                    last_said = now
                    self.say(step_line(event))
                last_trial = trial

    def _pids(self) -> dict[str, int]:
        return {h: p.pid for h, p in self.procs.items()}

    def _cpu(self, rounds: int) -> dict[str, Any] | None:
        """CPU of each process from the chief's ready to now (testbed.procs.cpu_per_round)."""
        return cpu_per_round(self._cpu_ready, self._pids(), rounds) if self._cpu_ready else None

    def _fill(self, record: dict[str, Any], done: dict[str, Any]) -> None:
        times = [float(t) for t in done["step_times"]]
        record["cpu"] = self._cpu(len(done.get("round_thresholds") or times))
        record["step_times"] = times
        record["warmup_times"] = done.get("warmup_times", [])
        record["round_thresholds"] = done.get("round_thresholds")
        record["losses"] = done.get("losses")
        record["steps_per_round"] = done.get("steps_per_round", 1)  # step times: the round's / this
        record["thresholds"] = done.get("thresholds")
        if done.get("trace_rounds") is not None:
            record["trace_rounds"] = done["trace_rounds"]  # unmeasured, traced (in-cluster profile)
        search = done.get("search")
        median_all = _median(times)
        median = median_all
        if search is not None:
            record["search"] = search
            if search.get("median_converged_s") is not None:
                median = search["median_converged_s"]  # the paper's "when the training is stable"
        record["median_all_s"] = median_all
        record["median_step_s"] = median
        batch = self.cfg["batch_size"] * self.workers
        record["images_per_s"] = batch / median if median else None
        if done.get("params"):
            self.params = done["params"]


class PairedRun(ModeRun):
    """The paired modes (geryon, paper, endhost: one protocol, one partitioning) in ONE cluster,
    alternating round by round (A B C A B C ...; see geryon.demo.chief.train_paired).

    Before each round the chief names the mode; the runner sets the testbed switch to the mode's
    queue mode (priority or fifo), reads the switch's class counters (so each mode's bytes are
    counted apart: set_switch rebuilds the queues, whose counters start again at zero) and answers
    "go" on the chief's stdin. The chief puts the mode's classes and order in force itself. Each
    mode gets its own run record; `paired` in it names the rotation and says rounds alternate.
    """

    def __init__(
        self,
        tb: Any,
        cfg: dict[str, Any],
        names: list[str],
        repeat: int,
        thresholds: list[float],
        want_params: bool,
        log_dir: Path,
        progress: Progress,
    ) -> None:
        self.rotation = [modes_mod.mode(n) for n in names]
        super().__init__(tb, cfg, self.rotation[0], repeat, thresholds, want_params, log_dir, progress)
        self.counters: dict[str, dict[str, Any]] = {m.name: {} for m in self.rotation}
        self.switch_changes = 0
        self._current: str | None = None
        self._before: dict[str, Any] | None = None

    def say(self, message: str) -> None:
        self.progress.say(f"modes {'+'.join(m.name for m in self.rotation)}: {message}")

    def _label(self) -> str:
        return f"r{self.repeat}-paired"

    def _capture_mode(self) -> str:
        return "+".join(m.name for m in self.rotation)  # its trace rounds rotate through them all

    def _new_records(self) -> dict[str, dict[str, Any]]:
        """One record per member of the rotation, by the name its rounds carry."""
        return {m.name: self.new_record(m) for m in self.rotation}

    def _mode_named(self, name: str) -> modes_mod.Mode:
        return modes_mod.mode(name)

    def _spec(self, cluster: dict[str, list[str]]) -> dict[str, Any]:
        return chief_spec(
            self.cfg, self.mode, cluster, self.thresholds, self.want_params, [m.name for m in self.rotation]
        )

    def run_all(self) -> list[dict[str, Any]]:
        started = time.monotonic()
        records = self._new_records()
        for rec in records.values():
            rec["paired"] = {"rotation": list(records), "alternation": "round"}
        try:
            self._run_paired(records)
        except Exception as e:
            for rec in records.values():
                rec["error"] = str(e) or type(e).__name__
        finally:
            for proc in self.procs.values():
                stop(proc)
            wall = round(time.monotonic() - started, 3)
            for name, rec in records.items():
                rec["pids"] = {h: proc.pid for h, proc in self.procs.items()}
                rec["wall_s"] = wall
                rec["switch_counters"] = self.counters[name]
        return list(records.values())

    def _run_paired(self, records: dict[str, dict[str, Any]]) -> None:
        tb, cfg = self.tb, self.cfg
        tb.set_switch(self.rotation[0].switch)
        cluster = cluster_for(tb, cfg, self.workers)
        self._start_tasks(cluster)
        spec = self._spec(cluster)
        if self.capture:
            spec["trace_tail_s"] = CAPTURE_MS / 1000 + TRACE_MARGIN_S
        done = self._chief(spec, next(iter(records.values())))
        self._account()
        self._fill_paired(records, done)
        self._finish_capture()

    def _account(self) -> None:
        """The counters since the last read go to the mode whose round ran since then."""
        now = self.tb.class_counters()
        if self._current is not None and self._before is not None:
            counter_add(self.counters[self._current], counter_delta(self._before, now))
        self._before = now

    def _on_round(self, event: dict[str, Any]) -> None:
        self._account()
        if self.tb.switch_mode != event["switch"]:
            self.tb.set_switch(event["switch"])
            self.switch_changes += 1
            self._before = self.tb.class_counters()  # new queues: their counters start at zero
        self._current = event["mode"]
        chief = self.procs["chief"]
        assert chief.stdin is not None
        chief.stdin.write("go\n")
        chief.stdin.flush()

    def _fill_paired(self, records: dict[str, dict[str, Any]], done: dict[str, Any]) -> None:
        batch = self.cfg["batch_size"] * self.workers
        # One cluster for the rotation: its CPU over every mode's rounds, the same in each record.
        cpu = self._cpu(sum(len(done["modes"][n].get("round_thresholds") or ()) for n in records))
        for name, rec in records.items():
            rec["cpu"] = cpu
            got = done["modes"][name]
            times = [float(t) for t in got["step_times"]]
            schedule = got.get("schedule") or {}
            rec["step_times"] = times
            rec["warmup_times"] = got.get("warmup_times", [])
            if done.get("trace_rounds") is not None:
                # unmeasured, traced (the paired modes' in-cluster profile): this mode's share of them
                rec["trace_rounds"] = len(got.get("trace_times", []))
            rec["round_thresholds"] = got.get("round_thresholds")
            rec["losses"] = done.get("losses")
            rec["steps_per_round"] = done.get("steps_per_round", 1)
            rec["thresholds"] = schedule.get("thresholds")
            rec["classes_used"] = schedule.get("classes_used")
            rec["ordering_available"] = schedule.get("ordering_available")
            rec["order_in_force"] = schedule.get("order_in_force")  # what every task answered
            rec["chunk_bytes"] = schedule.get("chunk_bytes")  # None: the data plane has no chunking
            rec["paired"]["switch_changes"] = self.switch_changes
            if name == done.get("search_mode") and done.get("search") is not None:
                rec["search"] = done["search"]
            elif not self._mode_named(name).single_class:
                rec["thresholds_from"] = "geryon" if done.get("search") else "initial"
            median = _median(times)
            rec["median_all_s"] = median
            rec["median_step_s"] = median
            rec["images_per_s"] = batch / median if median else None
        if done.get("params"):
            self.params = done["params"]


class VariantRun(PairedRun):
    """Variants of the paired modes (geryon.demo.variants: a mode at thresholds and a chunk size of
    its own) in ONE cluster, alternating round by round like PairedRun's modes, without the search;
    one record per variant (its "mode" the variant's mode, "variant" its settings)."""

    def __init__(
        self,
        tb: Any,
        cfg: dict[str, Any],
        variants: list[Any],
        repeat: int,
        log_dir: Path,
        progress: Progress,
    ) -> None:
        names = list(dict.fromkeys(v.mode.name for v in variants))
        super().__init__(tb, cfg, names, repeat, [], False, log_dir, progress)
        self.variants = list(variants)
        self.counters = {v.name: {} for v in self.variants}

    def say(self, message: str) -> None:
        self.progress.say(f"variants ({len(self.variants)}): {message}")

    def _label(self) -> str:
        return f"r{self.repeat}-variants"

    def _new_records(self) -> dict[str, dict[str, Any]]:
        records = {}
        for v in self.variants:
            rec = self.new_record(v.mode)
            rec["variant"] = v.to_dict()
            records[v.name] = rec
        return records

    def _mode_named(self, name: str) -> modes_mod.Mode:
        return next(v.mode for v in self.variants if v.name == name)

    def _spec(self, cluster: dict[str, list[str]]) -> dict[str, Any]:
        spec = super()._spec(cluster)
        spec["variants"] = [v.to_dict() for v in self.variants]
        spec["search"] = None
        first = self.variants[0].thresholds
        spec["thresholds"] = list(first or modes_mod.initial_thresholds(self.cfg["classes"]))
        return spec


# ---------------------------------------------------------------------------------------------
# Signals: SIGTERM (and SIGHUP) unwind like Ctrl-C, so every `with` and `finally` runs.


class Terminated(KeyboardInterrupt):
    pass


@contextlib.contextmanager
def unwinding_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    owner = os.getpid()
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            # A forked child (pyroute2 forks to open sockets in a namespace, then stops the child
            # with SIGTERM): die as the default action would, or its parent waits forever.
            os._exit(128 + signum)
        if fired:
            return  # once is enough: a second signal must not cut the teardown short
        fired.append(signum)
        raise Terminated(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ---------------------------------------------------------------------------------------------
# The demo and the bench


def testbed_spec(cfg: dict[str, Any]) -> Any:
    from geryon.testbed import TestbedSpec

    return TestbedSpec(
        hosts=host_names(cfg["workers"], cfg["ps"], cfg["background_bits"] > 0),
        rate_bits=cfg["rate_bits"],
        buffer_bytes=cfg["buffer_bytes"],
        switch="priority",
        host_queues=True,
        intent=intent_for(cfg["classes"], cfg.get("unmatched_class"), cfg.get("dwrr_weights")),
    )


def check_privileges() -> None:
    if os.geteuid() != 0:
        raise UsageError(
            "the testbed needs root (network namespaces and queues): run as root, or through the "
            "`geryon demo` / `geryon bench` commands, which re-run themselves in a user namespace"
        )


@contextlib.contextmanager
def testbed(cfg: dict[str, Any], progress: Progress) -> Iterator[Any]:
    from geryon import testbed as tbmod

    spec = testbed_spec(cfg)
    with unwinding_signals():
        started = time.monotonic()
        tb = tbmod.up(spec, progress=progress)
        try:
            progress.say(
                f"testbed {tb.run_id} up in {time.monotonic() - started:.1f} s: {', '.join(spec.hosts)}; "
                f"links {format_rate(cfg['rate_bits'])}, {cfg['buffer_bytes'] // 1024} KiB per queue"
            )
            yield tb
        finally:
            tb.down()
            progress.say(f"testbed {tb.run_id} down")


@contextlib.contextmanager
def background(tb: Any, cfg: dict[str, Any], progress: Progress) -> Iterator[dict[str, Any] | None]:
    """With cfg["background_bits"]: a sink in every worker and a paced sender per worker in the bg
    host, for as long as the `with` lasts; then stopped by PID (SIGTERM, each sender reports what it
    sent). Yields the record the result keeps (filled with the senders' reports at the end)."""
    rate = cfg["background_bits"]
    if not rate:
        yield None
        return
    from geryon.testbed import traffic

    workers = [f"worker{i}" for i in range(cfg["workers"])]
    record: dict[str, Any] = {
        "rate_bits_per_worker": rate,
        "dscp": BACKGROUND_DSCP,
        "from": BACKGROUND_HOST,
        "to": workers,
        "senders": [],
    }
    procs: list[subprocess.Popen[str]] = []
    senders: list[subprocess.Popen[str]] = []
    try:
        for w in workers:
            procs.append(traffic.start_sink(tb, w, BACKGROUND_PORT, timeout=BACKGROUND_MAX_S))
        for w in workers:
            p = traffic.start_bulk(
                tb, BACKGROUND_HOST, w, rate, BACKGROUND_DSCP, BACKGROUND_MAX_S, BACKGROUND_PORT
            )
            senders.append(p)
            procs.append(p)
        record["pids"] = [p.pid for p in procs]
        progress.say(
            f"background: {format_rate(rate)} to each of {', '.join(workers)} from {BACKGROUND_HOST} "
            f"(DSCP {BACKGROUND_DSCP})"
        )
        yield record
    finally:
        for p in senders:
            record["senders"].append(traffic.stop_bulk(p))
        for p in procs:
            stop(p)
        sent = [s for s in record["senders"] if "mbit_s" in s]
        if sent:
            record["mbit_s_per_worker"] = statistics.median(s["mbit_s"] for s in sent)
            progress.say(f"background: stopped; {record['mbit_s_per_worker']:.1f} Mbit/s per worker sent")


def shape_note(cfg: dict[str, Any]) -> str | None:
    """SHAPE_WHY when `cfg` (validated) runs SHAPE (a `--model`/`--steps` change keeps it), else None."""
    return SHAPE_WHY if all(cfg.get(k) == v for k, v in SHAPE.items()) else None


def new_result(cfg: dict[str, Any]) -> dict[str, Any]:
    public = {k: cfg[k] for k in DEFAULTS}
    return {
        "format": FORMAT,
        "version": VERSION,
        "config": public,
        "shape_note": shape_note(cfg),
        "params": [],
        "runs": [],
        "summary": None,
        "prediction": None,
        "incluster": None,
        "incluster_single": None,
        "local": [],  # geryon.demo.local's runs, one per repeat: the scaling efficiency's baseline
        "incluster_paired": None,
        "background": None,
        "second_job": None,
    }


def run_modes(tb: Any, cfg: dict[str, Any], log_dir: Path, progress: Progress) -> dict[str, Any]:
    """Every mode (and repeat) of `cfg` on the testbed `tb`; the result without summary/prediction."""
    result = new_result(cfg)
    log_dir.mkdir(parents=True, exist_ok=True)
    search = modes_mod.parse_search(cfg["search"], cfg["classes"])
    paired = [n for n in cfg["modes"] if modes_mod.mode(n).paired]
    if search.strategy == "fixed":
        start = list(search.thresholds or ())
    else:
        start = list(modes_mod.initial_thresholds(cfg["classes"]))
    # The in-cluster profiles: traced in the first run of the capture mode (and of the single mode),
    # again in the next repeat's only if that one failed. Mode -> the result's field for its record.
    capture_mode = next((m for m in CAPTURE_MODES if m in cfg["modes"]), None)
    capture_into: dict[str, str] = {}
    if cfg["profile_source"] == "cluster":
        capture_into = {SINGLE_MODE: "incluster_single", PAIRED: "incluster_paired"}
        if capture_mode is not None:
            capture_into[capture_mode] = "incluster"
    captured: set[str] = set()
    if cfg["profile_source"] == "cluster" and capture_mode is None:
        result["incluster"] = {
            "mode": None,
            "profile": None,
            "error": f"no mode to trace in: the in-cluster profile needs one of {', '.join(CAPTURE_MODES)}",
        }
    for repeat in range(cfg["repeats"]):
        # The grpc modes alternate with the paired group run by run, in MODES' order.
        for name in cfg["modes"]:
            mode = modes_mod.mode(name)
            runner: ModeRun
            if mode.paired:
                if name != paired[0]:
                    continue
                runner = PairedRun(tb, cfg, paired, repeat, start, not result["params"], log_dir, progress)
                field = capture_into.get(PAIRED)
            else:
                runner = ModeRun(tb, cfg, mode, repeat, None, not result["params"], log_dir, progress)
                field = capture_into.get(name)
            runner.capture = field is not None and field not in captured
            runs = runner.run_all()
            if runner.params:
                result["params"] = runner.params
            if field is not None and runner.incluster is not None:
                if runner.incluster["profile"] is not None:
                    captured.add(field)
                result[field] = runner.incluster
            for run in runs:
                result["runs"].append(run)
                progress.say(f"mode {run['mode']}: {result_line(run)}")
        # The paper's single-GPU baseline, once per repeat beside the modes (geryon.demo.local).
        progress.say("single-worker training without PS or network (the scaling baseline)")
        local = run_local(tb, cfg, log_dir, f"r{repeat}-local")
        result["local"].append(local)
        progress.say("local: " + (local["error"] if local.get("error") else result_line(local)))
    return result


def finish(result: dict[str, Any], out_dir: Path, name: str, progress: Progress) -> dict[str, Any]:
    """Summary, prediction (with Geryon's simulated Chrome trace) and charts, then out_dir/name.json.

    The charts and trace of name.json are prefixed name- (so a bench's settings keep their own),
    except demo.json's: throughput.png, scaling.png, search.png, timeline.png, trace-geryon.json."""
    from geryon.demo.chart import chart_prefix

    prefix = chart_prefix(name)
    trace = out_dir / f"{prefix}trace-geryon.json"
    trace.unlink(missing_ok=True)  # a prediction that fails leaves no older run's trace behind
    try:
        from geryon.demo import report

        result["summary"] = report.summarize(result)
    except Exception as e:
        result["summary"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        from geryon.demo import predict

        profile = out_dir / f"profile-{result['config']['model']}-b{result['config']['batch_size']}.json"
        cfg = result["config"]
        result["prediction"] = predict.predict(
            result,
            profile_path=profile,
            progress=progress,
            trace_path=trace,
            profile_source=cfg.get("profile_source", "cluster"),
            ps_costs_path=cfg.get("ps_costs"),
            incast_path=cfg.get("incast"),
        )
    except Exception as e:
        result["prediction"] = {"error": f"{type(e).__name__}: {e}"}
    charts: list[str] = []
    try:
        from geryon.demo import chart

        charts = [str(p) for p in chart.write_charts(result, out_dir, prefix=prefix)]
    except Exception as e:
        progress.say(f"charts failed: {type(e).__name__}: {e}")
    result["charts"] = charts
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    result["path"] = str(path)
    return result


def failed_modes(result: dict[str, Any]) -> list[str]:
    return sorted({r["mode"] for r in result["runs"] if r["error"]})


def native_ready(cfg: dict[str, Any]) -> None:
    """Builds the data plane's library here, once, before any grpc+geryon task starts: a task that
    found it missing would build it itself (minutes on 2 cores) inside its TASK_START_S and fail the
    mode (seen on a fresh clone under load). Cached: instant when it is built."""
    geryon_modes = any(modes_mod.mode(n).protocol == "grpc+geryon" for n in cfg["modes"])
    if geryon_modes or cfg.get("second_job"):
        from geryon.tf.build import build

        build(progress=Progress("geryon native"))


def run_demo(config: dict[str, Any], out_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """The demo: one testbed, every mode of `config` (make_config's keys); writes out_dir/demo.json."""
    cfg = validate({**DEFAULTS, **config})
    progress = progress or Progress("geryon demo")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_privileges()
    native_ready(cfg)
    started = time.monotonic()
    why = shape_note(cfg)
    if why:
        progress.say(why)
    log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=out_dir))
    with (
        testbed(cfg, progress) as tb,
        background(tb, cfg, progress) as bg,
        second_job(tb, cfg, log_dir, progress) as job2,
    ):
        result = run_modes(tb, cfg, log_dir, progress)
        result["testbed"] = {"run_id": tb.run_id, "hosts": list(tb.hosts)}
        result["background"] = bg  # filled with the senders' reports when the `with` ends
        result["second_job"] = job2  # likewise with its rounds
    result["wall_s"] = round(time.monotonic() - started, 1)
    return finish(result, out_dir, "demo", progress)


def run_bench(
    config: dict[str, Any],
    out_dir: Path,
    progress: Progress | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Sweeps: one testbed per (workers, ps, rate, buffer, classes), inside it every slice size;
    writes out_dir/bench-N.json with its charts (bench-N-*.png), out_dir/bench.json (the list of
    results) and out_dir/bench.png (images/s per mode for every setting); returns the list."""
    progress = progress or Progress("geryon bench")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = bench_configs(config)
    check_privileges()
    for cfg in configs:
        native_ready(cfg)  # cached after the first
    results: list[dict[str, Any]] = []
    shape_keys = ("workers", "ps", "rate_bits", "buffer_bytes", "classes", "background_bits", "second_job")

    def shape(c: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(c[k] for k in shape_keys)

    for _, group in itertools.groupby(configs, key=shape):
        group_cfgs = list(group)
        log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=out_dir))
        with (
            testbed(group_cfgs[0], progress) as tb,
            background(tb, group_cfgs[0], progress) as bg,
            second_job(tb, group_cfgs[0], log_dir, progress) as job2,
        ):
            for cfg in group_cfgs:
                progress.say(
                    f"setting: {cfg['workers']} workers, {cfg['ps']} PS, {format_rate(cfg['rate_bits'])}, "
                    f"{cfg['buffer_bytes'] // 1024} KiB, {cfg['classes']} classes, "
                    f"slices {cfg['slice_bytes']} B"
                )
                started = time.monotonic()
                result = run_modes(tb, cfg, Path(tempfile.mkdtemp(prefix="logs-", dir=out_dir)), progress)
                result["testbed"] = {"run_id": tb.run_id, "hosts": list(tb.hosts)}
                result["background"] = bg
                result["second_job"] = job2
                result["wall_s"] = round(time.monotonic() - started, 1)
                name = f"bench-{len(results)}"
                finish(result, out_dir, name, progress)
                results.append(result)
                if on_result:
                    on_result(result)
    path = out_dir / "bench.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    try:
        from geryon.demo import chart

        chart.write_sweep_chart(results, out_dir / "bench.png")
    except Exception as e:
        progress.say(f"sweep chart failed: {type(e).__name__}: {e}")
    return results
