"""This host in the cluster view of jobs (geryon.jobs, docs/jobs.md): the agent registers its host and
follows the host's bands.

    view = ClusterView(client, "hostA", log).start()   # agents/hostA under a lease the agent keeps alive
    view.status()                                      # registered?, live or stale, generation, bands
    view.close()                                       # revokes the lease: the host leaves at once

Only hosts an agent registered (or the controller's --hosts) may carry a job's tasks, so a job on a
host without a running agent is refused by the controller, and a host whose agent dies drops out of
the view within the lease's ttl. The bands the controller writes for this host (bands/hosts/<host>)
are followed with geryon.jobs.watch.BandWatcher and logged on every change: the tasks re-mark their
own flows (geryon.tf.band_follow); the agent's host queues are per class and the same for every band,
so the agent's part is to say which bands are in force and whether they are live or stale (etcd
unreachable: the last bands stay, and the log says since when).

etcd being away at the start does not stop the agent: the registration is retried every `retry`
seconds in the background until it succeeds, and logged once per distinct error.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, Protocol

from geryon.jobs import etcd, keys
from geryon.jobs.chief import HostRegistration
from geryon.jobs.watch import BandWatcher


class EventLog(Protocol):
    def __call__(self, event: str, level: str = "info", **fields: Any) -> None: ...


class ClusterView:
    def __init__(
        self,
        client: etcd.Client,
        host: str,
        log: EventLog,
        prefix: str = keys.DEFAULT_PREFIX,
        ttl: int = 5,
        retry: float = 1.0,
        read_timeout: float = 1.0,
    ) -> None:
        if not 2 <= ttl <= 60:
            raise ValueError(f"ttl: {ttl} s; give 2 to 60 (the host leaves the view this long after a crash)")
        self.client = client
        self.log = log
        self.retry = retry
        self.registration = HostRegistration(client, host, ttl=ttl, prefix=prefix)
        self.host = self.registration.host
        self.watcher = BandWatcher(
            client,
            self.host,
            prefix,
            on_change=self._changed,
            log=self._watch_said,
            read_timeout=read_timeout,
        )
        self._registered = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ClusterView:
        self.watcher.start()
        self._thread = threading.Thread(target=self._register, name=f"cluster-{self.host}", daemon=True)
        self._thread.start()
        return self

    def _register(self) -> None:
        said = None
        while not self._stop.is_set():
            try:
                self.registration.register()
            except etcd.EtcdError as e:
                if str(e) != said:
                    self.log(
                        "cluster_register_failed", "warning", host=self.host, error=e, retry_s=self.retry
                    )
                    said = str(e)
                self._stop.wait(self.retry)
                continue
            self._registered.set()
            self.log(
                "cluster_registered", host=self.host, key=self.registration.key, ttl=self.registration.ttl
            )
            return

    def _changed(self, bands: dict[str, dict[int, int]], generation: int) -> None:
        shown = _as_lists(bands)
        self.log(
            "cluster_bands",
            host=self.host,
            generation=generation,
            jobs=json.dumps(shown, separators=(",", ":")),
        )

    def _watch_said(self, message: str) -> None:
        live = message.startswith("live")
        self.log("cluster_view", "info" if live else "warning", host=self.host, state=message)

    def wait_registered(self, timeout: float) -> bool:
        return self._registered.wait(timeout)

    def status(self) -> dict[str, Any]:
        """What the agent knows of its host in the cluster view (JSON-ready)."""
        watch = self.watcher.status()
        bands = self.watcher.bands()
        return {
            "host": self.host,
            "registered": self._registered.is_set(),
            "live": watch.live,
            "generation": watch.generation,
            "message": watch.message,
            "since": watch.since,
            "bands": _as_lists(bands),
        }

    def close(self) -> None:
        """Stops following, and revokes the host's lease (etcd away: it runs out within its ttl)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.client.timeout + self.retry + 1)
        self.watcher.stop()
        if self._registered.is_set():
            with contextlib.suppress(etcd.EtcdError):
                self.registration.close()


def _as_lists(bands: dict[str, dict[int, int]]) -> dict[str, list[int]]:
    """{job: {class: fabric class}} -> {job: [fabric class of class 0, 1, ...]}, jobs sorted."""
    return {job: [band[c] for c in sorted(band)] for job, band in sorted(bands.items())}
