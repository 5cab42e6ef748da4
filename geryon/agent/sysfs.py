"""configfs/sysfs files for RoCE QoS, all under one root directory (tests: a tree laid out like the kernel's).

Paths (relative to the root):
    sys/kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_tos   RDMA-CM default ToS (configfs; the
        <dev> directory must be created with mkdir first, the kernel then fills in ports/)
    sys/class/net/<if>/ecn/roce_rp/enable/<prio>                    DCQCN reaction point on/off (mlx5)
    sys/class/net/<if>/ecn/roce_np/enable/<prio>                    DCQCN notification point on/off
    sys/class/net/<if>/ecn/roce_np/cnp_dscp, cnp_802p_prio          CNP marking (mlx5)
    sys/class/net/<if>/ecn/roce_rp|roce_np/<parameter>              DCQCN parameters (mlx5, MLNX_OFED sysfs)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

RDMA_CM = "sys/kernel/config/rdma_cm"
IB_CLASS_DIR = "sys/class/infiniband"
NET_CLASS = "sys/class/net"
ECN_KINDS = ("roce_rp", "roce_np")


def roce_tos_group(device: str) -> str:
    return f"{RDMA_CM}/{device}"


def roce_tos_path(device: str, port: int) -> str:
    return f"{RDMA_CM}/{device}/ports/{port}/default_roce_tos"


def ecn_enable_path(ifname: str, kind: str, priority: int) -> str:
    if kind not in ECN_KINDS:
        raise ValueError(f"ECN kind {kind!r} is not one of {ECN_KINDS}")
    return f"{NET_CLASS}/{ifname}/ecn/{kind}/enable/{priority}"


# DCQCN parameters the mlx5 sysfs has per interface (NVIDIA's "DCQCN Parameters", MLNX_OFED names), each
# one integer file; their ranges are the NIC's, so a refused value shows as a failed read-back.
DCQCN_PARAMS = {
    "roce_rp": (
        "clamp_tgt_rate",
        "clamp_tgt_rate_after_time_inc",
        "dce_tcp_g",
        "dce_tcp_rtt",
        "initial_alpha_value",
        "rate_reduce_monitor_period",
        "rate_to_set_on_first_cnp",
        "rpg_ai_rate",
        "rpg_byte_reset",
        "rpg_gd",
        "rpg_hai_rate",
        "rpg_max_rate",
        "rpg_min_dec_fac",
        "rpg_min_rate",
        "rpg_threshold",
        "rpg_time_reset",
    ),
    "roce_np": ("min_time_between_cnps",),
}


def dcqcn_param_path(ifname: str, kind: str, name: str) -> str:
    if name not in DCQCN_PARAMS.get(kind, ()):
        raise ValueError(f"DCQCN parameter {kind}/{name} is not one of {DCQCN_PARAMS}")
    return f"{NET_CLASS}/{ifname}/ecn/{kind}/{name}"


def cnp_dscp_path(ifname: str) -> str:
    return f"{NET_CLASS}/{ifname}/ecn/roce_np/cnp_dscp"


def cnp_prio_path(ifname: str) -> str:
    return f"{NET_CLASS}/{ifname}/ecn/roce_np/cnp_802p_prio"


class SysfsTree:
    """Reads and writes existing attribute files under `root`; never creates a file (sysfs cannot either)."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def read(self, rel: str) -> str | None:
        """The attribute's text without the trailing newline; None when the file does not exist."""
        try:
            with open(self.path(rel), encoding="ascii") as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def read_int(self, rel: str) -> int | None:
        text = self.read(rel)
        if text is None:
            return None
        try:
            return int(text.split()[0], 0)
        except (ValueError, IndexError):
            raise OSError(errno.EINVAL, f"{self.path(rel)}: expected a number, found {text!r}") from None

    def write(self, rel: str, value: str) -> None:
        """One write(2) of `value` + newline, as `echo value > file` does; FileNotFoundError when absent."""
        fd = os.open(self.path(rel), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, f"{value}\n".encode("ascii"))
        finally:
            os.close(fd)

    def mkdir(self, rel: str) -> bool:
        """Create a configfs group; True when it was created, False when it was there already."""
        try:
            os.mkdir(self.path(rel))
        except FileExistsError:
            return False
        return True
