"""`geryon agent run`: apply on start, then keep the host in sync.

Netlink link and qdisc events (someone deleted the qdisc, a link flapped or came back) and dcbnl
notifications (RTNLGRP_DCB: another tool changed ETS/PFC/APP) wake the loop, which re-verifies and
re-applies within a debounce interval; a periodic verify catches drift that sends no netlink event
(sysctls, sysfs). SIGTERM/SIGINT: clean exit (the host keeps its
QoS; `restore` undoes it). SIGHUP: reload the config; a bad new config is logged and the old one kept.
Logs are one key=value line per event on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from geryon.agent.config import AgentConfig, ConfigError, load_config
from geryon.agent.engine import ApplyError, EngineError, Plan, Slot, apply_plan, drift, make_plan
from geryon.agent.journal import Busy, Journal, JournalError, exclusive
from geryon.errors import UsageError

if TYPE_CHECKING:  # peer.py needs pyroute2 (the agent extra), which run() reports missing by itself
    from geryon.agent.peer import PeerCheck

# Netlink messages that can mean our queues changed: links (re)appearing, qdiscs, classes, filters.
_WATCHED = {
    "RTM_NEWLINK",
    "RTM_DELLINK",
    "RTM_NEWQDISC",
    "RTM_DELQDISC",
    "RTM_NEWTCLASS",
    "RTM_DELTCLASS",
    "RTM_NEWTFILTER",
    "RTM_DELTFILTER",
}


class Log:
    """One line per event: ts=... level=... event=... key=value ..."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        parts = [f"ts={ts}", f"level={level}", f"event={event}"]
        parts += [f"{k}={_quote(v)}" for k, v in fields.items()]
        with self._lock:
            print(" ".join(parts), file=self.stream, flush=True)


def _quote(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.4g}"
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class Agent:
    """The running agent's state; also the AgentView the API and metrics read (thread-safe)."""

    def __init__(
        self,
        config_path: str,
        config: AgentConfig,
        journal: Journal,
        open_slots: Callable[[AgentConfig], tuple[list[Slot], Callable[[], None]]],
        log: Log,
    ) -> None:
        self.config_path = config_path
        self._config = config
        self.journal = journal
        self._open_slots = open_slots
        self.log = log
        self._lock = threading.Lock()
        self._drift: list[str] = []
        self._peer: PeerCheck | None = None
        self._lld_logged: set[str] = set()
        self._slots, self._close = open_slots(config)

    # -- AgentView ------------------------------------------------------------------------------

    def config(self) -> AgentConfig:
        return self._config

    def drift(self) -> list[str]:
        """The drift found by the last verify (cached: the API never touches netlink)."""
        return list(self._drift)

    def last_apply(self) -> float | None:
        return self.journal.last_apply

    def peer(self) -> PeerCheck | None:
        """The last check of the switch's DCBX advertisement (cached like drift); None before the first
        check or where no driver can read peer state (dcb: off)."""
        return self._peer

    # -- reconcile ------------------------------------------------------------------------------

    def reconcile(self, reason: str) -> bool:
        """Verify; re-apply when anything drifted. True when the host is in sync afterwards."""
        with self._lock:
            try:
                with exclusive(self.journal.path, timeout=30):
                    # A CLI apply/restore may have changed the journal since we last read it.
                    self.journal = Journal.load(self.journal.path)
                    ok = self._reconcile(reason)
            except (Busy, JournalError) as e:
                self.log("verify_failed", "error", reason=reason, error=e)
                return False
            self._check_peer(reason)
            return self._check_lld(reason) and ok

    def _check_lld(self, reason: str) -> bool:
        """Under dcbx: lld_managed the NIC's DCB is verified, never written: a disagreement is drift
        (reported in metrics, the API and the page) that no apply can repair, so none is attempted."""
        lines: list[str] = []
        for slot in self._slots:
            report = getattr(slot.driver, "lld_report", None)
            if report is None:
                continue
            try:
                lines += report(self._config)
            except Exception as e:
                lines.append(f"lld: reading the NIC's DCB failed: {e}")
        new = [line for line in lines if line not in self._lld_logged]
        for line in new:
            self.log(
                "drift", "warning", reason=reason, target="lld", detail=line, repair="none (lld_managed)"
            )
        self._lld_logged = set(lines)
        self._drift = [d for d in self._drift if not d.startswith("lld: ")] + lines
        return not lines

    def _check_peer(self, reason: str) -> None:
        """The switch check at the verify cadence: the peer's DCBX state against the config. Not drift
        (the host cannot repair the switch), so it never triggers an apply; a change is logged once."""
        check: PeerCheck | None = None
        for slot in self._slots:
            peer_check = getattr(slot.driver, "peer_check", None)
            if peer_check is None:
                continue
            try:
                check = peer_check(self._config)
            except Exception as e:  # the peer check must never stop the reconcile loop
                self.log("peer_check_failed", "warning", reason=reason, error=e)
                return
        before = self._peer
        self._peer = check
        if check is None:
            return
        lines = [m.line() for m in check.mismatches]
        if before is not None and [m.line() for m in before.mismatches] == lines:
            return
        for line in lines:
            self.log("peer_mismatch", "warning", reason=reason, detail=line)
        if not lines and before is not None and before.mismatches:
            self.log("peer_agrees", reason=reason, interfaces=",".join(check.interfaces) or "-")

    def _reconcile(self, reason: str) -> bool:
        start = time.perf_counter()
        try:
            plan = make_plan(self._slots, self._config, self.journal)
        except ConfigError as e:
            # e.g. an interface that is not there (yet): wait for a link event.
            self._drift = [str(e)]
            self.log("verify_failed", "warning", reason=reason, error=e)
            return False
        except EngineError as e:
            self._drift = [str(e)]
            self.log("verify_failed", "error", reason=reason, error=e)
            return False
        if reason in ("start", "reload"):  # the same skips every time: say them once
            for s in plan.skipped:
                self.log("skip", target=s.target, driver=s.driver, why=s.reason)
        if plan.empty:
            self._drift = []
            if reason in ("start", "reload"):  # routine checks stay quiet
                self.log("in_sync", reason=reason, targets=len(plan.in_sync), ms=_ms(start))
            return True
        self._drift = drift(plan)
        for line in self._drift:
            self.log("drift", "warning", reason=reason, target=line.split(":", 1)[0], detail=line)
        return self._apply(plan, reason, start)

    def _apply(self, plan: Plan, reason: str, start: float) -> bool:
        try:
            apply_plan(plan, self._slots, self.journal)
        except ApplyError as e:
            self.log("apply_failed", "error", reason=reason, target=e.failed.target, error=e)
            return False
        except (OSError, JournalError) as e:
            self.log("apply_failed", "error", reason=reason, error=e)
            return False
        self._drift = []
        self.log(
            "applied",
            reason=reason,
            changes=len(plan.changes),
            targets=",".join(c.target for c in plan.changes),
            ms=_ms(start),
        )
        return True

    def reload(self) -> bool:
        """Re-reads the config file; a bad one is logged and the running config kept."""
        try:
            new = load_config(self.config_path)
        except ConfigError as e:
            self.log("reload_rejected", "error", config=self.config_path, error=e, kept="previous config")
            return False
        with self._lock:
            try:
                slots, close = self._open_slots(new)
            except Exception as e:
                self.log("reload_rejected", "error", config=self.config_path, error=e, kept="previous config")
                return False
            self._close()
            self._slots, self._close, self._config = slots, close, new
        self.log("reloaded", config=self.config_path, interfaces=",".join(new.interfaces))
        return True

    def close(self) -> None:
        with self._lock:
            self._close()


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)


def watch_netlink(netns: str | None, wake: threading.Event, log: Log, ready: threading.Event) -> None:
    """Sets `wake` on every link/qdisc/class/filter event in the namespace. Runs in its own thread,
    which must also create the socket: pyroute2's socket belongs to the thread that made it."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.rtnl import RTMGRP_LINK, RTMGRP_TC

    try:
        ipr = IPRoute(netns=netns) if netns else IPRoute()
        ipr.bind(groups=RTMGRP_LINK | RTMGRP_TC)
    except Exception as e:
        log("watch_failed", "error", error=e, fallback="periodic verify only")
        ready.set()
        return
    ready.set()
    while True:
        try:
            msgs = ipr.get()
        except Exception as e:
            log("watch_failed", "error", error=e, fallback="periodic verify only")
            return
        for m in msgs:
            if m.get("event") in _WATCHED:
                wake.set()


def watch_dcb(
    netns: str | None,
    wake: threading.Event,
    log: Log,
    ready: threading.Event,
    sock_factory: Callable[[], Any] | None = None,
) -> None:
    """Sets `wake` on every dcbnl notification (RTNLGRP_DCB): a DCB change by another tool is repaired
    within the debounce, not at the next periodic verify. Hosts without DCB simply never send one."""
    from geryon.agent.dcbnl import dcb_event_ifnames, dcb_event_socket

    try:
        sock = sock_factory() if sock_factory is not None else dcb_event_socket(netns)
    except Exception as e:
        log("watch_failed", "warning", what="dcb", error=e, fallback="periodic verify for DCB")
        ready.set()
        return
    ready.set()
    try:
        while True:
            try:
                data = sock.recv(65536)
            except OSError as e:
                log("watch_failed", "warning", what="dcb", error=e, fallback="periodic verify for DCB")
                return
            if not data:
                return
            try:
                names = dcb_event_ifnames(data)
            except OSError:
                names = [""]
            if names:
                wake.set()
    finally:
        sock.close()


def run(args: argparse.Namespace) -> int:
    from geryon.agent.commands import AGENT_EXTRA, check_netns, read_config
    from geryon.agent.driver import DriverError

    log = Log()
    config = read_config(args.config)
    check_netns(args.netns)
    if args.interval <= 0 or args.debounce < 0:
        raise UsageError("--interval must be > 0 and --debounce >= 0 seconds")
    if args.metrics:
        _host_port(args.metrics, "--metrics")
    if args.api_tcp:
        _host_port(args.api_tcp, "--api-tcp")
        if not (args.tls_cert and args.tls_key):
            raise UsageError("--api-tcp: TCP is served only with TLS; give --tls-cert and --tls-key")
    make_view = check_cluster_args(args)
    try:
        journal = Journal.load(args.journal)
    except JournalError as e:
        raise UsageError(f"--journal: {e}") from None

    def slots_for(cfg: AgentConfig) -> tuple[list[Slot], Callable[[], None]]:
        from geryon.agent.registry import open_slots  # the drivers: the agent extra's pyroute2

        return open_slots(cfg, netns=args.netns, root=args.root)

    try:
        agent = Agent(args.config, config, journal, slots_for, log)
    except DriverError as e:
        raise UsageError(str(e)) from None
    except ImportError as e:
        raise UsageError(f"{AGENT_EXTRA} ({e})") from None
    stop = threading.Event()
    wake = threading.Event()
    reload_requested = threading.Event()

    def on_term(signum: int, _frame: Any) -> None:
        stop.set()
        wake.set()

    def on_hup(_signum: int, _frame: Any) -> None:
        reload_requested.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)

    log("start", config=args.config, netns=args.netns or "-", journal=args.journal, interval=args.interval)
    ready = threading.Event()
    threading.Thread(target=watch_netlink, args=(args.netns, wake, log, ready), daemon=True).start()
    ready.wait(10)  # subscribe before the first apply, so no change slips between apply and watch
    if config.dcb != "off":
        dcb_ready = threading.Event()
        threading.Thread(target=watch_dcb, args=(args.netns, wake, log, dcb_ready), daemon=True).start()
        dcb_ready.wait(10)
    view = None if make_view is None else _start_cluster_view(make_view, log)
    services = _start_services(agent, args, log)
    agent.reconcile("start")
    try:
        while not stop.is_set():
            woke = wake.wait(timeout=args.interval)
            if stop.is_set():
                break
            if woke:
                # Let a burst of events (tc deleting a tree is several messages) settle first.
                stop.wait(args.debounce)
                wake.clear()
            reason = "netlink" if woke else "periodic"
            if reload_requested.is_set():
                reload_requested.clear()
                if agent.reload():
                    reason = "reload"
            agent.reconcile(reason)
    finally:
        if services is not None:
            services.stop()
        if view is not None:
            view.close()
        agent.close()
        log("stop", reason="signal")
    return 0


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"{flag}: {text!r} is not HOST:PORT (e.g. 127.0.0.1:9477; port 0 = any free port)")
    return host.strip("[]"), int(port)


def check_cluster_args(args: argparse.Namespace) -> Any:
    """The cluster-view flags, checked before anything is applied: None without --etcd (then none of
    them may be given), else a function of the agent's log that makes the (unstarted)
    geryon.agent.cluster_view.ClusterView. UsageError names the flag. The view's own errors (etcd
    away) never stop the agent: it retries in the background."""
    given = [
        flag
        for flag, value in (
            ("--cluster-host", args.cluster_host),
            ("--etcd-prefix", args.etcd_prefix),
            ("--etcd-cacert", args.etcd_cacert),
            ("--etcd-cert", args.etcd_cert),
            ("--etcd-key", args.etcd_key),
        )
        if value is not None
    ]
    if not args.etcd:
        if given:
            raise UsageError(f"{given[0]}: only with --etcd (the cluster view lives in etcd)")
        return None
    from geryon.agent.cluster_view import ClusterView
    from geryon.jobs import etcd, keys
    from geryon.jobs.registration import RegistrationError, check_host

    prefix = args.etcd_prefix if args.etcd_prefix is not None else keys.DEFAULT_PREFIX
    try:
        keys.norm_prefix(prefix)
    except ValueError as e:
        raise UsageError(f"--etcd-prefix: {e}") from None
    try:
        host = check_host(args.cluster_host or socket.gethostname(), "--cluster-host")
    except RegistrationError as e:
        hint = "" if args.cluster_host else " (the system's host name; give --cluster-host)"
        raise UsageError(f"{e}{hint}") from None
    if not 2 <= args.cluster_ttl <= 60:
        raise UsageError(f"--cluster-ttl: {args.cluster_ttl} s; give 2 to 60")
    client = etcd.Client(
        args.etcd,
        cafile=args.etcd_cacert,
        certfile=args.etcd_cert,
        keyfile=args.etcd_key,
        tls_flags=("--etcd-cacert", "--etcd-cert", "--etcd-key"),
    )
    return lambda log: ClusterView(client, host, log, prefix=prefix, ttl=args.cluster_ttl)


def _start_cluster_view(make: Callable[[Log], Any], log: Log) -> Any:
    view = make(log).start()
    log("cluster", etcd=",".join(view.client.endpoints), host=view.host)
    return view


def _start_services(agent: Agent, args: argparse.Namespace, log: Log) -> Any:
    """The gRPC API and the metrics endpoint (geryon.agent.service), when that part is installed."""
    try:
        service = importlib.import_module("geryon.agent.service")
    except ImportError as e:
        log("services_unavailable", "warning", why=e)
        return None
    tls = None
    if args.api_tcp:
        tls = service.TlsFiles(
            cert=Path(args.tls_cert),
            key=Path(args.tls_key),
            client_ca=Path(args.tls_client_ca) if args.tls_client_ca else None,
        )
    services = service.start_services(
        agent,
        api_socket=args.api_socket or None,
        api_tcp=args.api_tcp,
        tls=tls,
        metrics_addr=_host_port(args.metrics, "--metrics") if args.metrics else None,
        netns=args.netns,
    )
    metrics = services.metrics_addr
    log(
        "services",
        api=",".join(services.api_addresses) or "-",
        metrics=f"{metrics[0]}:{metrics[1]}" if metrics else "-",
    )
    return services
