"""Real etcd servers for the tests: one member or a cluster on free loopback ports, each in a temporary data
directory, stopped by PID (SIGKILL: a crash, or SIGTERM) and their directories removed.

Debian's etcd-server (3.4); a module that needs it skips when `etcd` is not on PATH (need_etcd()).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def need_etcd() -> str:
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server; scripts/bootstrap.sh does)")
    return path


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Member:
    name: str
    client_url: str
    peer_url: str
    data_dir: str
    log: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    tls: ssl.SSLContext | None = None  # how the health check reaches an https member

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=10)
        self.proc = None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=1, context=self.tls) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False


@dataclass
class EtcdCluster:
    members: list[Member]
    base: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    def wait_healthy(self, members: list[Member] | None = None, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        todo = members if members is not None else self.members
        while time.monotonic() < deadline:
            if all(m.healthy() for m in todo):
                return
            for m in todo:
                if m.proc is not None and m.proc.poll() is not None:
                    tail = Path(m.log).read_text()[-2000:]
                    raise AssertionError(f"etcd {m.name} exited {m.proc.returncode}: {tail}")
            time.sleep(0.1)
        logs = "\n".join(Path(m.log).read_text()[-1500:] for m in todo)
        raise AssertionError(f"etcd not healthy within {timeout:.0f} s:\n{logs}")

    def stop(self) -> None:
        for m in self.members:
            m.kill()
        shutil.rmtree(self.base, ignore_errors=True)


@dataclass(frozen=True)
class EtcdTls:
    """Client TLS for start_cluster: the CA the server's certificate chains to, and the certificate
    (and key) every client must show (etcd's --client-cert-auth)."""

    ca: str
    server_cert: str
    server_key: str


def start_cluster(size: int = 1, tls: EtcdTls | None = None) -> EtcdCluster:
    """`size` members on loopback; with `tls`, clients talk https and must show a certificate signed by
    tls.ca (peers stay plain http on loopback)."""
    etcd = need_etcd()
    base = tempfile.mkdtemp(prefix="geryon-etcd-")
    scheme = "https" if tls else "http"
    health: ssl.SSLContext | None = None
    if tls:
        # The health check shows the server's own certificate (it is issued for client auth too).
        health = ssl.create_default_context(cafile=tls.ca)
        health.load_cert_chain(tls.server_cert, tls.server_key)
    ports = free_ports(2 * size)
    names = [f"m{i}" for i in range(size)]
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(size)]
    initial = ",".join(f"{n}={p}" for n, p in zip(names, peers, strict=True))
    members = []
    for i, name in enumerate(names):
        client = f"{scheme}://127.0.0.1:{ports[2 * i]}"
        data = os.path.join(base, name)
        args = [
            etcd,
            "--name", name,
            "--data-dir", data,
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peers[i],
            "--initial-advertise-peer-urls", peers[i],
            "--initial-cluster", initial,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", os.path.basename(base),
            "--heartbeat-interval", "100",
            "--election-timeout", "1000",
        ]  # fmt: skip
        if tls:
            args += ["--cert-file", tls.server_cert, "--key-file", tls.server_key]
            args += ["--trusted-ca-file", tls.ca, "--client-cert-auth"]
        log = os.path.join(base, f"{name}.log")
        members.append(Member(name, client, peers[i], data, log, args, tls=health))
    cluster = EtcdCluster(members, base)
    try:
        for m in members:
            m.start()
        cluster.wait_healthy()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def geryon(*args: str, log: str) -> subprocess.Popen[bytes]:
    """`python -m geryon ARGS` from this worktree, its output to `log`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(log, "ab") as out:
        cmd = [sys.executable, "-m", "geryon", *args]
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    proc.wait(timeout=10)
