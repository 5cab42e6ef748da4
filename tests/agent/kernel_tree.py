"""A temporary directory laid out like the kernel's sysfs/configfs on an mlx5 RoCE host (no such NIC here).

Files and defaults follow mlx5: ECN off per priority, CNP DSCP 48 and priority 6, RDMA-CM's configfs
mounted with no device group yet. Use it as the agent's --root.
"""

from __future__ import annotations

from pathlib import Path


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def add_rdma_device(root: Path, device: str, ifname: str, ports: int = 1, state: str = "4: ACTIVE") -> None:
    base = root / "sys/class/infiniband" / device
    for port in range(1, ports + 1):
        _put(base / "ports" / str(port) / "link_layer", "Ethernet")
        _put(base / "ports" / str(port) / "state", state)
        _put(base / "ports" / str(port) / "gid_attrs" / "ndevs" / "0", ifname)
    (base / "device" / "net" / ifname).mkdir(parents=True, exist_ok=True)


def add_mlx5_netdev(root: Path, ifname: str) -> None:
    ecn = root / "sys/class/net" / ifname / "ecn"
    for kind in ("roce_rp", "roce_np"):
        for prio in range(8):
            _put(ecn / kind / "enable" / str(prio), "0")
    _put(ecn / "roce_np" / "cnp_dscp", "48")
    _put(ecn / "roce_np" / "cnp_802p_prio", "6")


def add_plain_netdev(root: Path, ifname: str) -> None:
    """A netdev without RoCE (veth, a plain NIC): no ecn/ directory."""
    (root / "sys/class/net" / ifname).mkdir(parents=True, exist_ok=True)


def mount_rdma_cm(root: Path) -> None:
    (root / "sys/kernel/config/rdma_cm").mkdir(parents=True, exist_ok=True)


def create_rdma_cm_group(root: Path, device: str, ports: int = 1) -> None:
    """What configfs does after `mkdir rdma_cm/<device>`: one directory per port with its attributes."""
    for port in range(1, ports + 1):
        _put(root / f"sys/kernel/config/rdma_cm/{device}/ports/{port}/default_roce_tos", "0")
        _put(root / f"sys/kernel/config/rdma_cm/{device}/ports/{port}/default_roce_mode", "RoCE v2")


def mlx5_host(root: Path, ifname: str = "eth0", device: str = "mlx5_0", ports: int = 1) -> Path:
    add_rdma_device(root, device, ifname, ports)
    add_mlx5_netdev(root, ifname)
    mount_rdma_cm(root)
    return root
