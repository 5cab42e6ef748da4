"""The testbed's lifecycle: `up` (idempotent), `Testbed` (popen, set_switch, class_counters), `down`
(from any process, also for a run whose creator crashed) and `status`.

Order of `up`: the state file first (so a crash at any later point is cleaned by `down`), then the
namespaces, links and queues. Order of `down`: the recorded processes (by PID and start time), any
process still inside the run's namespaces, the namespaces, the state file last.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from geryon.progress import Progress
from geryon.testbed import build, namespaces, procs, state, userns
from geryon.testbed.counters import Counters, SwitchCounters
from geryon.testbed.queues import HOST_IFNAME, switch_port
from geryon.testbed.spec import RUN_ID, SWITCH_MODES, SpecError, TestbedError, TestbedSpec, new_run_id

PREFIX = "gtb-"


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    ifname: str
    address: str  # IPv4, 10.77.0.x


def _sayer(progress: Progress | Callable[[str], None] | None) -> Callable[[str], None]:
    if progress is None:
        return lambda _msg: None
    if isinstance(progress, Progress):
        return progress.say
    return progress


def _check_privileges() -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            "the testbed needs root (network namespaces, qdiscs); without root run it inside an "
            "unprivileged user namespace: `geryon testbed up --exec CMD...` (the testbed then lives as "
            "long as CMD), or `unshare -Urnm` with a private tmpfs on /run"
        )


def _spec_json(spec: TestbedSpec) -> dict[str, Any]:
    return {
        "hosts": list(spec.hosts),
        "rate_bits": spec.rate_bits,
        "buffer_bytes": spec.buffer_bytes,
        "burst_bytes": spec.burst,
        "switch": spec.switch,
        "host_queues": spec.host_queues,
        "offloads": spec.offloads,
        "intent": "default" if spec.intent is None else str(getattr(spec.intent, "name", "custom")),
    }


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "start": procs.start_time(os.getpid())}


class Testbed:
    """A testbed that is up. Use `up()` to get one; `with` (or down()) tears it down."""

    __test__ = False  # not a pytest test class

    def __init__(self, spec: TestbedSpec, run_id: str, mode: str) -> None:
        self.spec = spec
        self.run_id = run_id
        self.switch_mode = mode
        self.switch_netns = build.switch_ns(run_id)
        self.hosts: dict[str, Host] = {
            h: Host(h, build.ns_name(run_id, h), HOST_IFNAME, build.address(spec, h)) for h in spec.hosts
        }
        self._children: list[subprocess.Popen[Any]] = []
        self._counters = SwitchCounters(self.switch_netns, {h: switch_port(h) for h in spec.hosts})
        self._down = False

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"Testbed({self.run_id}, hosts={list(self.hosts)}, switch={self.switch_mode})"

    def _host(self, host: str) -> Host:
        if self._down:
            raise TestbedError(f"testbed {self.run_id} is down")
        if host not in self.hosts:
            raise TestbedError(
                f"host {host!r} is not in testbed {self.run_id}; hosts: {', '.join(self.hosts)}"
            )
        return self.hosts[host]

    def address(self, host: str) -> str:
        return self._host(host).address

    def netns(self, host: str) -> str:
        return self._host(host).netns

    def popen(
        self,
        host: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        cwd: str | None = None,
        **kw: Any,
    ) -> subprocess.Popen[Any]:
        """argv inside the host's namespace (its own session). Its PID and start time are in the
        run's state file before this returns, so any later down() kills it, even from another process."""
        h = self._host(host)
        with state.locked(self.run_id):
            data = state.load(self.run_id)
            if data is None:
                raise TestbedError(f"testbed {self.run_id} is down (no state file)")
            p = procs.spawn(h.netns, argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, **kw)
            start = procs.start_time(p.pid)
            if start is not None:
                data.setdefault("procs", []).append(
                    {"pid": p.pid, "start": start, "host": host, "argv": [str(a) for a in argv][:8]}
                )
                state.save(self.run_id, data)
        self._children.append(p)
        return p

    def set_switch(self, mode: str) -> None:
        """Re-applies every switch port's queues: "priority" (by DSCP, the intent) or "fifo"."""
        if mode not in SWITCH_MODES:
            raise SpecError(f"switch: {mode!r} is not a switch mode; allowed: {', '.join(SWITCH_MODES)}")
        if self._down:
            raise TestbedError(f"testbed {self.run_id} is down")
        with state.locked(self.run_id):
            if not namespaces.exists(self.switch_netns):
                raise TestbedError(f"testbed {self.run_id}: the switch namespace {self.switch_netns} is gone")
            build.apply_switch(self.spec, self.run_id, mode, lambda _m: None)
            data = state.load(self.run_id) or {}
            data["switch"] = mode
            state.save(self.run_id, data)
        self.switch_mode = mode

    def class_counters(self) -> Counters:
        """{host: {class index: {"bytes", "packets", "drops"}}} of the switch port toward each host."""
        if self._down:
            raise TestbedError(f"testbed {self.run_id} is down")
        try:
            return self._counters.read()
        except FileNotFoundError:
            raise TestbedError(f"testbed {self.run_id}: the switch namespace is gone") from None

    def down(self) -> None:
        """Kills what this testbed started, removes its namespaces and state. Safe to call twice."""
        self._counters.close()
        down(self.run_id)
        for p in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)  # reap: killed above, only the exit status is left
        self._down = True


def up(spec: TestbedSpec, progress: Progress | Callable[[str], None] | None = None) -> Testbed:
    """Builds the testbed (or completes / re-applies an existing run with the same id and hosts)."""
    if not isinstance(spec, TestbedSpec):
        raise SpecError(f"spec: expected a TestbedSpec, got {type(spec).__name__}")
    _check_privileges()
    if userns.inside():
        userns.private_run()  # just re-executed by userns.reexec(): /run must be private first
    say = _sayer(progress)
    run_id = spec.run_id
    while run_id is None:
        candidate = new_run_id()
        if state.load(candidate) is None and not namespaces.listed(f"{PREFIX}{candidate}-"):
            run_id = candidate
    start = time.perf_counter()
    with state.locked(run_id):
        try:
            existing = state.load(run_id)
        except state.StateError as e:
            raise TestbedError(str(e)) from None
        if existing is not None and list(existing.get("hosts", [])) != list(spec.hosts):
            raise TestbedError(
                f"run_id: testbed {run_id} exists with hosts {','.join(existing.get('hosts', []))}; "
                "take it down first (geryon testbed down --run-id ...) or use another run id"
            )
        names = [build.switch_ns(run_id), *(build.ns_name(run_id, h) for h in spec.hosts)]
        data = dict(existing or {"procs": [], "created": time.time()})
        data.update(
            hosts=list(spec.hosts),
            namespaces=names,
            switch_netns=build.switch_ns(run_id),
            addresses={h: build.address(spec, h) for h in spec.hosts},
            mode=userns.privilege_mode(),
            switch=spec.switch,
            spec=_spec_json(spec),
            owner=_owner(),
            ready=False,
        )
        state.save(run_id, data)  # before anything exists: a crash from here on is down()'s to clean
        say(f"run {run_id}: {'completing' if existing else 'building'} {len(spec.hosts)} hosts")
        try:
            build.build(spec, run_id, say)
            build.apply_host_queues(spec, run_id, say)
            build.apply_switch(spec, run_id, spec.switch, say)
        except BaseException as e:
            if existing is None:
                _down_locked(run_id)  # a new run that failed half-way leaves nothing
            if isinstance(e, TestbedError | KeyboardInterrupt):
                raise
            if isinstance(e, Exception):
                raise TestbedError(f"testbed {run_id}: {type(e).__name__}: {e}") from e
            raise
        data["ready"] = True
        state.save(run_id, data)
    say(f"run {run_id}: up in {time.perf_counter() - start:.2f} s")
    return Testbed(spec, run_id, spec.switch)


def attach(run_id: str | None = None) -> Testbed:
    """The Testbed of a run that is up, from its state file (default: $GERYON_TESTBED_RUN, which
    `geryon testbed up --exec` sets for its command). A custom intent is not in the state file:
    set_switch("priority") on an attached testbed renders the default intent."""
    rid = run_id or os.environ.get("GERYON_TESTBED_RUN")
    if not rid:
        raise TestbedError("no run id given and GERYON_TESTBED_RUN is not set")
    try:
        data = state.load(rid)
    except state.StateError as e:
        raise TestbedError(str(e)) from None
    if data is None or not data.get("ready"):
        raise TestbedError(f"no testbed {rid} is up (state dir {state.state_dir()})")
    s = data["spec"]
    spec = TestbedSpec(
        hosts=tuple(s["hosts"]),
        rate_bits=s["rate_bits"],
        buffer_bytes=s["buffer_bytes"],
        burst_bytes=s["burst_bytes"],
        switch=s["switch"],
        host_queues=s["host_queues"],
        offloads=s["offloads"],
        run_id=rid,
    )
    return Testbed(spec, rid, data.get("switch", spec.switch))


def _orphan_runs() -> list[str]:
    """Runs with gtb-<run>-* namespaces but no state file. Only under the default state dir, where
    every run on this host is recorded; and never a run whose switch names another state dir that
    still has its file (a test's private one): `geryon testbed down` must not break running tests."""
    if not state.is_default_dir():
        return []
    recorded = set(state.runs())
    found = set()
    for name in namespaces.listed(PREFIX):
        parts = name.split("-")
        if len(parts) == 3 and RUN_ID.match(parts[1]) and parts[1] not in recorded:
            found.add(parts[1])
    out = []
    for rid in sorted(found):
        elsewhere = build.recorded_in(rid)
        if elsewhere and os.path.exists(os.path.join(elsewhere, f"{rid}.json")):
            continue
        out.append(rid)
    return out


def down(run_id: str | None = None) -> list[str]:
    """Takes down run `run_id`, or every run (None): recorded ones, stale ones of crashed processes,
    and (under the default state dir) gtb-<run>-* namespaces without a state file. Returns the ids
    of the runs that had something to take down."""
    if run_id is not None and not RUN_ID.match(run_id):
        raise SpecError(f"run_id: {run_id!r} is not a run id (1-10 lowercase letters or digits)")
    ids = [run_id] if run_id is not None else sorted(set(state.runs()) | set(_orphan_runs()))
    done = []
    for rid in ids:
        with state.locked(rid):
            if _down_locked(rid):
                done.append(rid)
    return done


def _down_locked(run_id: str) -> bool:
    try:
        data = state.load(run_id) or {}
    except state.StateError:
        data = {}  # unreadable: its namespaces (by name) still go
    names = sorted(set(data.get("namespaces", [])) | set(namespaces.listed(f"{PREFIX}{run_id}-")))
    names = [n for n in names if n.startswith(f"{PREFIX}{run_id}-")]
    records = [(int(p["pid"]), int(p["start"])) for p in data.get("procs", []) if "pid" in p and "start" in p]
    procs.kill(records)
    paths = [namespaces.ns_path(n) for n in names if namespaces.exists(n)]
    leftovers = procs.pids_in(paths)
    procs.kill(leftovers, grace=0.5)
    removed = [n for n in names if namespaces.remove(n)]
    had_state = state.path(run_id).exists()
    state.remove(run_id)
    return bool(had_state or removed)


def status() -> list[dict[str, Any]]:
    """Each run: id, hosts, mode, switch, namespaces (alive), processes (alive), owner."""
    out = []
    for rid in sorted(set(state.runs()) | set(_orphan_runs())):
        try:
            data = state.load(rid) or {}
        except state.StateError as e:
            data = {"error": str(e)}
        names = sorted(set(data.get("namespaces", [])) | set(namespaces.listed(f"{PREFIX}{rid}-")))
        alive_ns = [n for n in names if namespaces.exists(n)]
        plist = data.get("procs", [])
        alive_p = [p for p in plist if procs.alive(int(p["pid"]), int(p["start"]))]
        owner = data.get("owner") or {}
        out.append(
            {
                "id": rid,
                "hosts": data.get("hosts", []),
                "addresses": data.get("addresses", {}),
                "mode": data.get("mode"),
                "switch": data.get("switch"),
                "spec": data.get("spec"),
                "ready": bool(data.get("ready")),
                "state_file": str(state.path(rid)) if data else None,
                "namespaces": names,
                "namespaces_alive": len(alive_ns),
                "processes": len(plist),
                "processes_alive": len(alive_p),
                "owner_pid": owner.get("pid"),
                "owner_alive": bool(owner) and procs.alive(int(owner["pid"]), int(owner["start"] or -1)),
                **({"error": data["error"]} if "error" in data else {}),
            }
        )
    return out
