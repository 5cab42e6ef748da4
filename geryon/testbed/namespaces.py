"""Named network namespaces (the `ip netns` convention: a bind mount under /run/netns), entered
per thread. pyroute2's own `pushns` creates a namespace that does not exist and keeps one global
stack for all threads; `inside` does neither."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from pyroute2 import IPRoute
from pyroute2 import netns as _netns

NETNS_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def exists(name: str) -> bool:
    return os.path.exists(ns_path(name))


def listed(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def create(name: str) -> bool:
    """Creates the namespace unless it exists; True when it was created."""
    if exists(name):
        return False
    _netns.create(name)
    return True


def remove(name: str) -> bool:
    """Unmounts and removes the name; True when it existed. The namespace itself ends with its last
    process: kill those first (procs.pids_in)."""
    if not exists(name):
        return False
    try:
        _netns.remove(name)
    except FileNotFoundError:
        return False
    return True


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(name: str) -> Iterator[None]:
    """Runs the block in namespace `name` (this thread only): sockets and /proc/sys/net opened here
    belong to it. FileNotFoundError when it does not exist."""
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(ns_path(name), os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(back)
    finally:
        os.close(back)


def iproute(name: str) -> IPRoute:
    """Netlink inside `name`. pyroute2's default would create a missing namespace: never here
    (FileNotFoundError instead), or a late call could bring back one `down` removed."""
    return IPRoute(netns=name, flags=0)
