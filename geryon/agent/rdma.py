"""RDMA device discovery: pyverbs when it is installed and sees devices, else /sys/class/infiniband.

No RDMA device is a normal state (TCP-only hosts, this test machine): the result is an empty list and
`describe` says why in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geryon.agent.sysfs import IB_CLASS_DIR as IB_CLASS

# enum ibv_port_state and ibv_link_layer (infiniband/verbs.h), as pyverbs returns them
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
LINK_LAYERS = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}


@dataclass(frozen=True)
class RdmaPort:
    device: str  # e.g. mlx5_0
    port: int  # 1-based
    link_layer: str  # Ethernet (RoCE) or InfiniBand
    state: str  # ACTIVE, DOWN, ...
    netdevs: tuple[str, ...]  # the Ethernet interfaces behind this port (RoCE)
    source: str  # "pyverbs" or "sysfs"

    @property
    def roce(self) -> bool:
        return self.link_layer == "Ethernet"


def discover_rdma(root: str | Path = "/") -> list[RdmaPort]:
    """Every port of every RDMA device. pyverbs only for the real host (root "/"): it cannot look
    into a test tree."""
    if str(root) == "/":
        ports = _from_pyverbs(Path("/"))
        if ports:
            return ports
    return _from_sysfs(Path(root))


def describe(ports: list[RdmaPort], root: str | Path = "/") -> str:
    if not ports:
        where = Path(root) / IB_CLASS
        why = "no RDMA driver loaded" if not where.is_dir() else "the directory is empty"
        return f"no RDMA devices ({where}: {why}); RoCE ToS and ECN settings do not apply"
    return "\n".join(
        f"{p.device} port {p.port}: {p.link_layer}, {p.state}, "
        f"netdev {','.join(p.netdevs) or '-'} ({p.source})"
        for p in ports
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # missing, or EINVAL (sysfs refuses reads of an unused GID entry)
        return None


def _netdevs(dev_dir: Path, port_dir: Path) -> tuple[str, ...]:
    # The GID table names the netdev of each RoCE GID; GID 0 is the port's own interface.
    ndev = _read(port_dir / "gid_attrs" / "ndevs" / "0")
    if ndev:
        return (ndev,)
    net = dev_dir / "device" / "net"
    try:
        return tuple(sorted(os.listdir(net)))
    except OSError:
        return ()


def _from_sysfs(root: Path) -> list[RdmaPort]:
    base = root / IB_CLASS
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for dev in devices:
        ports_dir = base / dev / "ports"
        try:
            ports = sorted(int(p) for p in os.listdir(ports_dir) if p.isdigit())
        except OSError:
            continue
        for port in ports:
            pdir = ports_dir / str(port)
            state = _read(pdir / "state") or ""
            out.append(
                RdmaPort(
                    device=dev,
                    port=port,
                    link_layer=_read(pdir / "link_layer") or "",
                    state=state.split(":", 1)[-1].strip(),  # "4: ACTIVE"
                    netdevs=_netdevs(base / dev, pdir),
                    source="sysfs",
                )
            )
    return out


def _from_pyverbs(root: Path) -> list[RdmaPort]:
    try:
        import pyverbs.device as verbs
    except ImportError:
        return []
    out = []
    try:
        devices: list[Any] = list(verbs.get_device_list())
    except Exception:  # no rdma-core provider libraries, no /dev/infiniband: fall back to sysfs
        return []
    for d in devices:
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        try:
            with verbs.Context(name=name) as ctx:
                nports = ctx.query_device().phys_port_cnt
                for port in range(1, nports + 1):
                    attr = ctx.query_port(port)
                    out.append(
                        RdmaPort(
                            device=name,
                            port=port,
                            link_layer=LINK_LAYERS.get(attr.link_layer, str(attr.link_layer)),
                            state=PORT_STATES.get(attr.state, str(attr.state)),
                            netdevs=_netdevs(
                                root / IB_CLASS / name, root / IB_CLASS / name / "ports" / str(port)
                            ),
                            source="pyverbs",
                        )
                    )
        except Exception:
            return []  # a device we may not open (permissions, a dead port): sysfs lists them all
    return out
