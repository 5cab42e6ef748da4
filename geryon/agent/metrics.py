"""Prometheus metrics that read the kernel at scrape time (prometheus-client custom collectors).

Sections, each timed and with its own error counter so one failing source never hides the others:
  classes  per Geryon class: bytes, packets, drops, overlimits, backlog of the host HTB classes
           (root 1:, class 1:(0x10 + c) for class c under the 1:1 parent);
  flows    per geryon_job/task/role/peer/class: connections, bytes, RTT, retransmits; at most
           max_flow_series label sets, the rest folded into one "other" series (and counted);
  pairs    per job: PS-worker pairs that are ok, miss a class's flow or carry a wrong DSCP;
  nic      per-priority bytes/packets and PFC pause counters from ethtool statistics (mlx5 names), where
           the NIC has them (veth has none: no series, no error);
  jobs     iteration time and thresholds reported over the API, how many iterations were reported and
           how often (and when last) the thresholds changed, i.e. the threshold search's trials; the
           bytes and messages per data-plane flow whose edge the graph pass could not trace to a
           parameter, as the job's tasks report them (geryon_job/task/peer/class/direction);
  config   drift and the last successful apply (from the daemon); the configured classes as
           geryon_class_info{class,dscp,priority,lossless} = 1 (for joins in rules) and geryon_agent_info;
           the daemon's last switch check as geryon_peer_mismatch{interface,kind} (peer PFC/ETS/APP).

The kernel and the jobs are read by geryon.agent.observe; the HTTP endpoint (/metrics, and the status
page beside it) is geryon/agent/http_server.py: a collector knows nothing of HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from geryon import __version__
from geryon.agent.flows import FlowDiscovery
from geryon.agent.jobs import JobFlow, JobRegistry, PairReport
from geryon.agent.observe import ClassSample, _KernelReader, class_samples, nic_counters, observe_jobs

if TYPE_CHECKING:
    from geryon.agent.view import AgentView

log = logging.getLogger("geryon.agent.metrics")

DEFAULT_MAX_FLOW_SERIES = 200
OTHER = "other"
# Not "job": Prometheus sets `job` to the scrape job's name and would rename ours to `exported_job`.
JOB_LABEL = "geryon_job"

# geryon.agent.peer.KINDS without "none" (that one is per interface, not per point; it never occurs for an
# interface in a check, since those are the interfaces that report peer state).
PEER_KINDS = ("pfc", "ets", "app")

# --- pure parts ---


@dataclass
class FlowSeries:
    connections: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    retransmits: int = 0
    rtt_us_sum: int = 0


FlowKey = tuple[str, str, str, str, str]  # job, task, role, peer, class


def flow_series(job_flows: Iterable[JobFlow], cap: int) -> tuple[dict[FlowKey, FlowSeries], int]:
    """Sums flows by (job, task, role, peer, class). Keeps the `cap` label sets with the most bytes; folds
    the rest into one series labelled 'other' throughout. Returns the series and how many sets were folded."""
    series: dict[FlowKey, FlowSeries] = {}
    for jf in job_flows:
        key = (jf.job_id, jf.task_label, jf.role, jf.peer_label, jf.class_name)
        s = series.setdefault(key, FlowSeries())
        s.connections += 1
        s.bytes_sent += jf.flow.bytes_sent
        s.bytes_received += jf.flow.bytes_received
        s.retransmits += jf.flow.retransmits
        s.rtt_us_sum += jf.flow.rtt_us
    if len(series) <= cap:
        return series, 0
    ranked = sorted(series.items(), key=lambda kv: (-(kv[1].bytes_sent + kv[1].bytes_received), kv[0]))
    kept = dict(ranked[: max(cap - 1, 0)])  # one of the cap slots is the "other" series
    other = FlowSeries()
    for _, s in ranked[max(cap - 1, 0) :]:
        other.connections += s.connections
        other.bytes_sent += s.bytes_sent
        other.bytes_received += s.bytes_received
        other.retransmits += s.retransmits
        other.rtt_us_sum += s.rtt_us_sum
    kept[(OTHER,) * 5] = other
    return kept, len(series) - len(kept) + 1


def pair_counts(pairs: Iterable[PairReport]) -> dict[tuple[str, str], int]:
    """(job, state) -> number of pairs; state is ok, missing_flow or wrong_dscp (a pair can be both)."""
    out: dict[tuple[str, str], int] = {}
    for p in pairs:
        states = [s for s, bad in (("missing_flow", p.missing), ("wrong_dscp", p.wrong)) if bad] or ["ok"]
        for s in states:
            out[(p.job_id, s)] = out.get((p.job_id, s), 0) + 1
    return out


# --- the collector ---


class AgentCollector(Collector):
    """Reads everything at scrape time; nothing is cached between scrapes except the error counters."""

    SECTIONS = ("classes", "flows", "pairs", "nic", "jobs", "config")

    def __init__(
        self,
        agent: AgentView,
        jobs: JobRegistry,
        discovery: FlowDiscovery,
        *,
        netns: str | None = None,
        max_flow_series: int = DEFAULT_MAX_FLOW_SERIES,
    ) -> None:
        if max_flow_series < 1:
            raise ValueError(f"max_flow_series: {max_flow_series} must be at least 1")
        self.agent = agent
        self.jobs = jobs
        self.discovery = discovery
        self.max_flow_series = max_flow_series
        self.kernel = _KernelReader(netns)
        self.errors = dict.fromkeys(self.SECTIONS, 0)
        self._flow_cache: tuple[list[JobFlow], list[PairReport]] | None = None
        # One scrape at a time: sections share the scrape's flow snapshot (and the kernel reads are serial).
        self._scrape_lock = threading.Lock()

    def describe(self) -> list[Metric]:
        return []  # registration must not read the kernel

    def collect(self) -> Iterator[Metric]:
        with self._scrape_lock:
            families = self._collect()
        yield from families

    def _collect(self) -> list[Metric]:
        start = time.perf_counter()
        durations = GaugeMetricFamily(
            "geryon_scrape_section_duration_seconds",
            "Time to read one section of the metrics",
            labels=["section"],
        )
        families: list[Metric] = []
        self._flow_cache = None
        sections: dict[str, Callable[[], list[Metric]]] = {
            "classes": self._classes,
            "flows": self._flows,
            "pairs": self._pairs,
            "nic": self._nic,
            "jobs": self._jobs,
            "config": self._config,
        }
        for name, read in sections.items():
            t0 = time.perf_counter()
            try:
                families += read()  # a section is all or nothing: no half-read families
            except Exception:
                self.errors[name] += 1
                log.exception("metrics: reading %s failed", name)
            durations.add_metric([name], time.perf_counter() - t0)
        errors = CounterMetricFamily(
            "geryon_scrape_errors", "Scrape sections that failed since the agent started", labels=["section"]
        )
        for name in self.SECTIONS:
            errors.add_metric([name], self.errors[name])
        total = GaugeMetricFamily(
            "geryon_scrape_duration_seconds",
            "Time the agent took to read all metrics",
            value=time.perf_counter() - start,
        )
        return [*families, durations, errors, total]

    def _class_names(self) -> list[str]:
        return [c.name for c in self.agent.config().classes]

    def class_samples_by_interface(self) -> dict[str, list[ClassSample]]:
        """Each configured interface's Geryon class queues, read now ([] where the interface or its HTB
        classes are missing). Shared with the status page."""
        names = self._class_names()
        out = {}
        for ifname in self.agent.config().interfaces:
            out[ifname] = class_samples(ifname, names, self.kernel.tc_classes(ifname) or [])
        return out

    def _classes(self) -> list[Metric]:
        labels = ["interface", "class"]
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "bytes": CounterMetricFamily(
                "geryon_class_sent_bytes", "Bytes sent by the class's host queue", labels=labels
            ),
            "packets": CounterMetricFamily(
                "geryon_class_sent_packets", "Packets sent by the class's host queue", labels=labels
            ),
            "drops": CounterMetricFamily(
                "geryon_class_dropped_packets", "Packets the class's host queue dropped", labels=labels
            ),
            "overlimits": CounterMetricFamily(
                "geryon_class_overlimits", "Times the class was throttled by its rate or ceil", labels=labels
            ),
            "backlog_bytes": GaugeMetricFamily(
                "geryon_class_backlog_bytes", "Bytes queued in the class now", labels=labels
            ),
            "backlog_packets": GaugeMetricFamily(
                "geryon_class_backlog_packets", "Packets queued in the class now", labels=labels
            ),
        }
        present = GaugeMetricFamily(
            "geryon_egress_queues_present",
            "1 when the interface exists and has Geryon's HTB classes",
            labels=["interface"],
        )
        for ifname, samples in self.class_samples_by_interface().items():
            present.add_metric([ifname], 1 if samples else 0)
            for s in samples:
                key = [s.interface, s.class_name]
                fams["bytes"].add_metric(key, s.bytes)
                fams["packets"].add_metric(key, s.packets)
                fams["drops"].add_metric(key, s.drops)
                fams["overlimits"].add_metric(key, s.overlimits)
                fams["backlog_bytes"].add_metric(key, s.backlog_bytes)
                fams["backlog_packets"].add_metric(key, s.backlog_packets)
        return [*fams.values(), present]

    def _observe(self) -> tuple[list[JobFlow], list[PairReport]]:
        if self._flow_cache is None:
            self._flow_cache = observe_jobs(self.jobs, self.discovery)
        return self._flow_cache

    def _flows(self) -> list[Metric]:
        labels = [JOB_LABEL, "task", "role", "peer", "class"]
        conns = GaugeMetricFamily("geryon_flow_connections", "TCP connections of the series", labels=labels)
        sent = CounterMetricFamily(
            "geryon_flow_sent_bytes", "Bytes sent on the series' connections (open ones)", labels=labels
        )
        received = CounterMetricFamily(
            "geryon_flow_received_bytes",
            "Bytes received on the series' connections (open ones)",
            labels=labels,
        )
        retrans = CounterMetricFamily(
            "geryon_flow_retransmitted_segments",
            "Retransmitted segments on the series' connections",
            labels=labels,
        )
        rtt = GaugeMetricFamily(
            "geryon_flow_rtt_seconds", "Mean smoothed RTT of the series' connections", labels=labels
        )
        job_flows, _ = self._observe()
        series, folded = flow_series(job_flows, self.max_flow_series)
        for key, s in sorted(series.items()):
            k = list(key)
            conns.add_metric(k, s.connections)
            sent.add_metric(k, s.bytes_sent)
            received.add_metric(k, s.bytes_received)
            retrans.add_metric(k, s.retransmits)
            rtt.add_metric(k, s.rtt_us_sum / s.connections / 1e6)
        dropped = GaugeMetricFamily(
            "geryon_flow_series_folded",
            f"Flow label sets folded into the '{OTHER}' series this scrape (cap: max_flow_series)",
            value=folded,
        )
        return [conns, sent, received, retrans, rtt, dropped]

    def _pairs(self) -> list[Metric]:
        fam = GaugeMetricFamily(
            "geryon_job_pairs",
            "PS-worker pairs with a task on this host, by state (ok, missing_flow, wrong_dscp)",
            labels=[JOB_LABEL, "state"],
        )
        _, pairs = self._observe()
        counts = pair_counts(pairs)
        for state in self.jobs.states():
            for s in ("ok", "missing_flow", "wrong_dscp"):
                fam.add_metric([state.spec.job_id, s], counts.get((state.spec.job_id, s), 0))
        return [fam]

    def _nic(self) -> list[Metric]:
        labels = ["interface", "direction", "priority"]
        fams: dict[str, CounterMetricFamily] = {
            "bytes": CounterMetricFamily(
                "geryon_nic_priority_bytes", "NIC bytes per 802.1p priority", labels=labels
            ),
            "packets": CounterMetricFamily(
                "geryon_nic_priority_packets", "NIC packets per 802.1p priority", labels=labels
            ),
            "pause": CounterMetricFamily(
                "geryon_nic_pfc_pause_frames", "PFC pause frames per priority", labels=labels
            ),
            "pause_duration": CounterMetricFamily(
                "geryon_nic_pfc_pause_duration_seconds", "Time paused by PFC per priority", labels=labels
            ),
            "pause_transition": CounterMetricFamily(
                "geryon_nic_pfc_pause_transitions", "PFC pause on/off transitions per priority", labels=labels
            ),
        }
        roce = CounterMetricFamily(
            "geryon_nic_roce_congestion",
            "RoCE congestion counters (CNP, ECN)",
            labels=["interface", "counter"],
        )
        for ifname in self.agent.config().interfaces:
            counters = nic_counters(ifname, self.kernel.ethtool_stats(ifname))
            for (direction, prio, kind), value in sorted(counters.prio.items()):
                # mlx5 reports pause duration in microseconds.
                v = value / 1e6 if kind == "pause_duration" else value
                fams[kind].add_metric([ifname, direction, str(prio)], v)
            for name, value in sorted(counters.roce.items()):
                roce.add_metric([ifname, name], value)
        return [*fams.values(), roce]

    def _jobs(self) -> list[Metric]:
        iteration = GaugeMetricFamily(
            "geryon_job_iteration_seconds", "Latest iteration time the job reported", labels=[JOB_LABEL]
        )
        threshold = GaugeMetricFamily(
            "geryon_job_threshold",
            "Current urgency threshold between class `boundary` and the next",
            labels=[JOB_LABEL, "boundary"],
        )
        classes = GaugeMetricFamily("geryon_job_classes", "Priority classes the job uses", labels=[JOB_LABEL])
        reports = CounterMetricFamily(
            "geryon_job_reports",
            "Iteration reports received (one per reported iteration)",
            labels=[JOB_LABEL],
        )
        changes = CounterMetricFamily(
            "geryon_job_threshold_changes",
            "Times the job's thresholds changed (each change is one threshold-search trial)",
            labels=[JOB_LABEL],
        )
        changed_at = GaugeMetricFamily(
            "geryon_job_threshold_changed_timestamp_seconds",
            "Unix time of the job's last threshold change",
            labels=[JOB_LABEL],
        )
        # Labels as the flow series' (the job's class name), plus the flow's direction seen from `task`.
        unresolved_labels = [JOB_LABEL, "task", "peer", "class", "direction"]
        unresolved_bytes = CounterMetricFamily(
            "geryon_job_unresolved_bytes",
            "Data-plane bytes of tensors whose edge resolved to no parameter (the least urgent class by "
            "default), per flow, as the job's task reported them",
            labels=unresolved_labels,
        )
        unresolved_messages = CounterMetricFamily(
            "geryon_job_unresolved_messages",
            "Data-plane tensors whose edge resolved to no parameter, per flow, as the job's task "
            "reported them",
            labels=unresolved_labels,
        )
        # issue 36: the lines a task's data plane logged because its tensors fell back to the default
        # class, and the share of the window the last one was about.
        fallback_warnings = CounterMetricFamily(
            "geryon_job_fallback_warnings",
            "Fallback warnings a job's task logged: more than 1% of the bytes it sent in a window carried "
            "no parameter id (cause: no map_table, or edges the graph pass could not trace)",
            labels=[JOB_LABEL, "task", "cause"],
        )
        fallback_share = GaugeMetricFamily(
            "geryon_job_fallback_share",
            "Unresolved share (0..1) of the bytes a job's task sent in the window its last fallback "
            "warning was about",
            labels=[JOB_LABEL, "task"],
        )
        for state in self.jobs.states():
            job = state.spec.job_id
            for w in state.fallback:
                fallback_warnings.add_metric([job, w.task, w.cause], w.warnings)
                fallback_share.add_metric([job, w.task], w.share)
            for f in state.unresolved:
                k = [job, f.task, f.peer, state.spec.classes[f.class_index].name, f.direction]
                unresolved_bytes.add_metric(k, f.bytes)
                unresolved_messages.add_metric(k, f.messages)
            classes.add_metric([job], len(state.spec.classes))
            reports.add_metric([job], state.reports)
            changes.add_metric([job], state.threshold_changes)
            if state.threshold_changed_at is not None:
                changed_at.add_metric([job], state.threshold_changed_at)
            if state.iteration_time_s is not None:
                iteration.add_metric([job], state.iteration_time_s)
            for i, t in enumerate(state.thresholds or ()):
                threshold.add_metric([job, str(i)], t)
        return [
            iteration,
            threshold,
            classes,
            reports,
            changes,
            changed_at,
            unresolved_bytes,
            unresolved_messages,
            fallback_warnings,
            fallback_share,
        ]

    def _config(self) -> list[Metric]:
        info = GaugeMetricFamily(
            "geryon_class_info",
            "1 per configured Geryon class (present even where no queue exists), for joins",
            labels=["class", "dscp", "priority", "lossless"],
        )
        for c in self.agent.config().classes:
            info.add_metric([c.name, str(c.dscp), str(c.priority), "true" if c.lossless else "false"], 1)
        agent_info = GaugeMetricFamily("geryon_agent_info", "The agent's version", labels=["version"])
        agent_info.add_metric([__version__], 1)
        drift = self.agent.drift()
        out: list[Metric] = [
            info,
            agent_info,
            GaugeMetricFamily(
                "geryon_config_in_sync", "1 when the host matches the agent config", value=0 if drift else 1
            ),
            GaugeMetricFamily(
                "geryon_config_drifted_targets", "Targets that differ from the config", value=len(drift)
            ),
        ]
        out += self._peer()
        last = self.agent.last_apply()
        if last is not None:
            out.append(
                GaugeMetricFamily(
                    "geryon_config_last_apply_timestamp_seconds",
                    "Unix time of the last successful apply",
                    value=last,
                )
            )
        return out

    def _peer(self) -> list[Metric]:
        """The switch check the daemon made at its last verify: per interface whose NIC reports the
        peer's DCBX state, the disagreements of each kind (0 = agrees), so `> 0` alerts and a
        missing series means nothing is known about that port."""
        check = self.agent.peer()
        if check is None:
            return []
        mismatch = GaugeMetricFamily(
            "geryon_peer_mismatch",
            "Points where the switch's DCBX advertisement (peer PFC/ETS/APP) disagrees with the config",
            labels=["interface", "kind"],
        )
        counts = {(ifname, kind): 0 for ifname in check.interfaces for kind in PEER_KINDS}
        for m in check.mismatches:
            counts[(m.interface, m.kind)] = counts.get((m.interface, m.kind), 0) + 1
        for (ifname, kind), n in sorted(counts.items()):
            mismatch.add_metric([ifname, kind], n)
        checked = GaugeMetricFamily(
            "geryon_peer_checked_timestamp_seconds", "Unix time of the last switch (DCBX peer) check"
        )
        checked.add_metric([], check.at)
        return [mismatch, checked]

    def close(self) -> None:
        self.kernel.close()
