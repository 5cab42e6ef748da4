"""The agent's observability services, started by the daemon: the gRPC API and the HTTP endpoint (Prometheus
metrics, the status page and its /status.json; geryon/agent/http_server.py).

The daemon hands in an AgentView (geryon.agent.view: its config, drift and last apply); the services
add flow discovery and the job registry, which both the API and the metrics read. This module is the
wiring, and only the daemon imports it: the presenters (api's servicer, metrics' collector,
http_server) know the view and what they read, not each other's listeners.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geryon.agent.flows import FlowDiscovery
from geryon.agent.jobs import JobRegistry
from geryon.agent.view import AgentView, TlsFiles
from geryon.errors import UsageError

if TYPE_CHECKING:
    import grpc
    from prometheus_client import CollectorRegistry


log = logging.getLogger("geryon.agent.service")

DEFAULT_API_SOCKET = "/run/geryon/agent.sock"
DEFAULT_METRICS_ADDR = ("127.0.0.1", 9477)


@dataclass
class Services:
    jobs: JobRegistry
    discovery: FlowDiscovery
    api_addresses: list[str] = field(
        default_factory=list
    )  # e.g. ["unix:/run/geryon/agent.sock", "[::]:7443"]
    metrics_addr: tuple[str, int] | None = None  # the bound address (port 0 asks for a free one)
    registry: CollectorRegistry | None = None
    _grpc: grpc.Server | None = None
    _http: Any = None
    _collector: Any = None
    _socket_path: str | None = None

    def stop(self, grace: float = 1.0) -> None:
        """Stops listening and releases sockets; idempotent."""
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._collector is not None:
            self._collector.close()
            self._collector = None
        if self._socket_path is not None:
            Path(self._socket_path).unlink(missing_ok=True)
            self._socket_path = None
        self.discovery.close()


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' for a listener; port 0 = any free port."""
    host, sep, port = text.rpartition(":")
    if text.startswith("["):
        host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{what}: expected HOST:PORT (IPv6 as [ADDR]:PORT, port 0-65535), got {text!r}")
    return host, int(port)


def start_services(
    agent: AgentView,
    *,
    api_socket: str | None,
    api_tcp: str | None,
    tls: TlsFiles | None,
    metrics_addr: tuple[str, int] | None,
    netns: str | None = None,
    max_flow_series: int | None = None,
) -> Services:
    """Starts the gRPC API (unix socket and/or TCP with TLS) and the HTTP endpoint (metrics, status page,
    /status.json) on metrics_addr. Bad arguments raise UsageError before anything listens; a failure
    part-way stops what was started."""
    from geryon.agent import api, http_server, metrics

    if api_tcp is not None and tls is None:
        raise UsageError(
            f"--api-tcp {api_tcp}: the API serves TCP only with TLS; give --tls-cert and --tls-key "
            "(and --tls-client-ca to require client certificates), or use the unix socket"
        )
    tcp = parse_host_port(api_tcp, "--api-tcp") if api_tcp is not None else None
    credentials = api.load_tls(tls) if tls is not None and tcp is not None else None

    services = Services(jobs=JobRegistry(), discovery=FlowDiscovery(netns=netns))
    try:
        if api_socket is not None or tcp is not None:
            server, addresses = api.serve(
                api.AgentServicer(agent, services.jobs, services.discovery),
                unix_path=api_socket,
                tcp=tcp,
                credentials=credentials,
            )
            services._grpc = server
            services._socket_path = api_socket
            services.api_addresses = addresses
        if metrics_addr is not None:
            kwargs = {} if max_flow_series is None else {"max_flow_series": max_flow_series}
            collector = metrics.AgentCollector(
                agent, services.jobs, services.discovery, netns=netns, **kwargs
            )
            services._collector = collector
            services.registry, services._http, services.metrics_addr = http_server.serve(
                collector, metrics_addr
            )
    except BaseException:
        services.stop(grace=0)
        raise
    log.info("api on %s; metrics on %s", services.api_addresses or "-", services.metrics_addr or "-")
    return services
