"""A job's chief in the cluster view: its record in etcd under a lease it keeps alive, and the verdict.

    with JobRegistration(client, record, ttl=3) as reg:
        reg.wait_verdict(timeout=10)          # its band, or RegistrationError with the controller's reason
        reg.update(new_intensity)             # measured again: the controller re-ranks live
    # leaving revokes the lease: the band is freed at once; a chief that dies frees it within ttl

Registering is create-if-absent (one txn): a second chief claiming the same job id is refused at once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

from geryon.jobs import etcd, keys
from geryon.jobs.registration import FORMAT_VERSION, Intensity, JobRecord, RegistrationError, check_host


class JobRegistration:
    def __init__(
        self, client: etcd.Client, record: JobRecord, ttl: int = 3, prefix: str = keys.DEFAULT_PREFIX
    ) -> None:
        if not 2 <= ttl <= 60:
            raise RegistrationError(f"ttl: {ttl} s; give 2 to 60 (the band is freed this long after a crash)")
        self.client = client
        self.record = record
        self.ttl = ttl
        self.prefix = keys.norm_prefix(prefix)
        self.key = keys.job(self.prefix, record.job)
        self.lease = 0
        self.error: str | None = None  # why keeping the lease failed, once it has
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self) -> JobRegistration:
        self.lease = self.client.grant(self.ttl)
        ok, _ = self.client.txn(
            [etcd.cmp_create_revision(self.key, 0)], [etcd.op_put(self.key, self.record.dumps(), self.lease)]
        )
        if not ok:
            self.client.revoke(self.lease)
            raise RegistrationError(f"job: {self.record.job!r} is already registered (by another chief)")
        self._thread = threading.Thread(target=self._keep, name=f"lease-{self.record.job}", daemon=True)
        self._thread.start()
        return self

    def _keep(self) -> None:
        interval = self.ttl / 3
        while not self._stop.wait(interval):
            try:
                self.client.keepalive(self.lease)
            except etcd.LeaseLost as e:
                self.error = f"lease lost ({e}); the job's band is freed"
                return
            except etcd.EtcdError as e:  # unreachable for now: the next try may reach another member
                self.error = str(e)

    def update(self, intensity: Intensity) -> None:
        """Re-registers the measured intensity (same lease)."""
        self.record = replace(self.record, intensity=intensity)
        self.client.put(self.key, self.record.dumps(), lease=self.lease)

    def verdict(self) -> dict[str, Any] | None:
        """The controller's answer: {"classes": [...], "generation": N}, None while it has none; raises
        RegistrationError when the controller refused the record."""
        refused = self.client.get(keys.refused(self.prefix, self.record.job))
        if refused is not None:
            raise RegistrationError(json.loads(refused.value)["error"])
        kv = self.client.get(keys.bands_all(self.prefix))
        if kv is None:
            return None
        answer = json.loads(kv.value)
        band = answer.get("jobs", {}).get(self.record.job)
        return None if band is None else {"classes": band["classes"], "generation": answer["generation"]}

    def wait_verdict(self, timeout: float = 10.0, interval: float = 0.1) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.verdict()
            if answer is not None:
                return answer
            if time.monotonic() >= deadline:
                raise RegistrationError(
                    f"job {self.record.job!r}: no controller answered within {timeout:.0f} s"
                )
            time.sleep(interval)

    def close(self, revoke: bool = True) -> None:
        """Stops the keepalive; revoke (default) deletes the record now. revoke=False is a crash, for tests:
        the record stays until its lease runs out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl)
        if revoke and self.lease:
            self.client.revoke(self.lease)

    def __enter__(self) -> JobRegistration:
        return self.register() if not self.lease else self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HostRegistration:
    """An agent's host in the cluster view (agents/<host>, under its lease): only known hosts get jobs."""

    def __init__(
        self, client: etcd.Client, host: str, ttl: int = 5, prefix: str = keys.DEFAULT_PREFIX
    ) -> None:
        self.client = client
        self.host = check_host(host, "host")
        self.ttl = ttl
        self.key = keys.agent(keys.norm_prefix(prefix), self.host)
        self.lease = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _put(self) -> None:
        self.lease = self.client.grant(self.ttl)
        self.client.put(
            self.key, json.dumps({"host": self.host, "version": FORMAT_VERSION}), lease=self.lease
        )

    def register(self) -> HostRegistration:
        self._put()
        self._thread = threading.Thread(target=self._keep, name=f"lease-{self.host}", daemon=True)
        self._thread.start()
        return self

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.client.keepalive(self.lease)
            except etcd.LeaseLost:  # etcd was away longer than the ttl: the host comes back
                try:
                    self._put()
                except etcd.EtcdError:
                    continue
            except etcd.EtcdError:
                continue

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl)
        if self.lease:
            self.client.revoke(self.lease)

    def __enter__(self) -> HostRegistration:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.close()
