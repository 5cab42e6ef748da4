"""A real Prometheus server for tests: Debian's /usr/bin/prometheus, started on loopback with its own config
and storage in the test's tmp dir, stopped by PID. Shared by the agent, dashboard and rules tests."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SCRAPE_JOB = "geryon-agent"  # the scrape job name the rules, dashboard and docs assume


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus(
    tmp: Path,
    target: str | Sequence[str],
    *,
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
) -> Iterator[str]:
    """Starts Prometheus scraping `target` (host:port, or several) as job `geryon-agent` every `interval`,
    evaluating `rule_files` as often; yields its base URL (http://127.0.0.1:PORT); stops it by PID."""
    targets = [target] if isinstance(target, str) else list(target)
    port = free_port()
    config = tmp / "prometheus.yml"
    rules = "".join(f"  - '{p}'\n" for p in rule_files)
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + f"scrape_configs:\n  - job_name: {SCRAPE_JOB}\n    static_configs:\n"
        + f"      - targets: [{', '.join(repr(t) for t in targets)}]\n"
    )
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc, tmp / "prometheus.log")
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    """Returns once Prometheus answers /-/ready (so queries do not race its start); raises with its log
    when it exits or is not ready in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"prometheus not ready after {timeout:.0f} s: {log.read_text()[-2000:]}")


def api(base: str, path: str, **params: str) -> Any:
    """GET /api/v1/<path>; returns `data` of a successful answer, raises AssertionError with the error."""
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # 400/422 carry Prometheus's reason as JSON
        body = json.load(e)
    assert body.get("status") == "success", f"{path} {params}: {body}"
    return body["data"]


def query(base: str, promql: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(base, "query", query=promql)["result"]
    return result


def wait_for(base: str, promql: str, want: int, timeout: float = 40) -> list[dict[str, Any]]:
    """Polls until the query returns at least `want` series (Prometheus needs a few scrapes), bounded in
    time; returns the last answer either way."""
    deadline = time.monotonic() + timeout
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            result = query(base, promql)
            if len(result) >= want:
                return result
        time.sleep(0.5)
    return result
