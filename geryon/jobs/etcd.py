"""A minimal etcd v3 client over etcd's JSON gRPC gateway (HTTP POST /v3/...), with urllib only.

etcd 3.4 serves the gateway under /v3/ (3.3 also answered /v3beta/, 3.2 only /v3alpha/); Debian's
etcd-server is 3.4. Keys and values travel base64-encoded, 64-bit numbers as JSON strings. The client
knows several endpoints (the members of a cluster): a request that cannot reach one (refused, reset,
timed out) goes to the next, and the one that answered is tried first next time. An answer that etcd
itself gives (an error body, a lease not found) is not retried elsewhere.

Security: http:// only to a loopback address; any other host needs https:// (TLS, optionally with a
client certificate), the same bar as the agent's API (TCP only with TLS).
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from geryon.errors import UsageError

GATEWAY = "/v3"


class EtcdError(Exception):
    """etcd answered with an error, or no endpoint could be reached; the message names the endpoint(s)."""


class EtcdUnavailable(EtcdError):
    """No endpoint answered (refused, reset, timed out)."""


class LeaseLost(EtcdError):
    """The lease is gone: expired or revoked (etcd deleted the keys attached to it)."""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    def json(self) -> Any:
        return json.loads(self.value)


@dataclass(frozen=True)
class Event:
    type: str  # "PUT" or "DELETE"
    kv: KeyValue


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


def prefix_end(prefix: str) -> str:
    """The range_end that makes [prefix, end) every key starting with prefix (etcd's convention)."""
    b = bytearray(prefix.encode())
    for i in range(len(b) - 1, -1, -1):
        if b[i] < 0xFF:
            b[i] += 1
            return bytes(b[: i + 1]).decode("latin-1")
    return "\0"


def _kv(d: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=_unb64(d["key"]).decode(),
        value=_unb64(d.get("value", "")),
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


def check_endpoint(url: str) -> str:
    """Validates one endpoint URL: http only to loopback, else https. Returns it without a trailing /."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"etcd endpoint {url!r}: give http://HOST:PORT or https://HOST:PORT")
    if parsed.scheme == "http":
        host = parsed.hostname
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise UsageError(
                f"etcd endpoint {url!r}: plain http is allowed only to a loopback address; "
                "use https:// (TLS) for any other host"
            )
    return url.rstrip("/")


def parse_endpoints(spec: str | Sequence[str]) -> tuple[str, ...]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    urls = tuple(check_endpoint(u.strip()) for u in items if u.strip())
    if not urls:
        raise UsageError("etcd endpoints: give at least one URL, e.g. http://127.0.0.1:2379")
    return urls


TLS_FLAGS = ("--cacert", "--cert", "--key")  # the CLIs' names of cafile, certfile, keyfile


def tls_context(
    endpoints: Sequence[str],
    cafile: str | None,
    certfile: str | None,
    keyfile: str | None,
    flags: Sequence[str] = TLS_FLAGS,
) -> ssl.SSLContext | None:
    """The TLS context for https endpoints (None when every endpoint is loopback http).

    The server is verified against `cafile` (else the system's CAs) and by host name, as any https
    client does; `certfile` (with `keyfile`, unless the key is in the same PEM) is the client
    certificate etcd asks for with --client-cert-auth. TLS files given for http-only endpoints are
    refused rather than ignored (a user who gave a CA expects it to be used). UsageError names the
    option by its flag in `flags` (cafile, certfile, keyfile) and says what is wrong."""
    ca_flag, cert_flag, key_flag = flags
    https = any(u.startswith("https:") for u in endpoints)
    given = [flag for flag, v in zip(flags, (cafile, certfile, keyfile), strict=True) if v]
    if not https:
        if given:
            raise UsageError(
                f"etcd TLS: {', '.join(given)} given, but no endpoint is https:// (plain http to loopback "
                "uses no TLS); give https:// endpoints or drop the TLS files"
            )
        return None
    if keyfile and not certfile:
        raise UsageError(f"etcd TLS: {key_flag} given without {cert_flag} (the certificate it is the key of)")
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"etcd TLS: {ca_flag} {cafile!r}: not a readable PEM CA bundle ({e})") from None
    if certfile:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(
                f"etcd TLS: {cert_flag} {certfile!r}"
                + (f" / {key_flag} {keyfile!r}" if keyfile else "")
                + f": not a readable PEM certificate with its matching key ({e})"
            ) from None
    return context


class Client:
    """etcd v3 over the JSON gateway. Thread-safe: each call opens its own HTTP request."""

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout: float = 2.0,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        tls_flags: Sequence[str] = TLS_FLAGS,
    ) -> None:
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self._preferred = 0
        self._lock = threading.Lock()
        self._ssl = tls_context(self.endpoints, cafile, certfile, keyfile, tls_flags)

    # -- transport ------------------------------------------------------------------------------------

    def _order(self) -> list[int]:
        with self._lock:
            first = self._preferred
        n = len(self.endpoints)
        return [(first + i) % n for i in range(n)]

    def _open(self, path: str, body: dict[str, Any], timeout: float) -> tuple[str, Any]:
        data = json.dumps(body).encode()
        failures = []
        for i in self._order():
            url = self.endpoints[i] + GATEWAY + path
            req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            try:
                resp = urllib.request.urlopen(req, timeout=timeout, context=self._ssl)
            except urllib.error.HTTPError as e:  # etcd's own answer: no point asking another member
                text = e.read().decode(errors="replace")
                try:
                    msg = json.loads(text).get("message") or text
                except ValueError:
                    msg = text
                if "lease not found" in msg:
                    raise LeaseLost(f"etcd {self.endpoints[i]}: {msg}") from None
                raise EtcdError(f"etcd {url}: HTTP {e.code}: {msg}") from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                # A certificate refused either way (the server's by our CA, ours by etcd's) is no network
                # trouble: say so, so the user looks at the TLS files rather than the network.
                if isinstance(e, ssl.SSLError) or isinstance(reason, ssl.SSLError):
                    reason = f"TLS handshake failed, check the CA and client certificate: {reason}"
                failures.append(f"{self.endpoints[i]} ({reason})")
                continue
            with self._lock:
                self._preferred = i
            return self.endpoints[i], resp
        raise EtcdUnavailable(f"etcd unreachable: {', '.join(failures)}")

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One unary gateway call (path like '/kv/range'); returns the decoded JSON answer."""
        endpoint, resp = self._open(path, body, self.timeout)
        try:
            with resp:
                answer = json.loads(resp.read())
        except (OSError, ValueError) as e:
            raise EtcdUnavailable(f"etcd {endpoint}{GATEWAY}{path}: reading the answer failed: {e}") from None
        if isinstance(answer, dict) and "error" in answer and "header" not in answer:
            raise EtcdError(f"etcd {endpoint}{GATEWAY}{path}: {answer.get('message') or answer['error']}")
        return dict(answer)

    # -- kv -------------------------------------------------------------------------------------------

    def put(self, key: str, value: str | bytes, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.call("/kv/put", body)["header"]["revision"])

    def get(self, key: str) -> KeyValue | None:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def range(self, key: str, prefix: bool = False) -> tuple[list[KeyValue], int]:
        """Keys equal to `key` (or starting with it, prefix=True) and the store revision they were read at."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        answer = self.call("/kv/range", body)
        return [_kv(d) for d in answer.get("kvs", [])], int(answer["header"]["revision"])

    def delete(self, key: str, prefix: bool = False) -> int:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        return int(self.call("/kv/deleterange", body).get("deleted", 0))

    def txn(
        self,
        compare: Sequence[dict[str, Any]],
        success: Sequence[dict[str, Any]],
        failure: Sequence[dict[str, Any]] = (),
    ) -> tuple[bool, dict[str, Any]]:
        """A transaction of raw gateway ops (build them with cmp_*, op_*); returns (succeeded, answer)."""
        body = {"compare": list(compare), "success": list(success), "failure": list(failure)}
        answer = self.call("/kv/txn", body)
        return bool(answer.get("succeeded", False)), answer

    # -- leases ---------------------------------------------------------------------------------------

    def grant(self, ttl: int) -> int:
        return int(self.call("/lease/grant", {"TTL": str(int(ttl))})["ID"])

    def keepalive(self, lease: int) -> int:
        """Renews the lease once; returns its TTL. Raises LeaseLost when etcd no longer has it."""
        answer = self.call("/lease/keepalive", {"ID": str(lease)})
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseLost(f"etcd {self.endpoints[self._preferred]}: lease {lease:x} expired or revoked")
        return ttl

    def revoke(self, lease: int) -> None:
        with contextlib.suppress(LeaseLost):  # already gone: revoked is what we wanted
            self.call("/lease/revoke", {"ID": str(lease)})

    # -- watch ----------------------------------------------------------------------------------------

    def watch(
        self, key: str, prefix: bool = False, start_revision: int = 0, timeout: float | None = None
    ) -> Iterator[list[Event]]:
        """Streams the changes to `key` (or the prefix) from start_revision on: one list of events per
        etcd message. `timeout`: a read that waits longer raises EtcdUnavailable (the stream is closed);
        the caller re-opens from the last revision it saw + 1."""
        create: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            create["range_end"] = _b64(prefix_end(key))
        if start_revision:
            create["start_revision"] = str(start_revision)
        read_timeout = self.timeout if timeout is None else timeout
        endpoint, resp = self._open("/watch", {"create_request": create}, read_timeout)
        with resp:
            while True:
                try:
                    line = resp.readline()
                except (TimeoutError, OSError) as e:
                    raise EtcdUnavailable(
                        f"etcd {endpoint}{GATEWAY}/watch: {e or 'read timed out'}"
                    ) from None
                if not line:
                    raise EtcdUnavailable(f"etcd {endpoint}{GATEWAY}/watch: the stream ended")
                msg = json.loads(line)
                if "error" in msg:
                    raise EtcdError(
                        f"etcd {endpoint}{GATEWAY}/watch: {msg['error'].get('message', msg['error'])}"
                    )
                result = msg.get("result", {})
                if result.get("canceled"):
                    raise EtcdError(
                        f"etcd {endpoint}{GATEWAY}/watch: canceled: {result.get('cancel_reason', '')}"
                    )
                events = [Event(type=e.get("type", "PUT"), kv=_kv(e["kv"])) for e in result.get("events", [])]
                if events:
                    yield events

    def status(self) -> dict[str, Any]:
        return self.call("/maintenance/status", {})


# -- txn building blocks --------------------------------------------------------------------------------


def cmp_create_revision(key: str, revision: int) -> dict[str, Any]:
    """True when key's create_revision equals revision (0: the key does not exist)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def cmp_mod_revision(key: str, revision: int) -> dict[str, Any]:
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def op_put(key: str, value: str | bytes, lease: int = 0) -> dict[str, Any]:
    put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def op_delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


def op_get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": _b64(key)}}


def txn_kvs(answer: dict[str, Any], index: int) -> list[KeyValue]:
    """The key-values a txn's index-th response (a request_range) returned."""
    responses = answer.get("responses", [])
    if index >= len(responses):
        return []
    return [_kv(d) for d in responses[index].get("response_range", {}).get("kvs", [])]
