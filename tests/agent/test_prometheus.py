"""A real Prometheus server (Debian's /usr/bin/prometheus, started here on loopback with its own config and
storage) scrapes the agent's metrics endpoint while real marked traffic crosses the host HTB classes; PromQL
over its HTTP API returns the per-class and per-flow series."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from obs_netns import Transfer, build_htb, connect, listen, veth_pair
from prom_server import PROMETHEUS, prometheus, query, wait_for

from geryon.agent.config import AgentConfig, parse_config
from geryon.agent.jobs import make_job
from geryon.agent.service import start_services
from geryon.errors import UsageError

pytestmark = [
    pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="the prometheus server is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


class View:
    def __init__(self, interfaces: list[str]) -> None:
        self.cfg = parse_config({"interfaces": interfaces})

    def config(self) -> AgentConfig:
        return self.cfg

    def drift(self) -> list[str]:
        return []

    def last_apply(self) -> float | None:
        return time.time()


def test_prometheus_scrapes_class_and_flow_series(tmp_path: Path) -> None:
    with veth_pair("gfp") as (a, b, ifname):
        build_htb(a, ifname, [46, 26])
        ps = listen(b, "10.77.0.2")
        worker = listen(a, "10.77.0.1")
        transfer = Transfer(ps)
        view = View([ifname])
        svc = start_services(
            view, api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", 0), netns=a
        )
        try:
            assert svc.metrics_addr is not None and svc.metrics_addr[0] == "127.0.0.1"
            cluster = {
                "ps": [f"10.77.0.2:{ps.getsockname()[1]}"],
                "worker": [f"10.77.0.1:{worker.getsockname()[1]}"],
            }
            svc.jobs.register(make_job("jp", cluster, view.cfg.classes))
            transfer.add_clients(
                [connect(a, "10.77.0.1", ps.getsockname(), 46), connect(a, "10.77.0.1", ps.getsockname(), 26)]
            )
            transfer.send(total=1 << 20, pause=0.01)
            host, port = svc.metrics_addr
            with prometheus(tmp_path, f"{host}:{port}") as base:
                per_class = wait_for(base, f'geryon_class_sent_bytes_total{{interface="{ifname}"}} > 0', 2)
                assert sorted(r["metric"]["class"] for r in per_class) == ["bulk", "urgent"]
                assert all(r["metric"]["job"] == "geryon-agent" for r in per_class)  # Prometheus's job label

                per_flow = wait_for(base, 'geryon_flow_sent_bytes_total{geryon_job="jp"} > 0', 2)
                labels = sorted(
                    (r["metric"]["task"], r["metric"]["role"], r["metric"]["peer"], r["metric"]["class"])
                    for r in per_flow
                )
                assert labels == [
                    ("worker:0", "worker", "ps:0", "bulk"),
                    ("worker:0", "worker", "ps:0", "urgent"),
                ]

                up = query(base, 'up{job="geryon-agent"}')
                assert [r["value"][1] for r in up] == ["1"]
                errors = query(base, "sum(geryon_scrape_errors_total)")
                assert errors and errors[0]["value"][1] == "0"
        finally:
            svc.stop()
            transfer.stop()
            worker.close()


def test_metrics_address_in_use_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match=f"--metrics 127.0.0.1:{port}: cannot listen"):
            start_services(
                View(["eth0"]), api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", port)
            )
