"""The agent's HTTP endpoint on its metrics port (default 127.0.0.1:9477).

  /metrics          the Prometheus exposition, encoded by prometheus_client (text or OpenMetrics by Accept,
                    gzip by Accept-Encoding), from the AgentCollector
  /                 the status page (geryon/agent/web/index.html)
  /status.json      the snapshot the page renders (geryon/agent/status.py)
  /static/<file>    the page's JS and CSS, package data in geryon/agent/web/ (no CDN: works offline)

Anything else is 404; methods other than GET and HEAD are 405.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from geryon import __version__
from geryon.agent.metrics import AgentCollector
from geryon.agent.observe import observe_jobs
from geryon.agent.status import History, Observed, reading, snapshot
from geryon.errors import UsageError

log = logging.getLogger("geryon.agent.http")

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
# The page loads nothing but its own assets and status.json.
CSP = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


def web_assets() -> dict[str, tuple[bytes, str]]:
    """The page's files by name with their content type, read once from the package."""
    root = importlib.resources.files("geryon.agent") / "web"
    out = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            out[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    if "index.html" not in out:
        raise RuntimeError("geryon/agent/web/index.html is missing from the installed package")
    return out


class StatusSource:
    """Reads the live state for a snapshot (through the collector's kernel reader and the registries, the
    same reads the metrics use) and keeps the readings that live throughput is computed from."""

    def __init__(
        self,
        collector: AgentCollector,
        *,
        host: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.host = host or socket.gethostname()
        self._clock = clock
        self._wall = wall
        self._history = History()
        self._lock = threading.Lock()

    def observe(self) -> Observed:
        c = self.collector
        errors: dict[str, str] = {}

        def attempt(section: str, read: Callable[[], Any]) -> Any:
            try:
                return read()
            except Exception as e:  # one failing source must not hide the others
                log.exception("status: reading %s failed", section)
                errors[section] = f"{type(e).__name__}: {e}"
                return None

        queues = attempt("classes", c.class_samples_by_interface)
        drift = attempt("config", c.agent.drift)
        last_apply = attempt("last_apply", c.agent.last_apply)
        peer = attempt("peer", c.agent.peer)
        observed = attempt("flows", lambda: observe_jobs(c.jobs, c.discovery))
        return Observed(
            host=self.host,
            version=__version__,
            time=self._wall(),
            at=self._clock(),
            config=c.agent.config(),
            queues=queues,
            drift=drift,
            last_apply=last_apply,
            peer=peer.as_json() if peer is not None else None,
            jobs=c.jobs.states(),
            pairs=observed[1] if observed is not None else None,
            errors=errors,
        )

    def snapshot(self) -> dict[str, Any]:
        # One at a time (the kernel reads are serial anyway): readings enter the history in time order.
        with self._lock:
            obs = self.observe()
            doc = snapshot(obs, self._history.base(obs.at))
            self._history.add(reading(obs))
        return doc


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never blocks server_close

    def __init__(
        self,
        addr: tuple[str, int],
        registry: CollectorRegistry,
        status: StatusSource,
        assets: dict[str, tuple[bytes, str]],
    ) -> None:
        self.registry = registry
        self.status = status
        self.assets = assets
        super().__init__(addr, _Handler)


class _AgentHTTPServer6(AgentHTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    server_version = f"geryon-agent/{__version__}"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler looks up do_<METHOD>; every method but GET and HEAD is not allowed here.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        body = b"method not allowed: use GET or HEAD\n"
        self._send(405, body, "text/plain; charset=utf-8", False, extra={"Allow": "GET, HEAD"})

    def _route(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path == "/metrics":
            self._metrics(head)
        elif path in ("/", "/index.html"):
            body, ctype = self.server.assets["index.html"]
            self._send(200, body, ctype, head)
        elif path == "/status.json":
            self._status(head)
        elif path.startswith("/static/") and path[len("/static/") :] in self.server.assets:
            body, ctype = self.server.assets[path[len("/static/") :]]
            self._send(200, body, ctype, head)
        else:
            self._send(404, f"not found: {path}\n".encode(), "text/plain; charset=utf-8", head)

    def _metrics(self, head: bool) -> None:
        # No `name[]` filtering: the collector declares no names up front (registration must not read the
        # kernel), so prometheus_client's restricted registry would answer nothing; the whole set it is.
        registry = self.server.registry
        encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(registry)
        extra = {}
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body)
            extra["Content-Encoding"] = "gzip"
        self._send(200, body, ctype, head, extra=extra)

    def _status(self, head: bool) -> None:
        try:
            doc = self.server.status.snapshot()
        except Exception as e:
            log.exception("status: snapshot failed")
            body = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
            self._send(500, body, "application/json", head)
            return
        self._send(200, json.dumps(doc).encode(), "application/json", head)

    def _send(
        self, code: int, body: bytes, ctype: str, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if ctype.startswith("text/html"):
            self.send_header("Content-Security-Policy", CSP)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def serve(
    collector: AgentCollector, addr: tuple[str, int]
) -> tuple[CollectorRegistry, AgentHTTPServer, tuple[str, int]]:
    """Serves /metrics, the status page and /status.json on addr (127.0.0.1 by default in the daemon);
    port 0 = a free port. Returns the registry, the server (stop: shutdown() then server_close()) and the
    bound address."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    host, port = addr
    cls = _AgentHTTPServer6 if ":" in host else AgentHTTPServer
    try:
        server = cls((host, port), registry, StatusSource(collector), web_assets())
    except OSError as e:
        raise UsageError(f"--metrics {host}:{port}: cannot listen ({e.strerror or e})") from None
    threading.Thread(target=server.serve_forever, name="geryon-http", daemon=True).start()
    return registry, server, (host, int(server.server_port))
