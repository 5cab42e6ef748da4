"""`geryon controller`: elected through etcd, it reads every job, computes the bands and writes them back.

It keeps no state of its own: everything it knows it reads from etcd each round, so any number can run
and one that dies is replaced. Election is etcd's primitive: a lease (ttl seconds, kept alive every
round) and a create-if-absent txn on the leader key; the standbys retry that txn each round, so one takes
over within ttl + interval of the leader's death (its lease expires, etcd deletes the key).

Each round the leader reads the whole prefix at one revision, checks the records
(registration.check_cluster), ranks and compresses (bands.compute_bands) and, when the answer differs
from what is stored, writes bands/all, every bands/hosts/<host> and refused/<job> in ONE txn, guarded by
its leadership (the leader key's create_revision is still its own) and by bands/all being unchanged
since the read. So a reader sees all of a generation or none of it, a controller killed mid-change
leaves the previous generation whole, and a deposed leader cannot write.

No network API of its own in this slice: it talks only to etcd.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from geryon.jobs import bands, etcd, keys
from geryon.jobs.registration import Registered, RegistrationError, check_cluster, check_host

BANDS_FORMAT = "geryon.bands"


@dataclass(frozen=True)
class Answer:
    """What the controller writes, less the generation: equal answers are not written again."""

    queues: int
    jobs: dict[str, dict[str, Any]]
    hosts: dict[str, dict[str, list[int]]]
    refused: dict[str, str]


def decide(
    registered: Iterable[Registered],
    known_hosts: Iterable[str],
    queues: int,
    previous: Mapping[str, int] | None = None,
    margin: float = 0.0,
) -> Answer:
    """Pure: the records as read (and the last generation's ranks, for hysteresis) -> the answer."""
    accepted, refused = check_cluster(registered, known_hosts)
    demands = [bands.Demand(r.job, r.classes, r.intensity.gpu) for r in accepted]
    computed = bands.compute_bands(demands, queues, previous, margin)
    jobs: dict[str, dict[str, Any]] = {}
    hosts: dict[str, dict[str, list[int]]] = {}
    for r in accepted:
        b = computed[r.job]
        jobs[r.job] = {
            "rank": b.rank,
            "classes": list(b.classes),
            "intensity": round(r.intensity.gpu, 6),
            "hosts": list(r.hosts),
        }
        for h in r.hosts:
            hosts.setdefault(h, {})[r.job] = list(b.classes)
    return Answer(queues=queues, jobs=jobs, hosts=hosts, refused=refused)


def previous_ranks(stored: Any) -> dict[str, int]:
    """Each job's rank in a stored bands record (read from etcd, so checked: what is not a job id with
    an integer rank is left out, and hysteresis then treats that job as new)."""
    jobs = stored.get("jobs") if isinstance(stored, dict) else None
    if not isinstance(jobs, dict):
        return {}
    return {
        j: v["rank"]
        for j, v in jobs.items()
        if isinstance(j, str)
        and isinstance(v, dict)
        and isinstance(v.get("rank"), int)
        and not isinstance(v.get("rank"), bool)
    }


def _essence(answer: dict[str, Any]) -> Any:
    jobs = {j: {k: v for k, v in b.items() if k != "intensity"} for j, b in answer.get("jobs", {}).items()}
    return answer.get("queues"), jobs, answer.get("refused", {})


class Controller:
    def __init__(
        self,
        client: etcd.Client,
        queues: int,
        prefix: str = keys.DEFAULT_PREFIX,
        ttl: int = 2,
        interval: float = 0.25,
        hosts: Iterable[str] = (),
        name: str | None = None,
        log: Callable[[str], None] | None = None,
        hysteresis: float = bands.HYSTERESIS,
    ) -> None:
        bands.compute_bands([], queues)  # validates queues
        self.hysteresis = bands.check_margin(hysteresis, "hysteresis")
        self.client = client
        self.queues = queues
        self.prefix = keys.norm_prefix(prefix)
        self.ttl = ttl
        self.interval = interval
        self.static_hosts = {check_host(h, "--hosts") for h in hosts}
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{id(self) & 0xFFFF:x}"
        self.log = log or (lambda msg: None)
        self.lease = 0
        self.leader_revision = 0  # the leader key's create_revision while we hold it; 0: standby
        self.generation = 0
        self._warned: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.leader_revision != 0

    # -- election ---------------------------------------------------------------------------------------

    def campaign(self) -> bool:
        """One try at leadership (create-if-absent under our lease); keeps the lease alive when leading."""
        key = keys.leader(self.prefix)
        if self.is_leader:
            try:
                self.client.keepalive(self.lease)
                return True
            except etcd.LeaseLost:
                self.log(f"{self.name}: lost the lease; standing down")
                self.leader_revision = 0
                self.lease = 0
        if not self.lease:
            self.lease = self.client.grant(self.ttl)
        else:
            try:
                self.client.keepalive(self.lease)
            except etcd.LeaseLost:
                self.lease = self.client.grant(self.ttl)
        ok, answer = self.client.txn(
            [etcd.cmp_create_revision(key, 0)],
            [etcd.op_put(key, self.name, self.lease), etcd.op_get(key)],
            [etcd.op_get(key)],
        )
        kvs = etcd.txn_kvs(answer, 1 if ok else 0)
        if ok and kvs:
            self.leader_revision = kvs[0].create_revision
            self.log(f"{self.name}: leader (lease {self.lease:x}, ttl {self.ttl} s)")
        return ok

    def resign(self) -> None:
        if self.lease:
            self.client.revoke(self.lease)
        self.lease = 0
        self.leader_revision = 0

    # -- one round ----------------------------------------------------------------------------------------

    def read(self) -> tuple[list[Registered], set[str], etcd.KeyValue | None, set[str], set[str]]:
        kvs, _ = self.client.range(self.prefix, prefix=True)
        registered, known, hosts, refused = [], set(self.static_hosts), set(), set()
        current = None
        for kv in kvs:
            rest = kv.key[len(self.prefix) :]
            if kv.key.startswith(keys.jobs(self.prefix)):
                registered.append(Registered(rest[len("jobs/") :], kv.value, kv.create_revision))
            elif kv.key.startswith(keys.agents(self.prefix)):
                try:
                    known.add(check_host(rest[len("agents/") :], "agents"))
                except RegistrationError:
                    continue
            elif kv.key == keys.bands_all(self.prefix):
                current = kv
            elif kv.key.startswith(keys.hosts(self.prefix)):
                hosts.add(kv.key[len(keys.hosts(self.prefix)) :])
            elif kv.key.startswith(keys.refusals(self.prefix)):
                refused.add(kv.key[len(keys.refusals(self.prefix)) :])
        return registered, known, current, hosts, refused

    def reconcile(self) -> bool:
        """Leader only: computes the answer and writes it if it changed. True when it wrote."""
        registered, known, current, old_hosts, old_refused = self.read()
        try:
            stored = json.loads(current.value) if current is not None else {}
        except ValueError:
            stored = {}  # not ours to trust: the answer below replaces it
        if not isinstance(stored, dict):
            stored = {}
        answer = decide(registered, known, self.queues, previous_ranks(stored), self.hysteresis)
        generation_stored = stored.get("generation", 0)
        self.generation = generation_stored if isinstance(generation_stored, int) else 0
        if current is not None and _essence(stored) == _essence(answer.__dict__):
            return False  # same bands: intensities that moved without changing a band are not written
        generation = self.generation + 1
        record = {
            "format": BANDS_FORMAT,
            "version": 1,
            "generation": generation,
            "queues": answer.queues,
            "controller": self.name,
            "written_at": time.time(),
            "jobs": answer.jobs,
            "refused": answer.refused,
        }
        ops = [etcd.op_put(keys.bands_all(self.prefix), json.dumps(record, sort_keys=True))]
        for h, jobs in sorted(answer.hosts.items()):
            value = {"generation": generation, "queues": answer.queues, "jobs": jobs}
            ops.append(etcd.op_put(keys.host(self.prefix, h), json.dumps(value, sort_keys=True)))
        ops += [etcd.op_delete(keys.host(self.prefix, h)) for h in sorted(old_hosts - set(answer.hosts))]
        for job, error in sorted(answer.refused.items()):
            ops.append(etcd.op_put(keys.refused(self.prefix, job), json.dumps({"error": error})))
        ops += [
            etcd.op_delete(keys.refused(self.prefix, j)) for j in sorted(old_refused - set(answer.refused))
        ]
        guard = [
            etcd.cmp_create_revision(keys.leader(self.prefix), self.leader_revision),
            etcd.cmp_mod_revision(keys.bands_all(self.prefix), current.mod_revision if current else 0),
        ]
        ok, _ = self.client.txn(guard, ops)
        if not ok:
            self._check_leadership()
            return False
        self.generation = generation
        self.log(
            f"{self.name}: generation {generation}: "
            + ("; ".join(f"{j} {v['classes']}" for j, v in sorted(answer.jobs.items())) or "no jobs")
            + ("".join(f"; refused {j}: {e}" for j, e in sorted(answer.refused.items())))
        )
        return True

    def _check_leadership(self) -> None:
        kv = self.client.get(keys.leader(self.prefix))
        if kv is None or kv.create_revision != self.leader_revision:
            self.log(f"{self.name}: no longer the leader; standing down")
            self.leader_revision = 0

    def step(self) -> None:
        """One round: campaign (or keep the lease), then reconcile when leading."""
        if self.campaign():
            self.reconcile()

    def run(self, stop: threading.Event) -> None:
        """Rounds every `interval` until stop is set; etcd being away is said once and retried."""
        while not stop.is_set():
            try:
                self.step()
                if self._warned:
                    self.log(f"{self.name}: etcd reachable again")
                    self._warned = None
            except etcd.EtcdError as e:
                if str(e) != self._warned:
                    self.log(f"{self.name}: {e}; retrying (jobs keep their last bands)")
                    self._warned = str(e)
            stop.wait(self.interval)
