"""A real agent for the observability tests: its services (metrics, status page) started on loopback
against a namespace pair with Geryon's host HTB classes, a PS and a worker listening on either side, and
optionally a prioritized transfer (one urgent DSCP 46 and one bulk DSCP 26 connection, worker -> PS).

`View` is the daemon's side (geryon.agent.service.AgentView) with a real parsed config."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from obs_netns import Transfer, build_htb, connect, listen, veth_pair

from geryon.agent.config import AgentConfig, parse_config
from geryon.agent.jobs import make_job
from geryon.agent.peer import PeerCheck
from geryon.agent.service import Services, start_services

PS_IP, WORKER_IP = "10.77.0.2", "10.77.0.1"
URGENT_DSCP, BULK_DSCP = 46, 26  # the default config's classes: urgent, bulk (both lossless)


class View:
    """A parsed config with the default classes; `drifted` is what drift() answers; `fail` and
    `config_fail` make drift() and config() raise, as a broken daemon would."""

    def __init__(
        self, interfaces: Sequence[str] = ("geth0",), applied: float | None = 1_700_000_000.0
    ) -> None:
        self.cfg = parse_config({"interfaces": list(interfaces)})
        self.drifted: list[str] = []
        self.applied = applied
        self.fail = False
        self.config_fail = False
        self.peer_check: PeerCheck | None = None  # what the daemon's last switch check found

    def config(self) -> AgentConfig:
        if self.config_fail:
            raise RuntimeError("no config")
        return self.cfg

    def drift(self) -> list[str]:
        if self.fail:
            raise RuntimeError("the daemon's drift check broke")
        return list(self.drifted)

    def last_apply(self) -> float | None:
        return self.applied

    def peer(self) -> PeerCheck | None:
        return self.peer_check


@dataclass
class LiveAgent:
    svc: Services
    view: View
    netns: str  # the worker's namespace, where the agent reads queues and sockets
    ps: socket.socket  # listening in the other namespace
    worker: socket.socket
    transfer: Transfer

    @property
    def ifname(self) -> str:
        """The worker side's veth, which carries the HTB classes."""
        return str(self.view.cfg.interfaces[0])

    @property
    def target(self) -> str:
        """host:port of the metrics endpoint, as Prometheus's instance label shows it."""
        assert self.svc.metrics_addr is not None
        return "{}:{}".format(*self.svc.metrics_addr)

    @property
    def base(self) -> str:
        return f"http://{self.target}"

    @property
    def ps_addr(self) -> str:
        return f"{PS_IP}:{self.ps.getsockname()[1]}"

    def register(self, job_id: str) -> None:
        """Registers a job of one PS-worker pair: ps:0 (the listening PS), worker:0."""
        cluster = {"ps": [self.ps_addr], "worker": [f"{WORKER_IP}:{self.worker.getsockname()[1]}"]}
        self.svc.jobs.register(make_job(job_id, cluster, self.view.cfg.classes))

    def prioritized_transfer(self, total: int, chunk: int = 64 << 10, pause: float = 0.002) -> None:
        """Connects an urgent and a bulk flow worker -> PS and sends `total` bytes on each, paced by
        `pause` per chunk (bounded: Transfer stops after 60 s, and with the test)."""
        self.transfer.add_clients(
            [connect(self.netns, WORKER_IP, self.ps.getsockname(), d) for d in (URGENT_DSCP, BULK_DSCP)]
        )
        self.transfer.send(total=total, chunk=chunk, pause=pause)


@contextlib.contextmanager
def live_agent(prefix: str) -> Iterator[LiveAgent]:
    """The agent's services with metrics on 127.0.0.1 (a free port) over a fresh namespace pair named
    after `prefix`; everything is stopped and removed on exit."""
    with veth_pair(prefix) as (a, b, ifname):
        build_htb(a, ifname, [URGENT_DSCP, BULK_DSCP])
        ps = listen(b, PS_IP)
        worker = listen(a, WORKER_IP)
        transfer = Transfer(ps)  # closes ps on stop
        view = View([ifname], applied=time.time())
        try:
            svc = start_services(
                view, api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", 0), netns=a
            )
            try:
                yield LiveAgent(svc, view, a, ps, worker, transfer)
            finally:
                svc.stop()
        finally:
            transfer.stop()
            worker.close()
