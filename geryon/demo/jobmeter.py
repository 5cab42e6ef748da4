"""The demo chief in the cluster view: its job registered in etcd, its GPU intensity measured as it trains.

With spec["register"] the chief (geryon.demo.chief) meters every measured step
(geryon.jobs.meter.IntensityMeter) and registers its job with the first measured window, so a
`geryon controller` ranks the jobs by what they measure and bands them live, as a user's chief would
(docs/jobs.md, "The chief's meter"):

    "register": {
        "etcd": "https://10.77.0.3:2379",          # etcd's client URLs, comma-separated
        "cacert": "ca.pem", "cert": "c.pem", "key": "c-key.pem",   # with https
        "job": "a",                                 # the job id (its tasks follow this id's band)
        "compute_s": 0.205,                         # compute per iteration (geryon.demo.local: C)
        "window": 10,                               # steps per measurement (default 10)
        "ttl": 3                                    # the lease: the band is freed this long after a crash
    }

The record lists the cluster spec's tasks (chief, ps, worker) at their addresses; bytes per iteration
are twice the model's parameter bytes (every parameter pulled and pushed once). The job registers once
its first window is measured, so the controller never ranks it on a guess; until then its tasks keep
the marks they started with (no band for the job: geryon.tf.band_follow keeps the current marks).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from geryon.jobs import etcd
from geryon.jobs.chief import JobRegistration
from geryon.jobs.meter import IntensityMeter
from geryon.jobs.registration import Intensity, make_record

log = logging.getLogger("geryon.demo.jobmeter")

TLS_FLAGS = ("register.cacert", "register.cert", "register.key")
ROLES = ("chief", "ps", "worker")


class _RegisterFirst:
    """The meter's Registration: the first measured intensity registers the job, later ones update it."""

    def __init__(self, registration: JobRegistration) -> None:
        self.registration = registration

    def update(self, intensity: Intensity) -> None:
        reg = self.registration
        if reg.lease:
            reg.update(intensity)
            return
        reg.record = replace(reg.record, intensity=intensity)
        reg.register()
        log.warning("Geryon job meter: job %r registered, GPU intensity %.3f", reg.record.job, intensity.gpu)


class JobMeter:
    """A job and its meter; `step` after every measured step (the first whole window registers the
    job), `close` at the end (revokes the registration's lease: the band is freed at once)."""

    def __init__(self, registration: JobRegistration, meter: IntensityMeter) -> None:
        self.registration = registration
        self.meter = meter
        self._failed: str | None = None

    def step(self, seconds: float) -> None:
        try:
            self.meter.step(seconds)
        except etcd.EtcdError as e:  # etcd away: training goes on with the last registered intensity
            if str(e) != self._failed:
                log.warning("Geryon job meter: could not register the intensity: %s", e)
                self._failed = str(e)

    def close(self) -> None:
        if self.registration.lease:
            self.registration.close()


def tasks_of(cluster: Mapping[str, Any]) -> dict[str, str]:
    """{"role:index": "host:port"} of the cluster spec's chief, ps and worker tasks."""
    return {f"{role}:{i}": str(a) for role in ROLES for i, a in enumerate(cluster.get(role) or [])}


def from_spec(spec: Mapping[str, Any], param_bytes: int) -> JobMeter | None:
    """The chief's job meter as spec["register"] asks (the job not registered yet: its first measured
    window does that); None without it."""
    reg = spec.get("register")
    if not reg:
        return None
    client = etcd.Client(
        reg["etcd"],
        cafile=reg.get("cacert"),
        certfile=reg.get("cert"),
        keyfile=reg.get("key"),
        tls_flags=TLS_FLAGS,
    )
    compute = float(reg["compute_s"])
    nbytes = 2 * int(param_bytes)
    # The intensity here is a placeholder: _RegisterFirst puts the first measured one in before writing.
    record = make_record(str(reg["job"]), tasks_of(spec["cluster"]), compute, compute, nbytes)
    registration = JobRegistration(client, record, ttl=int(reg.get("ttl", 3)))
    meter = IntensityMeter(_RegisterFirst(registration), compute, nbytes, window=int(reg.get("window", 10)))
    return JobMeter(registration, meter)


def param_bytes(model: Any) -> int:
    """The bytes of a Keras model's trainable variables, as the tagger reads them (every shard)."""
    from geryon.tagger.tf_graph import parameters_of

    params, _ = parameters_of(model.trainable_variables)
    return sum(p.bytes for p in params)
