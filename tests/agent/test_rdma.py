"""RDMA discovery: sysfs under a root, this machine (no RDMA), and the pyverbs path."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from agent.kernel_tree import add_rdma_device, mlx5_host

from geryon.agent import rdma
from geryon.agent.rdma import RdmaPort, describe, discover_rdma


def test_sysfs_tree_with_two_devices(tmp_path: Path) -> None:
    mlx5_host(tmp_path, "eth0", "mlx5_0", ports=2)
    add_rdma_device(tmp_path, "mlx5_1", "eth1", state="1: DOWN")
    ports = discover_rdma(tmp_path)
    assert ports == [
        RdmaPort("mlx5_0", 1, "Ethernet", "ACTIVE", ("eth0",), "sysfs"),
        RdmaPort("mlx5_0", 2, "Ethernet", "ACTIVE", ("eth0",), "sysfs"),
        RdmaPort("mlx5_1", 1, "Ethernet", "DOWN", ("eth1",), "sysfs"),
    ]
    assert all(p.roce for p in ports)
    assert "mlx5_1 port 1: Ethernet, DOWN, netdev eth1 (sysfs)" in describe(ports, tmp_path)


def test_netdev_from_the_pci_device_when_the_gid_table_is_empty(tmp_path: Path) -> None:
    add_rdma_device(tmp_path, "rxe0", "veth7")
    (tmp_path / "sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0").unlink()
    assert discover_rdma(tmp_path)[0].netdevs == ("veth7",)


def test_no_rdma_devices_is_a_clean_empty_result(tmp_path: Path) -> None:
    assert discover_rdma(tmp_path) == []
    assert describe([], tmp_path) == (
        f"no RDMA devices ({tmp_path}/sys/class/infiniband: no RDMA driver loaded); "
        "RoCE ToS and ECN settings do not apply"
    )
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    assert "the directory is empty" in describe(discover_rdma(tmp_path), tmp_path)


def test_this_machine_has_no_rdma_devices() -> None:
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        pytest.skip("this host has RDMA devices")
    assert discover_rdma("/") == []
    assert describe([], "/").startswith("no RDMA devices (/sys/class/infiniband")


class _Ctx:
    """pyverbs.device.Context as rdma-core's pyverbs exposes it (only what discovery calls)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Ctx:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def query_device(self) -> Any:
        return types.SimpleNamespace(phys_port_cnt=2)

    def query_port(self, port: int) -> Any:
        return types.SimpleNamespace(link_layer=2, state=4 if port == 1 else 1)


def test_pyverbs_is_used_on_the_real_host_when_it_sees_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    # pyverbs is not installed here and there is no RDMA hardware: stand in for rdma-core's module.
    device_mod = types.ModuleType("pyverbs.device")
    device_mod.get_device_list = lambda: [types.SimpleNamespace(name=b"mlx5_0")]  # type: ignore[attr-defined]
    device_mod.Context = lambda name: _Ctx(name)  # type: ignore[attr-defined]
    pkg = types.ModuleType("pyverbs")
    pkg.device = device_mod  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyverbs", pkg)
    monkeypatch.setitem(sys.modules, "pyverbs.device", device_mod)
    ports = discover_rdma("/")
    assert [(p.device, p.port, p.link_layer, p.state, p.source) for p in ports] == [
        ("mlx5_0", 1, "Ethernet", "ACTIVE", "pyverbs"),
        ("mlx5_0", 2, "Ethernet", "DOWN", "pyverbs"),
    ]
    # with no devices, pyverbs says nothing and sysfs answers
    device_mod.get_device_list = list  # type: ignore[attr-defined]
    assert discover_rdma("/") == rdma._from_sysfs(Path("/"))
