"""The job record a chief registers, its strict validation, and the checks that need the cluster view.

A record (JSON, the value of jobs/<job id>):

    {"format": "geryon.job", "version": 1, "job": "resnet-a", "classes": 2,
     "tasks": {"chief:0": "hostA:2222", "worker:0": "hostA:2223", "ps:0": "hostB:2222"},
     "intensity": {"compute_s": 0.15, "iteration_s": 0.25, "bytes": 102400000}}

`classes` is the number of Geryon classes the job uses (its map_table's, 1..8); `intensity` what its
chief measures per iteration: GPU compute time, iteration time (compute_s <= iteration_s) and bytes sent.
Every bad field raises RegistrationError naming the field and what is allowed; unknown fields are
refused too (a typo must not pass as a default).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from geryon.errors import UsageError
from geryon.tagger.map_table import MAX_CLASSES

FORMAT = "geryon.job"
FORMAT_VERSION = 1
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TASK = re.compile(r"^(ps|worker|chief|evaluator):(0|[1-9][0-9]{0,5})$")
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
FIELDS = ("format", "version", "job", "classes", "tasks", "intensity")
INTENSITY_FIELDS = ("compute_s", "iteration_s", "bytes")


class RegistrationError(UsageError):
    """A registration refused: malformed, or in conflict with the cluster. The message names the field."""


@dataclass(frozen=True)
class Intensity:
    compute_s: float
    iteration_s: float
    bytes: int

    @property
    def gpu(self) -> float:
        """GPU intensity: compute time per iteration over iteration time, in (0, 1]."""
        return self.compute_s / self.iteration_s


@dataclass(frozen=True)
class JobRecord:
    job: str
    classes: int
    tasks: tuple[tuple[str, str], ...]  # (task, host:port), sorted by task
    intensity: Intensity

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({split_address(a, "tasks")[0] for _, a in self.tasks}))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "job": self.job,
            "classes": self.classes,
            "tasks": dict(self.tasks),
            "intensity": {
                "compute_s": self.intensity.compute_s,
                "iteration_s": self.intensity.iteration_s,
                "bytes": self.intensity.bytes,
            },
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def check_job_id(job_id: Any, field: str = "job") -> str:
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):
        raise RegistrationError(
            f"{field}: {job_id!r} is not a job id "
            "(1-64 of letters, digits, '_', '.', '-'; a letter or digit first)"
        )
    return job_id


def check_host(host: Any, field: str) -> str:
    if not isinstance(host, str) or not host:
        raise RegistrationError(f"{field}: {host!r} is not a host name or IP address")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not HOSTNAME.match(host):
        raise RegistrationError(f"{field}: {host!r} is not a host name (RFC 1123) or IP address")
    return host.lower()


def split_address(address: Any, field: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); raises naming field."""
    if not isinstance(address, str) or ":" not in address:
        raise RegistrationError(f"{field}: {address!r} is not HOST:PORT")
    if address.startswith("["):
        host, sep, port = address[1:].partition("]:")
        if not sep:
            raise RegistrationError(f"{field}: {address!r} is not [IPv6]:PORT")
    else:
        host, _, port = address.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise RegistrationError(f"{field}: port {port!r} of {address!r} is not 1..65535")
    return check_host(host, field), int(port)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RegistrationError(f"{field}: {value!r} is not a finite number")
    return float(value)


def parse_intensity(data: Any, field: str = "intensity") -> Intensity:
    if not isinstance(data, Mapping):
        raise RegistrationError(f"{field}: give an object with {', '.join(INTENSITY_FIELDS)}")
    unknown = sorted(set(data) - set(INTENSITY_FIELDS))
    if unknown:
        raise RegistrationError(
            f"{field}.{unknown[0]}: unknown field; allowed: {', '.join(INTENSITY_FIELDS)}"
        )
    for name in INTENSITY_FIELDS:
        if name not in data:
            raise RegistrationError(f"{field}.{name}: missing")
    compute = _number(data["compute_s"], f"{field}.compute_s")
    iteration = _number(data["iteration_s"], f"{field}.iteration_s")
    if compute <= 0:
        raise RegistrationError(f"{field}.compute_s: {compute} s; compute time per iteration must be > 0")
    if iteration <= 0:
        raise RegistrationError(f"{field}.iteration_s: {iteration} s; iteration time must be > 0")
    if compute > iteration:
        raise RegistrationError(
            f"{field}.compute_s: {compute} s is more than {field}.iteration_s ({iteration} s); "
            "compute per iteration cannot exceed the iteration"
        )
    nbytes = data["bytes"]
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise RegistrationError(f"{field}.bytes: {nbytes!r} is not a whole number of bytes >= 0")
    return Intensity(compute_s=compute, iteration_s=iteration, bytes=nbytes)


def parse_record(data: Any) -> JobRecord:
    """Validates a decoded record (or its JSON text); returns it normalized."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise RegistrationError(f"record: not JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise RegistrationError("record: give a JSON object")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise RegistrationError(f"{unknown[0]}: unknown field; allowed: {', '.join(FIELDS)}")
    if data.get("format") != FORMAT:
        raise RegistrationError(f"format: {data.get('format')!r}; must be {FORMAT!r}")
    if data.get("version") != FORMAT_VERSION:
        raise RegistrationError(
            f"version: {data.get('version')!r}; this Geryon reads version {FORMAT_VERSION}"
        )
    job_id = check_job_id(data.get("job"))
    classes = data.get("classes")
    if isinstance(classes, bool) or not isinstance(classes, int) or not 1 <= classes <= MAX_CLASSES:
        raise RegistrationError(f"classes: {classes!r}; give the job's number of classes, 1 to {MAX_CLASSES}")
    tasks = data.get("tasks")
    if not isinstance(tasks, Mapping) or not tasks:
        raise RegistrationError('tasks: give an object of task -> "host:port", e.g. {"worker:0": "h1:2222"}')
    seen: dict[tuple[str, int], str] = {}
    out = []
    for task, address in sorted(tasks.items()):
        if not isinstance(task, str) or not TASK.match(task):
            raise RegistrationError(
                f"tasks: {task!r} is not ROLE:INDEX (role ps, worker, chief or evaluator)"
            )
        endpoint = split_address(address, f"tasks.{task}")
        if endpoint in seen:
            raise RegistrationError(f"tasks.{task}: {address!r} is also tasks.{seen[endpoint]}'s address")
        seen[endpoint] = task
        out.append((task, address))
    if "intensity" not in data:
        raise RegistrationError("intensity: missing; give compute_s, iteration_s and bytes per iteration")
    return JobRecord(
        job=job_id, classes=classes, tasks=tuple(out), intensity=parse_intensity(data["intensity"])
    )


def make_record(
    job: str, tasks: Mapping[str, str], compute_s: float, iteration_s: float, nbytes: int, classes: int = 2
) -> JobRecord:
    return parse_record(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "job": job,
            "classes": classes,
            "tasks": dict(tasks),
            "intensity": {"compute_s": compute_s, "iteration_s": iteration_s, "bytes": nbytes},
        }
    )


@dataclass(frozen=True)
class Registered:
    """A job record as the controller read it: the raw value, where it sits, and when it was created."""

    job: str
    value: bytes
    create_revision: int


def check_cluster(
    registered: Iterable[Registered], known_hosts: Iterable[str]
) -> tuple[list[JobRecord], dict[str, str]]:
    """The controller's checks over every record: well-formed, on known hosts, no task address claimed by
    two jobs (the earlier registration keeps it). Returns (accepted in registration order, {job: error})."""
    known = set(known_hosts)
    accepted: list[JobRecord] = []
    refused: dict[str, str] = {}
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    for reg in sorted(registered, key=lambda r: (r.create_revision, r.job)):
        try:
            record = parse_record(reg.value)
            if record.job != reg.job:
                raise RegistrationError(
                    f"job: {record.job!r} registered under jobs/{reg.job}; they must match"
                )
            unknown = [h for h in record.hosts if h not in known]
            if unknown:
                raise RegistrationError(
                    f"tasks: host {unknown[0]!r} is unknown (no agent registered it, not in the controller's "
                    f"--hosts); known: {', '.join(sorted(known)) or 'none'}"
                )
            for task, address in record.tasks:
                endpoint = split_address(address, f"tasks.{task}")
                if endpoint in owner:
                    other, other_task = owner[endpoint]
                    raise RegistrationError(
                        f"tasks.{task}: {address} is job {other!r}'s {other_task}; "
                        "a job cannot claim another's tasks"
                    )
        except RegistrationError as e:
            refused[reg.job] = str(e)
            continue
        for task, address in record.tasks:
            owner[split_address(address, task)] = (record.job, task)
        accepted.append(record)
    return accepted, refused
