"""The agent's status page in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium, offline): it shows the flows of a running prioritized transfer (urgent DSCP 46 + bulk DSCP 26
through the host HTB classes in namespaces the test creates) with live throughput, the classes and the
reported threshold; a screenshot is saved as a test artifact; the error banner appears once the agent
stops."""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_agent import WORKER_IP, live_agent
from obs_netns import connect
from waiting import wait_until

from geryon import __version__
from geryon.agent.jobs import TaskFallback, UnresolvedFlow
from geryon.agent.peer import PeerCheck, PeerMismatch

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = "agent-status-page.png"

pytestmark = [
    pytest.mark.skipif(
        not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
        reason=f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian packages chromium, chromium-driver)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


def artifact_dir() -> Path:
    d = Path(os.environ.get("GERYON_TEST_ARTIFACTS") or REPO / "out" / "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver (by its PID) and the browser it started


# Reads what the page shows for one pair: each flow row's class, DSCP and live send rate (data-value).
PAIR_FLOWS = """
const pair = `[data-job="${arguments[0]}"] [data-pair="${arguments[1]}"]`;
const rows = document.querySelectorAll(`${pair} tr[data-class]`);
return Array.from(rows, (r) => ({
  cls: r.dataset.class, dscp: r.dataset.dscp,
  shownClass: r.querySelector('[data-field="class"]').textContent,
  shownDscp: r.querySelector('[data-field="dscp"]').textContent,
  bps: parseFloat(r.querySelector('[data-field="sent-bps"]').dataset.value || "0"),
  rate: r.querySelector('[data-field="sent-bps"]').textContent,
  local: r.querySelector('[data-field="local"]').textContent,
  remote: r.querySelector('[data-field="remote"]').textContent,
}));
"""

CLASS_ROWS = """
return Array.from(document.querySelectorAll('#classes tbody tr'), (r) => ({
  name: r.dataset.class,
  dscp: r.querySelector('[data-field="dscp"]').textContent,
  priority: r.querySelector('[data-field="priority"]').textContent,
  lossless: r.querySelector('[data-field="lossless"]').textContent,
  bps: parseFloat(r.querySelector('[data-field="bps"]').dataset.value || "0"),
}));
"""


# The page re-renders its tables every second, so element handles go stale: read text and attributes in
# one script call instead. Returns [textContent, data-ok] of the first match, or null.
READ = """
const e = document.querySelector(arguments[0]);
return e === null ? null : [e.textContent, e.dataset.ok === undefined ? null : e.dataset.ok];
"""


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_page_shows_the_flows_of_a_prioritized_transfer(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    with live_agent("gfw") as agent:
        svc = agent.svc
        url = f"{agent.base}/"
        ps_addr = agent.ps_addr
        agent.register("jb")
        # Paced well below the 200 Mbit link, so strict priority leaves the bulk flow its share; the
        # transfer stops with the test (and after 60 s at the latest).
        agent.prioritized_transfer(total=256 << 20, chunk=32 << 10, pause=0.01)

        browser.get(url)
        assert browser.title == "Geryon agent"
        wait_until("the header", lambda: browser.find_element(By.ID, "version").text == __version__)

        def both_flows_live() -> list[dict[str, Any]] | None:
            rows: list[dict[str, Any]] = browser.execute_script(PAIR_FLOWS, "jb", "ps:0|worker:0")
            classes = sorted((r["cls"], r["dscp"]) for r in rows)
            ok = classes == [("bulk", "26"), ("urgent", "46")] and all(r["bps"] > 0 for r in rows)
            return rows if ok else None

        flows = wait_until(
            "pair ps:0 <-> worker:0 with an urgent and a bulk flow, each with live throughput",
            both_flows_live,
        )
        for r in flows:
            assert (r["shownClass"], r["shownDscp"]) == (r["cls"], r["dscp"])
            assert r["local"].startswith("10.77.0.1:") and r["remote"] == ps_addr
            assert r["rate"].endswith("bit/s"), r

        def read(css: str) -> list[str | None] | None:
            found: list[str | None] | None = browser.execute_script(READ, css)
            return found

        pair_state = '[data-job="jb"] [data-pair="ps:0|worker:0"] [data-field="pair-state"]'
        assert read(pair_state) == ["ok", "true"]

        def classes_live() -> list[dict[str, Any]] | None:
            rows: list[dict[str, Any]] = browser.execute_script(CLASS_ROWS)
            return rows if rows and all(r["bps"] > 0 for r in rows) else None

        classes = wait_until("both classes with live throughput", classes_live)
        assert [(r["name"], r["dscp"], r["priority"], r["lossless"]) for r in classes] == [
            ("urgent", "46", "5", "yes (PFC)"),
            ("bulk", "26", "3", "yes (PFC)"),
        ]
        badge = browser.find_element(By.ID, "sync-badge")
        assert (badge.text, badge.get_attribute("data-in-sync")) == ("config: in sync", "true")
        peer_badge = browser.find_element(By.ID, "peer-badge")
        assert (peer_badge.text, peer_badge.get_attribute("data-peer")) == ("switch: not reported", "unknown")
        # The daemon's switch check finds the port without PFC on the bulk priority: badge and line.
        ifname = agent.view.cfg.interfaces[0]
        miss = PeerMismatch(ifname, "pfc", f"{ifname} priority 3", "PFC on (class 'bulk')", "off")
        agent.view.peer_check = PeerCheck((ifname,), (miss,), time.time())
        wait_until("the switch badge", lambda: peer_badge.get_attribute("data-peer") == "bad")
        assert peer_badge.text == "switch: disagrees (1)"
        assert read('#peer-list [data-kind="pfc"]') == [
            f"switch: {ifname} priority 3: expected PFC on (class 'bulk'), found off",
            None,
        ]

        thresholds = '[data-job="jb"] [data-field="thresholds"]'
        assert read(thresholds) == ["not reported", None]
        svc.jobs.report("jb", 0.25, [0.35])
        wait_until(
            "the reported threshold",
            lambda: read(thresholds) == ["0.35", None],
        )
        assert read('[data-job="jb"] [data-field="iteration"]') == ["250.0 ms", None]
        unresolved = '[data-job="jb"] [data-field="unresolved"]'
        assert read(unresolved) is None  # nothing untraced: no line at all
        svc.jobs.report("jb", None, None, [UnresolvedFlow("worker:0", "ps:0", 1, "received", 15304, 7)])
        wait_until("the unresolved flow", lambda: read(unresolved) is not None)
        assert read(unresolved) == ["worker:0 received from ps:0, class bulk: 14.9 KiB in 7 tensor(s)", None]
        fallback = '[data-job="jb"] [data-field="fallback"]'
        assert read(fallback) is None  # no task logged a fallback line: nothing shown
        svc.jobs.report("jb", None, None, (), [TaskFallback("ps:0", 1, 0.987, "no_map_table")])
        wait_until("the fallback warning", lambda: read(fallback) is not None)
        assert read(fallback) == [
            "ps:0: 1 warning(s), last 98.7% on the default class (no map_table installed)",
            None,
        ]
        assert not browser.find_element(By.ID, "error-banner").is_displayed()

        path = artifact_dir() / SCREENSHOT
        path.unlink(missing_ok=True)
        assert browser.save_screenshot(str(path))
        data = path.read_bytes()
        width, height = png_size(data)
        assert width >= 800 and height >= 600 and len(data) > 20_000, (width, height, len(data))

        # A connection of the pair carrying a DSCP that no class of the job has: the pair's badge says so.
        agent.transfer.add_clients([connect(agent.netns, WORKER_IP, agent.ps.getsockname(), 10)])
        wait_until(
            "the wrong-DSCP badge",
            lambda: (read(pair_state) or [None, None])[1] == "false",
        )
        assert read(pair_state) == ["wrong DSCP 10", "false"]

        # The agent goes away: the page says so instead of showing stale numbers silently.
        svc.stop()
        banner = wait_until(
            "the error banner",
            lambda: (e := browser.find_element(By.ID, "error-banner")).is_displayed() and e.text,
            timeout=15,
        )
        assert "Cannot reach the agent" in banner and "stale" in banner
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "error"
