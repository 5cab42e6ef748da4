"""The key layout in etcd, under one prefix (default /geryon/). docs/jobs.md describes each key."""

from __future__ import annotations

DEFAULT_PREFIX = "/geryon/"


def norm_prefix(prefix: str) -> str:
    if not prefix.startswith("/") or not prefix.endswith("/") or len(prefix) < 2:
        raise ValueError(f"prefix: {prefix!r} must start and end with '/', e.g. {DEFAULT_PREFIX}")
    return prefix


def jobs(prefix: str) -> str:
    """Every job record: jobs/<job id> -> the chief's registration, under the chief's lease."""
    return prefix + "jobs/"


def job(prefix: str, job_id: str) -> str:
    return jobs(prefix) + job_id


def agents(prefix: str) -> str:
    """The known hosts: agents/<host> -> {"host": ...}, each under its agent's lease."""
    return prefix + "agents/"


def agent(prefix: str, host: str) -> str:
    return agents(prefix) + host


def leader(prefix: str) -> str:
    """The controller election: the leader's name, under the leader's lease (created only if absent)."""
    return prefix + "controller/leader"


def bands_all(prefix: str) -> str:
    """The controller's whole answer: every job's band, the refusals, the generation."""
    return prefix + "bands/all"


def hosts(prefix: str) -> str:
    return prefix + "bands/hosts/"


def host(prefix: str, name: str) -> str:
    """bands/hosts/<host> -> the bands of the jobs with a task on that host (what agents/tasks watch)."""
    return hosts(prefix) + name


def refusals(prefix: str) -> str:
    return prefix + "refused/"


def refused(prefix: str, job_id: str) -> str:
    """refused/<job id> -> {"error": why the controller refused the registration}."""
    return refusals(prefix) + job_id
