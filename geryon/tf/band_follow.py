"""A task follows its job's band: the fabric classes a cluster controller gives the job, applied live.

Several jobs share a fabric's k queues (issue 39, docs/jobs.md): `geryon controller` gives each job a
band, a map of its classes to fabric classes, and writes the bands of every host's jobs under
bands/hosts/<host> in etcd. A task started with geryon.tf.server() follows its job's band there when
the environment names the store and the job (the launcher sets them, like the chief's registration):

    GERYON_BANDS_ETCD=http://10.0.0.1:2379[,http://...]   etcd's client URLs; unset: no following
    GERYON_JOB=job-17            the job id the chief registered (geryon.jobs.chief.JobRegistration)
    GERYON_BANDS_HOST=hostA      the host name in the job's registration (default: the host name)
    GERYON_BANDS_PREFIX=/geryon/ the controller's key prefix (default /geryon/)
    GERYON_BANDS_CACERT=ca.pem   with https:// endpoints: the CA (PEM) of etcd's server certificate
    GERYON_BANDS_CERT=c.pem      and the client certificate (PEM) etcd's --client-cert-auth asks for,
    GERYON_BANDS_KEY=c-key.pem   with its key (plain http is allowed only to a loopback address)

The fabric's classes are the data plane's marks when the follower starts (geryon.tf.class_marks():
its defaults, or what the launcher set with set_class_marks, e.g. the marks the agent's DCB config
maps to traffic classes): fabric class q carries those of class q. A band {c: q} gives the job's
class c fabric class q's DSCP and SO_PRIORITY, for the flows open now (re-marked, no reconnect) and
those opened later (set_class_marks(live=True)). With no band known yet, or etcd unreachable, the
task keeps the marks it has (BandWatcher's rule: the last bands stay in force) and logs why.

TensorFlow's own gRPC connections to the cluster's tasks (the chief's step calls and their replies)
follow too: they carry the job's class 0 marks (geryon.tf.control_marks), so that no job's step calls
wait below another job's bulk. GERYON_CONTROL_MARKS=off leaves them unmarked (the fabric's unmatched
class). The chief, which starts no geryon.tf.server(), calls geryon.tf.follow_band(cluster_spec).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from geryon.errors import UsageError
from geryon.jobs import etcd, keys
from geryon.jobs.registration import RegistrationError, check_host
from geryon.jobs.watch import BandWatcher
from geryon.tf.control_marks import ControlMarker

log = logging.getLogger("geryon.tf.band_follow")

ENV_ETCD = "GERYON_BANDS_ETCD"
ENV_JOB = "GERYON_JOB"
ENV_HOST = "GERYON_BANDS_HOST"
ENV_PREFIX = "GERYON_BANDS_PREFIX"
ENV_TLS = ("GERYON_BANDS_CACERT", "GERYON_BANDS_CERT", "GERYON_BANDS_KEY")  # etcd's cafile, certfile, keyfile
ENV_CONTROL = "GERYON_CONTROL_MARKS"  # on (default) | off: TF's gRPC connections carry class 0's marks


@dataclass(frozen=True)
class Applied:
    """One band applied: the job's class marks, how many open flows were re-marked, when."""

    generation: int
    band: dict[int, int]  # job class -> fabric class
    dscp: list[int]
    priority: list[int]
    remarked: int
    at: float  # time.monotonic()


def job_marks(
    band: Mapping[int, int], fabric: Sequence[tuple[int, int]], classes: int
) -> tuple[list[int], list[int]]:
    """The (DSCP, SO_PRIORITY) lists of the job's classes 0..classes-1 under `band`; a class the band
    does not name keeps fabric class c (as BandWatcher.band does for an unknown job)."""
    dscp, prio = [], []
    for c in range(classes):
        q = band.get(c, c)
        if not 0 <= q < len(fabric):
            raise ValueError(f"band: job class {c} -> fabric class {q}; the fabric has {len(fabric)}")
        dscp.append(fabric[q][0])
        prio.append(fabric[q][1])
    return dscp, prio


class BandFollower:
    """Follows `job`'s band on `host` (a BandWatcher on the host's key) and applies each new one with
    `apply(dscp, priority) -> flows re-marked` (geryon.tf.set_class_marks(..., live=True))."""

    def __init__(
        self,
        watcher_client: etcd.Client,
        host: str,
        job: str,
        fabric: Sequence[tuple[int, int]],
        apply: Callable[[list[int], list[int]], int],
        classes: int | None = None,
        prefix: str = keys.DEFAULT_PREFIX,
        read_timeout: float = 1.0,
        control: ControlMarker | None = None,
    ) -> None:
        if not job or not isinstance(job, str):
            raise UsageError(f"{ENV_JOB}: a job id is needed to follow its band, got {job!r}")
        self.job = job
        self.fabric = list(fabric)
        self.classes = classes or len(self.fabric)
        self._apply = apply
        self.control = control  # TF's gRPC connections' marker, started and stopped with the follower
        self._lock = threading.Lock()
        self.applied: list[Applied] = []
        self.watcher = BandWatcher(
            watcher_client,
            host,
            prefix=prefix,
            on_change=self._on_change,
            log=lambda msg: log.warning("Geryon bands: %s", msg),
            read_timeout=read_timeout,
        )

    def _on_change(self, bands: dict[str, dict[int, int]], generation: int) -> None:
        band = bands.get(self.job)
        if band is None:
            # The host's key does not list this job (not registered yet, refused, or its lease ran
            # out): keep the marks in force, as with etcd unreachable.
            log.warning(
                "Geryon bands: generation %d has no band for job %r on %s; keeping the current marks",
                generation,
                self.job,
                self.watcher.host,
            )
            return
        dscp, prio = job_marks(band, self.fabric, self.classes)
        remarked = self._apply(dscp, prio)
        entry = Applied(generation, dict(band), dscp, prio, remarked, time.monotonic())
        with self._lock:
            self.applied.append(entry)
        log.warning(
            "Geryon bands: job %r generation %d: classes -> fabric %s (DSCP %s), %d open flows re-marked",
            self.job,
            generation,
            [band.get(c, c) for c in range(self.classes)],
            dscp,
            remarked,
        )

    def start(self) -> BandFollower:
        if self.control is not None:
            self.control.start()
        self.watcher.start()
        return self

    def stop(self) -> None:
        self.watcher.stop()
        if self.control is not None:
            self.control.stop()


_env_lock = threading.Lock()
_env_follower: BandFollower | None = None


def follower_from_env(
    apply: Callable[[list[int], list[int]], int],
    fabric: Sequence[tuple[int, int]],
    env: Mapping[str, str] | None = None,
) -> BandFollower | None:
    """The follower the environment asks for (not started), or None when GERYON_BANDS_ETCD is unset.
    A bad value raises UsageError naming the variable."""
    env = os.environ if env is None else env
    endpoints = env.get(ENV_ETCD, "").strip()
    if not endpoints:
        return None
    cafile, certfile, keyfile = (env.get(name, "").strip() or None for name in ENV_TLS)
    try:
        client = etcd.Client(endpoints, cafile=cafile, certfile=certfile, keyfile=keyfile, tls_flags=ENV_TLS)
    except (ValueError, UsageError, etcd.EtcdError) as e:
        message = str(e)
        # The TLS checks name their variable (ENV_TLS) already; the rest is about the endpoints.
        raise UsageError(message if "etcd TLS:" in message else f"{ENV_ETCD}: {message}") from None
    job = env.get(ENV_JOB, "").strip()
    if not job:
        raise UsageError(f"{ENV_JOB}: set it to the job id the chief registered, to follow its band")
    try:
        host = check_host(env.get(ENV_HOST, "").strip() or socket.gethostname(), ENV_HOST)
    except (ValueError, RegistrationError) as e:
        raise UsageError(str(e)) from None
    try:
        prefix = keys.norm_prefix(env.get(ENV_PREFIX, "").strip() or keys.DEFAULT_PREFIX)
    except ValueError as e:
        raise UsageError(f"{ENV_PREFIX}: {e}") from None
    return BandFollower(client, host, job, fabric, apply, prefix=prefix)


def control_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether TF's gRPC connections follow the band too (GERYON_CONTROL_MARKS, default on)."""
    env = os.environ if env is None else env
    value = env.get(ENV_CONTROL, "").strip().lower() or "on"
    if value not in ("on", "off"):
        raise UsageError(f"{ENV_CONTROL}: {value!r}; allowed: on, off")
    return value == "on"


def start_from_env(grpc_addresses: Sequence[str] = ()) -> BandFollower | None:
    """Starts the environment's follower once per process (geryon.tf.server() calls it, after load()).
    `grpc_addresses`: the cluster spec's task addresses, whose gRPC connections carry the band's
    class 0 marks (geryon.tf.control_marks) unless GERYON_CONTROL_MARKS=off."""
    global _env_follower
    from geryon.tf.library import MAX_CLASSES, class_marks, set_class_marks

    with _env_lock:
        if _env_follower is None:
            fabric = class_marks()[:MAX_CLASSES]
            want_control = bool(grpc_addresses) and control_from_env()

            def apply(dscp: list[int], prio: list[int]) -> int:
                remarked = set_class_marks(dscp, prio, live=True)
                if follower is not None and follower.control is not None:
                    remarked += follower.control.set_marks(dscp[0], prio[0])
                return remarked

            follower = follower_from_env(apply, fabric)
            if follower is not None:
                if want_control:
                    # Only for a process that follows a band: resolving the cluster's names is
                    # start-up work every other task would do for nothing.
                    follower.control = ControlMarker(grpc_addresses, *fabric[0])
                _env_follower = follower.start()
        return _env_follower
