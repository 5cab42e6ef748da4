"""The status snapshot (pure: rates, the reading history, the JSON document) and the HTTP endpoint's routes:
a real server on loopback, real requests; /status.json over real marked traffic through the host HTB
classes in namespaces the test creates."""

from __future__ import annotations

import gzip
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from live_agent import View, live_agent

import geryon.agent
from geryon import __version__
from geryon.agent.config import parse_config
from geryon.agent.flows import Flow
from geryon.agent.jobs import JobFlow, JobRegistry, PairReport, make_job
from geryon.agent.observe import ClassSample
from geryon.agent.service import Services, start_services
from geryon.agent.status import MAX_READINGS, History, Observed, Reading, rates, reading, snapshot

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
WEB = Path(geryon.agent.__file__).parent / "web"


# --- pure parts ---


def test_rates_are_bits_per_second_and_unknown_where_they_cannot_be() -> None:
    prev = {"a": 1000, "b": 500, "gone": 7}
    now = {"a": 3000, "b": 100, "new": 50}
    assert rates(prev, now, 2.0) == {"a": 8 * 2000 / 2.0, "b": None, "new": None}  # b went backwards
    assert rates(prev, {"a": 1000}, 1.0) == {"a": 0.0}  # an idle flow is 0, not unknown
    assert rates(prev, now, 0.0) == {"a": None, "b": None, "new": None}
    assert rates({}, {}, 1.0) == {}


def test_history_picks_a_settled_base_and_forgets_old_readings() -> None:
    h = History(min_interval=0.5, max_age=3.0)
    assert h.base(10.0) is None
    h.add(Reading(10.0))
    assert h.base(10.0) is None  # not older than now
    assert h.base(10.2).at == 10.0  # nothing settled yet: the oldest there is
    h.add(Reading(10.2))
    h.add(Reading(10.9))
    assert h.base(11.0).at == 10.2  # the newest at least 0.5 s older (a second poller at 10.9 is too close)
    for t in (11.5, 12.0, 13.0, 14.0):
        h.add(Reading(t))
    assert h._readings[0].at >= 10.9 and h.base(14.1).at == 13.0
    assert len(h) <= 5
    for i in range(200):  # many fast pollers: the history stays bounded
        h.add(Reading(15.0 + i / 1000))
    assert len(h) == MAX_READINGS
    with pytest.raises(ValueError, match="history: need 0 < min_interval <= max_age"):
        History(min_interval=0, max_age=1)


def _flow(lport: int, dscp: int, sent: int, received: int = 0) -> Flow:
    return Flow("10.0.0.2", lport, "10.0.0.1", 2222, dscp, sent, sent, received, 250, 3, inode=lport)


def _observed(at: float, urgent: int, bulk: int, queues: dict[str, list[ClassSample]] | None) -> Observed:
    cfg = parse_config({"interfaces": ["eth0", "eth1"]})
    jobs = JobRegistry(clock=lambda: 50.0)
    jobs.register(make_job("j1", {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"]}, cfg.classes))
    jobs.report("j1", 0.3, [0.4])
    state = jobs.get("j1")
    ps, worker = state.spec.tasks
    flows = (
        JobFlow("j1", _flow(40002, 26, bulk), worker, ps, "ps:0", "bulk"),
        JobFlow("j1", _flow(40003, 10, 5), worker, ps, "ps:0", "dscp10"),
        JobFlow("j1", _flow(40001, 46, urgent, 99), worker, ps, "ps:0", "urgent"),
    )
    pair = PairReport("j1", ps, worker, 3, (10, 26, 46), wrong=(10,), flows=flows)
    return Observed(
        host="h1",
        version="9.9",
        time=1_800_000_000.0,
        at=at,
        config=cfg,
        queues=queues,
        drift=["eth0/qdisc: missing"],
        last_apply=None,
        jobs=[state],
        pairs=[pair],
    )


def _sample(ifname: str, cls: str, sent: int, backlog: int = 0, drops: int = 0) -> ClassSample:
    return ClassSample(ifname, cls, sent, sent // 1000, drops, 0, backlog, backlog // 1000)


def test_snapshot_computes_live_rates_per_flow_and_class() -> None:
    q0 = {"eth0": [_sample("eth0", "urgent", 1000), _sample("eth0", "bulk", 0)], "eth1": []}
    first = _observed(100.0, urgent=1000, bulk=0, queues=q0)
    doc0 = snapshot(first, None)
    assert doc0["interval_s"] is None
    assert all(f["sent_bps"] is None for f in doc0["jobs"][0]["pairs"][0]["flows"])  # no base yet

    q1 = {
        "eth0": [
            _sample("eth0", "urgent", 1_001_000, backlog=3000),
            _sample("eth0", "bulk", 250_000, drops=2),
        ],
        "eth1": [_sample("eth1", "urgent", 500)],  # new since the base: its rate is unknown
    }
    doc = snapshot(_observed(102.0, urgent=2_001_000, bulk=500_000, queues=q1), reading(first))
    assert doc["interval_s"] == 2.0
    assert (doc["host"], doc["version"], doc["time"]) == ("h1", "9.9", 1_800_000_000.0)
    assert doc["config"] == {"in_sync": False, "drift": ["eth0/qdisc: missing"], "last_apply": None}
    assert doc["interfaces"] == [
        {"name": "eth0", "queues_present": True},
        {"name": "eth1", "queues_present": True},
    ]
    urgent, bulk = doc["classes"]
    assert (urgent["name"], urgent["dscps"], urgent["priority"], urgent["lossless"], urgent["tsa"]) == (
        "urgent", [46], 5, True, "strict",
    )  # fmt: skip
    assert (bulk["tsa"], bulk["bandwidth"], urgent["bandwidth"]) == ("ets", 50, None)
    assert urgent["bits_per_second"] == 8 * 1_000_000 / 2  # eth0 only; eth1's queue has no rate yet
    assert [q["bits_per_second"] for q in urgent["queues"]] == [4_000_000.0, None]
    assert (urgent["backlog_bytes"], bulk["drops"], bulk["bits_per_second"]) == (3000, 2, 1_000_000.0)

    job = doc["jobs"][0]
    assert (job["job_id"], job["thresholds"], job["iteration_time_s"]) == ("j1", [0.4], 0.3)
    assert (job["reports"], job["threshold_changes"], job["threshold_changed_at"]) == (1, 1, 50.0)
    pair = job["pairs"][0]
    assert (pair["ps"], pair["worker"], pair["ok"], pair["wrong"]) == ("ps:0", "worker:0", False, [10])
    assert pair["problems"] == ["a flow carries DSCP 10, which is no class of the job"]
    # Urgent first, then bulk, then the flow no class of the job owns.
    assert [(f["class"], f["dscp"]) for f in pair["flows"]] == [("urgent", 46), ("bulk", 26), ("dscp10", 10)]
    fu, fb, fx = pair["flows"]
    assert (fu["local"], fu["remote"], fu["role"]) == ("10.0.0.2:40001", "10.0.0.1:2222", "worker")
    assert (fu["sent_bps"], fb["sent_bps"], fx["sent_bps"]) == (8 * 2_000_000 / 2, 8 * 500_000 / 2, 0.0)
    assert (fu["bytes_sent"], fu["bytes_received"], fu["received_bps"], fu["rtt_ms"]) == (
        2_001_000,
        99,
        0.0,
        0.25,
    )
    json.dumps(doc)  # the document is plain JSON


def test_snapshot_marks_failed_sections_unknown() -> None:
    obs = _observed(1.0, 0, 0, queues=None)
    obs = replace(obs, drift=None, pairs=None, errors={"config": "RuntimeError: x"})
    doc = snapshot(obs, None)
    assert doc["config"]["in_sync"] is None and doc["errors"] == {"config": "RuntimeError: x"}
    assert doc["interfaces"][0]["queues_present"] is None
    assert doc["classes"][0]["queues"] == [] and doc["classes"][0]["bits_per_second"] is None
    assert doc["jobs"][0]["pairs"] == []


# --- the HTTP endpoint ---


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return request("GET", url, **headers)


def request(method: str, url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def served() -> Iterator[tuple[Services, View, str]]:
    """The agent's HTTP endpoint on a free loopback port (the host namespace: no queues, no flows)."""
    view = View(["lo"])
    svc = start_services(view, api_socket=None, api_tcp=None, tls=None, metrics_addr=("127.0.0.1", 0))
    assert svc.metrics_addr is not None
    try:
        yield svc, view, f"http://127.0.0.1:{svc.metrics_addr[1]}"
    finally:
        svc.stop()


def test_routes_page_assets_and_errors(served: tuple[Services, View, str]) -> None:
    _, _, base = served
    code, headers, body = get(base + "/")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert b'id="classes"' in body and b'src="/static/status.js"' in body
    assert get(base + "/index.html")[2] == body
    code, headers, js = get(base + "/static/status.js")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript") and b"/status.json" in js
    code, headers, _ = get(base + "/static/status.css")
    assert code == 200 and headers["Content-Type"].startswith("text/css")
    for path in ("/nope", "/static/nope.js", "/static/../http_server.py", "/static/", "/metrics/x"):
        code, _, text = get(base + path)
        assert code == 404, path
    code, headers, text = request("HEAD", base + "/static/status.js")
    assert code == 200 and text == b"" and int(headers["Content-Length"]) == len(js)
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
        code, headers, text = request(method, base + "/status.json")
        assert (code, headers.get("Allow")) == (405, "GET, HEAD"), method
        assert b"use GET or HEAD" in text


def test_metrics_are_prometheus_client_expositions(served: tuple[Services, View, str]) -> None:
    _, _, base = served
    code, headers, body = get(base + "/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert f'geryon_agent_info{{version="{__version__}"}} 1.0' in text
    assert 'geryon_class_info{class="urgent",dscp="46",lossless="true",priority="5"} 1.0' in text
    # OpenMetrics when asked (as Prometheus does), gzip when accepted, the query changes nothing.
    code, headers, body = get(base + "/metrics", Accept="application/openmetrics-text; version=1.0.0")
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    code, headers, body = get(base + "/metrics", **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and b"geryon_agent_info" in gzip.decompress(body)
    code, _, body = get(base + "/metrics?name[]=geryon_agent_info")  # the query is ignored: everything
    assert b"geryon_agent_info" in body and b"geryon_class_info" in body


def test_status_json_without_jobs_and_with_a_failing_section(served: tuple[Services, View, str]) -> None:
    _, view, base = served
    code, headers, body = get(base + "/status.json")
    assert code == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["version"] == __version__ and doc["jobs"] == [] and doc["errors"] == {}
    assert doc["config"] == {"in_sync": True, "drift": [], "last_apply": 1_700_000_000.0}
    assert [c["name"] for c in doc["classes"]] == ["urgent", "bulk"]
    assert doc["interfaces"] == [{"name": "lo", "queues_present": False}]
    view.fail = True
    doc = json.loads(get(base + "/status.json")[2])
    assert doc["config"]["in_sync"] is None
    assert doc["errors"] == {"config": "RuntimeError: the daemon's drift check broke"}
    assert doc["classes"][0]["name"] == "urgent"  # the other sections still answer
    view.config_fail = True  # without a config there is no page to render: a clear 500
    code, headers, body = get(base + "/status.json")
    assert (code, json.loads(body)) == (500, {"error": "RuntimeError: no config"})


_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://|(?:src|href|action)\s*=\s*[\"']?//|url\(\s*[\"']?(?!/static/)")


def test_the_page_references_nothing_outside_the_agent(served: tuple[Services, View, str]) -> None:
    _, _, base = served
    files = sorted(p.name for p in WEB.iterdir() if p.is_file())
    assert {"index.html", "status.js", "status.css"} <= set(files)
    html = get(base + "/")[2].decode()
    refs = re.findall(r"(?:src|href)=\"([^\"]+)\"", html)
    assert refs and all(r.startswith("/static/") for r in refs), refs
    for name in files:
        code, _, body = get(f"{base}/static/{name}")
        assert code == 200, name
        hits = _URL.findall(body.decode())
        assert not hits, (name, hits)


@needs_root
def test_status_json_shows_live_throughput_of_a_prioritized_transfer() -> None:
    with live_agent("gfs") as agent:
        base, ifname = agent.base, agent.ifname
        agent.register("js")
        agent.svc.jobs.report("js", 0.2, [0.25])
        # Paced well below the 200 Mbit link, so strict priority leaves the bulk flow its share too.
        agent.prioritized_transfer(total=256 << 20, chunk=32 << 10, pause=0.01)
        doc: dict[str, Any] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            doc = json.loads(get(base + "/status.json")[2])
            pairs = doc["jobs"][0]["pairs"]
            flows = pairs[0]["flows"] if pairs else []
            classes = {c["name"]: c["bits_per_second"] for c in doc["classes"]}
            if len(flows) == 2 and all(f["sent_bps"] for f in flows) and all(classes.values()):
                break
            time.sleep(0.3)
        job = doc["jobs"][0]
        pair = job["pairs"][0]
        assert (pair["ps"], pair["worker"], pair["ok"], pair["dscps"]) == (
            "ps:0",
            "worker:0",
            True,
            [26, 46],
        )
        assert [(f["class"], f["dscp"], f["role"]) for f in pair["flows"]] == [
            ("urgent", 46, "worker"),
            ("bulk", 26, "worker"),
        ]
        for f in pair["flows"]:
            assert f["sent_bps"] > 0 and f["bytes_sent"] > 0, f
            assert f["local"].startswith("10.77.0.1:") and f["remote"] == agent.ps_addr
            # Paced at most 32 KiB per 10 ms: the rate is bounded by that (plus slack for timing).
            assert f["sent_bps"] < 2 * 8 * (32 << 10) / 0.01, f
        for c in doc["classes"]:
            assert c["bits_per_second"] > 0 and c["queues"][0]["interface"] == ifname, c
        assert 0 < doc["interval_s"] < 5
        assert (job["thresholds"], job["iteration_time_s"], job["threshold_changes"]) == ([0.25], 0.2, 1)
        assert doc["interfaces"] == [{"name": ifname, "queues_present": True}] and doc["errors"] == {}
