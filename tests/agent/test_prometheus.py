"""A real Prometheus server (Debian's /usr/bin/prometheus, started here on loopback with its own config and
storage) scrapes the agent's metrics endpoint while real marked traffic crosses the host HTB classes; PromQL
over its HTTP API returns the per-class and per-flow series."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from live_agent import View, live_agent
from prom_server import PROMETHEUS, prometheus, query, wait_for

from geryon.agent.service import start_services
from geryon.errors import UsageError

pytestmark = [
    pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="the prometheus server is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


def test_prometheus_scrapes_class_and_flow_series(tmp_path: Path) -> None:
    with live_agent("gfp") as agent:
        assert agent.target.startswith("127.0.0.1:")
        agent.register("jp")
        agent.prioritized_transfer(total=1 << 20, pause=0.01)
        with prometheus(tmp_path, agent.target) as base:
            per_class = wait_for(base, f'geryon_class_sent_bytes_total{{interface="{agent.ifname}"}} > 0', 2)
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


def test_metrics_address_in_use_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match=f"--metrics 127.0.0.1:{port}: cannot listen"):
            start_services(
                View(["eth0"]), api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", port)
            )
