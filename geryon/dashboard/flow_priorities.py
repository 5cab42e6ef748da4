"""The "Geryon flow priorities" dashboard: what the host agents export, per host, class, PS-worker pair and
job (geryon/agent/metrics.py names every series).

Raw agent series only (no recording rules), so it works against any Prometheus that scrapes the agents as
job `geryon-agent`. Every selector filters by the `host` variable (Prometheus's `instance` label) and, where
the series carry it, the `job` variable (the agent's `geryon_job` label).
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders.prometheus import Dataquery

from geryon.dashboard.grafana import (
    Row,
    dashboard,
    datasource_variable,
    override,
    query_variable,
    stat,
    table,
    target,
    thresholds,
    timeseries,
)

UID = "geryon-flow-priorities"
FILE_NAME = f"{UID}.json"
SCRAPE_JOB = "geryon-agent"  # the scrape job name the docs, rules and tests assume
DATASOURCE_UID = "geryon-prometheus"  # deploy/grafana/provisioning/datasources/geryon.yml
RATE = "$__rate_interval"

_PAIR = "geryon_job, task, peer, class"
_PAIR_LEGEND = "{{geryon_job}} {{task}} -> {{peer}} {{class}}"
_RED_FROM_ONE = thresholds(("green", None), ("red", 1))


def sel(metric: str, *, per_job: bool = False, **labels: str) -> str:
    """`metric{...}` filtered by the host variable, the job variable when the series have geryon_job, and
    any exact-match labels."""
    matchers = [f'{k}="{v}"' for k, v in labels.items()] + ['instance=~"$host"']
    if per_job:
        matchers.append('geryon_job=~"$job"')
    return f"{metric}{{{', '.join(matchers)}}}"


def _rate(metric: str, *, per_job: bool = False) -> str:
    return f"rate({sel(metric, per_job=per_job)}[{RATE}])"


def _instant(expr: str) -> Dataquery:
    """A query for a table: its value now, one row per label set."""
    return target(expr, instant=True, table=True)


def _health() -> Row:
    up = sel("up", job=SCRAPE_JOB)
    return Row(
        "Agents and config",
        [
            stat(
                "Agents up", [target(f"sum({up})", "up")], colors=thresholds(("red", None), ("green", 1)), w=3
            ),
            stat(
                "Agents down",
                [target(f"count({up} == 0) or vector(0)", "down")],
                description="Scrape targets of job geryon-agent whose last scrape failed.",
                colors=_RED_FROM_ONE,
                w=3,
            ),
            stat(
                "Hosts with config drift",
                [target(f"count({sel('geryon_config_in_sync')} == 0) or vector(0)", "drifted hosts")],
                description="Hosts whose kernel and NIC state differ from the agent config.",
                colors=_RED_FROM_ONE,
                w=3,
            ),
            stat(
                "Drifted targets",
                [target(f"sum({sel('geryon_config_drifted_targets')})", "targets")],
                colors=_RED_FROM_ONE,
                w=3,
            ),
            stat(
                "Interfaces without queues",
                [target(f"count({sel('geryon_egress_queues_present')} == 0) or vector(0)", "interfaces")],
                description="Configured interfaces that are missing or lack Geryon's HTB classes.",
                colors=_RED_FROM_ONE,
                w=3,
            ),
            stat(
                "Scrape errors",
                [target(f"sum(increase({sel('geryon_scrape_errors_total')}[$__range]))", "errors")],
                description="Metric sections the agents failed to read in the shown time range.",
                colors=_RED_FROM_ONE,
                w=3,
            ),
            stat(
                "PS-worker pairs",
                [target(f"sum by (state) ({sel('geryon_job_pairs', per_job=True)})", "{{state}}")],
                description="Pairs with a task on the selected hosts: ok, missing a class's flow, or "
                "carrying a DSCP that is no class of the job.",
                colors=_RED_FROM_ONE,
                overrides=[override("ok", thresholds=thresholds(("blue", None), ("green", 1)))],
                w=6,
            ),
        ],
    )


def _classes() -> Row:
    by = "instance, class"
    return Row(
        "Host egress queues per class",
        [
            timeseries(
                "Per-class throughput per host",
                [
                    target(
                        f"sum by ({by}) ({_rate('geryon_class_sent_bytes_total')}) * 8",
                        "{{instance}} {{class}}",
                    )
                ],
                unit="bps",
                description="Bits per second leaving each Geryon class's host queue (HTB class 1:1x).",
                min_value=0,
            ),
            timeseries(
                "Drops per class",
                [
                    target(
                        f"sum by ({by}) ({_rate('geryon_class_dropped_packets_total')})",
                        "{{instance}} {{class}}",
                    )
                ],
                unit="pps",
                description="Packets each class's host queue dropped; a drop in a lossless class is a fault.",
                min_value=0,
            ),
            timeseries(
                "Queue backlog per class",
                [target(f"sum by ({by}) ({sel('geryon_class_backlog_bytes')})", "{{instance}} {{class}}")],
                unit="bytes",
                description="Bytes waiting in each class's host queue: urgent classes should stay near 0.",
                min_value=0,
            ),
            timeseries(
                "Throttled per class",
                [
                    target(
                        f"sum by ({by}) ({_rate('geryon_class_overlimits_total')})", "{{instance}} {{class}}"
                    )
                ],
                unit="short",
                description="Times per second a class was held back by its rate or ceil (HTB overlimits).",
                min_value=0,
            ),
        ],
    )


def _flows() -> Row:
    by = f"instance, {_PAIR}"
    return Row(
        "Flows per PS-worker pair",
        [
            table(
                "Flows per PS-worker pair",
                [
                    _instant(f"sum by ({by}) ({sel('geryon_flow_connections', per_job=True)})"),
                    _instant(f"sum by ({by}) ({_rate('geryon_flow_sent_bytes_total', per_job=True)}) * 8"),
                    _instant(
                        f"sum by ({by}) ({_rate('geryon_flow_received_bytes_total', per_job=True)}) * 8"
                    ),
                    _instant(f"avg by ({by}) ({sel('geryon_flow_rtt_seconds', per_job=True)})"),
                ],
                columns={
                    "instance": "Host",
                    "geryon_job": "Job",
                    "task": "Task",
                    "peer": "Peer",
                    "class": "Class",
                    "Value #A": "Connections",
                    "Value #B": "Sent",
                    "Value #C": "Received",
                    "Value #D": "RTT",
                },
                units={"Sent": "bps", "Received": "bps", "RTT": "s"},
                description="One row per host, job, local task, remote peer and class: each PS-worker pair "
                "should carry one flow per class, each marked with its class's DSCP.",
                h=9,
            ),
            timeseries(
                "Flow throughput per pair and class",
                [
                    target(
                        f"sum by ({_PAIR}) ({_rate('geryon_flow_sent_bytes_total', per_job=True)}) * 8",
                        _PAIR_LEGEND,
                    )
                ],
                unit="bps",
                description="What each task sends to each peer on each class's flow.",
                min_value=0,
            ),
            timeseries(
                "Flow RTT per pair and class",
                [target(f"avg by ({_PAIR}) ({sel('geryon_flow_rtt_seconds', per_job=True)})", _PAIR_LEGEND)],
                unit="s",
                description="Smoothed TCP RTT: urgent flows should see less queueing delay than bulk ones.",
                min_value=0,
            ),
        ],
    )


def _nic() -> Row:
    by = "instance, interface, direction, priority"
    legend = "{{instance}} {{interface}} {{direction}} prio {{priority}}"
    return Row(
        "NIC priorities and PFC (hardware NICs only)",
        [
            timeseries(
                "PFC pause rate",
                [target(f"sum by ({by}) ({_rate('geryon_nic_pfc_pause_frames_total')})", legend)],
                unit="pps",
                description="PFC pause frames per second per 802.1p priority (rx: paused by the switch).",
                min_value=0,
                w=6,
            ),
            timeseries(
                "PFC pause duration",
                [target(f"sum by ({by}) ({_rate('geryon_nic_pfc_pause_duration_seconds_total')})", legend)],
                unit="percentunit",
                description="Fraction of time each priority was paused.",
                min_value=0,
                max_value=1,
                w=6,
            ),
            timeseries(
                "NIC throughput per priority",
                [target(f"sum by ({by}) ({_rate('geryon_nic_priority_bytes_total')}) * 8", legend)],
                unit="bps",
                min_value=0,
                w=6,
            ),
            timeseries(
                "RoCE congestion",
                [
                    target(
                        f"sum by (instance, interface, counter) "
                        f"({_rate('geryon_nic_roce_congestion_total')})",
                        "{{instance}} {{interface}} {{counter}}",
                    )
                ],
                unit="short",
                description="CNPs sent/handled and ECN-marked RoCE packets per second (DCQCN).",
                min_value=0,
                w=6,
            ),
        ],
    )


def _jobs() -> Row:
    return Row(
        "Jobs and the threshold search",
        [
            timeseries(
                "Current threshold per job",
                [
                    target(
                        f"max by (geryon_job, boundary) ({sel('geryon_job_threshold', per_job=True)})",
                        "{{geryon_job}} boundary {{boundary}}",
                    )
                ],
                unit="none",
                description="Urgency threshold between class `boundary` and the next, as the job reports it.",
                min_value=0,
                max_value=1,
                steps=True,
            ),
            timeseries(
                "Iteration time per job",
                [
                    target(
                        f"max by (geryon_job) ({sel('geryon_job_iteration_seconds', per_job=True)})",
                        "{{geryon_job}}",
                    )
                ],
                unit="s",
                description="Latest training iteration (step) time the job reported.",
                min_value=0,
            ),
            timeseries(
                "Threshold-search trials",
                [
                    target(
                        f"max by (geryon_job) ({sel('geryon_job_threshold_changes_total', per_job=True)})",
                        "{{geryon_job}}",
                    )
                ],
                unit="none",
                description="Thresholds tried so far (each change is one trial of the search); a flat line "
                "means the search has settled.",
                min_value=0,
                steps=True,
                w=8,
            ),
            stat(
                "Since last threshold change",
                [
                    target(
                        f"time() - max by (geryon_job) "
                        f"({sel('geryon_job_threshold_changed_timestamp_seconds', per_job=True)})",
                        "{{geryon_job}}",
                    )
                ],
                unit="s",
                description="Converged when this keeps growing while iterations go on.",
                colors=thresholds(("blue", None)),
                w=8,
                h=8,
            ),
            timeseries(
                "Iterations per second",
                [
                    target(
                        f"max by (geryon_job) ({_rate('geryon_job_reports_total', per_job=True)})",
                        "{{geryon_job}}",
                    )
                ],
                unit="short",
                description="Iteration reports per second: the job's training progress.",
                min_value=0,
                w=8,
            ),
        ],
    )


def flow_priorities() -> dict[str, Any]:
    """The dashboard, as the dict committed in deploy/grafana/dashboards/geryon-flow-priorities.json."""
    return dashboard(
        uid=UID,
        title="Geryon flow priorities",
        description="Geryon host agents: per-class throughput, flows per PS-worker pair with their class, "
        "PFC, drops, backlog, and each job's threshold search. Generated by `python -m geryon.dashboard "
        "--regenerate`; edit geryon/dashboard/, not this JSON.",
        tags=["geryon", "network", "training"],
        rows=[_health(), _classes(), _flows(), _nic(), _jobs()],
        variables=[
            datasource_variable(DATASOURCE_UID),
            query_variable("host", "Host", f'label_values(up{{job="{SCRAPE_JOB}"}}, instance)'),
            query_variable("job", "Job", 'label_values(geryon_job_classes{instance=~"$host"}, geryon_job)'),
        ],
    )
