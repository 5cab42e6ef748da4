"""The agent's and the task's side: follow a host's key (bands/hosts/<host>) and hand out each job's band.

    watcher = BandWatcher(client, "hostA", on_change=apply).start()
    watcher.band("jobA", classes=2)   # {job class: fabric class}; {0: 0, 1: 1} until a band is known
    watcher.status()                  # live, or stale: etcd unreachable, the last bands kept (and since when)

It reads the key, then watches it from the next revision; every `read_timeout` seconds without an event
the watch is re-opened through a fresh read, so a lost etcd is noticed within that time. While etcd is
unreachable the last bands stay in force (nothing is reset) and status() and the log say so. This is
the API a task follows its job's band with (geryon.tf.band_follow: its flows re-marked live).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from geryon.jobs import etcd, keys
from geryon.jobs.registration import check_host


@dataclass(frozen=True)
class WatchStatus:
    live: bool
    generation: int  # of the bands in force; 0: none received yet
    message: str
    since: float  # wall time of the last change of state


class BandWatcher:
    def __init__(
        self,
        client: etcd.Client,
        host: str,
        prefix: str = keys.DEFAULT_PREFIX,
        on_change: Callable[[dict[str, dict[int, int]], int], None] | None = None,
        log: Callable[[str], None] | None = None,
        read_timeout: float = 1.0,
        retry: float = 0.5,
    ) -> None:
        self.client = client
        self.host = check_host(host, "host")
        self.key = keys.host(keys.norm_prefix(prefix), self.host)
        self.on_change = on_change
        self.log = log or (lambda msg: None)
        self.read_timeout = read_timeout
        self.retry = retry
        self._lock = threading.Lock()
        self._bands: dict[str, dict[int, int]] = {}
        self._generation = 0
        self._status = WatchStatus(False, 0, "not started", time.time())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what callers read ---------------------------------------------------------------------------

    def bands(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {j: dict(b) for j, b in self._bands.items()}

    def band(self, job: str, classes: int | None = None) -> dict[int, int]:
        """The job's band; with none known, `classes` gives today's classes (class c on fabric class c)."""
        with self._lock:
            band = self._bands.get(job)
        if band is not None:
            return dict(band)
        return {c: c for c in range(classes or 0)}

    def status(self) -> WatchStatus:
        with self._lock:
            return self._status

    # -- the loop -------------------------------------------------------------------------------------

    def _set_status(self, live: bool, message: str) -> None:
        with self._lock:
            changed = self._status.live != live or self._status.message != message
            if changed:
                self._status = WatchStatus(live, self._generation, message, time.time())
        if changed:
            self.log(f"bands of {self.host}: {message}")

    def _apply(self, kv: etcd.KeyValue | None) -> None:
        if kv is None:
            bands: dict[str, dict[int, int]] = {}
            generation = self._generation  # no job on this host (now): nothing to keep
        else:
            try:
                data = json.loads(kv.value)
                generation = int(data["generation"])
                bands = {j: dict(enumerate(int(q) for q in cls)) for j, cls in data["jobs"].items()}
            except (ValueError, KeyError, TypeError) as e:
                self._set_status(
                    False, f"unreadable bands at {self.key} ({e}); keeping generation {self._generation}"
                )
                return
        with self._lock:
            if bands == self._bands and generation == self._generation:
                return
            self._bands, self._generation = bands, generation
            self._status = WatchStatus(True, generation, f"live: generation {generation}", time.time())
        if self.on_change is not None:
            self.on_change(self.bands(), generation)

    def poll(self) -> int:
        """One read of the host's key: applies it; returns the revision it was read at."""
        kvs, revision = self.client.range(self.key)
        self._apply(kvs[0] if kvs else None)
        return revision

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                revision = self.poll()
                gen = self.status().generation
                self._set_status(True, f"live: generation {gen}")
                for events in self.client.watch(
                    self.key, start_revision=revision + 1, timeout=self.read_timeout
                ):
                    for ev in events:
                        self._apply(None if ev.type == "DELETE" else ev.kv)
                    if self._stop.is_set():
                        return
            except etcd.EtcdUnavailable as e:
                if "timed out" in str(e) or "stream ended" in str(e):
                    continue  # a quiet watch: re-read, which tells whether etcd is still there
                gen = self.status().generation
                self._set_status(
                    False,
                    f"stale: {e}; keeping the last bands (generation {gen})"
                    if gen
                    else f"stale: {e}; no bands yet",
                )
                self._stop.wait(self.retry)
            except etcd.EtcdError as e:
                self._set_status(False, f"stale: {e}; keeping the last bands (generation {self._generation})")
                self._stop.wait(self.retry)

    def start(self) -> BandWatcher:
        self._thread = threading.Thread(target=self._run, name=f"bands-{self.host}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.read_timeout + self.client.timeout + 1)

    def __enter__(self) -> BandWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
