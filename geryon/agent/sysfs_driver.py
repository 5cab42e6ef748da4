"""The sysfs driver: RDMA-CM default RoCE ToS, DCQCN ECN per priority and CNP marking (mlx5 sysfs).

Targets and values (files in geryon.agent.sysfs):
    rdma/<dev>/<port>/roce_tos   int 0-255: the ToS byte of RDMA-CM connections that set none (DSCP << 2)
    <if>/ecn/roce_rp/<prio>      0/1: DCQCN reaction point (rate limiting on CNPs) for this priority
    <if>/ecn/roce_np/<prio>      0/1: DCQCN notification point (sending CNPs) for this priority
    <if>/ecn/cnp_dscp            int 0-63: the DSCP of CNPs this NIC sends
    <if>/ecn/cnp_prio            int 0-7: their 802.1p priority
    <if>/ecn/roce_rp|roce_np/<p> int: a DCQCN parameter (geryon.agent.sysfs.DCQCN_PARAMS), when configured

A missing file means the hardware or module is not there (veth, no mlx5, no rdma_cm): Unsupported.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from geryon.agent.config import AgentConfig
from geryon.agent.driver import DriverError, Unsupported
from geryon.agent.rdma import discover_rdma
from geryon.agent.sysfs import (
    DCQCN_PARAMS,
    ECN_KINDS,
    IB_CLASS_DIR,
    RDMA_CM,
    SysfsTree,
    cnp_dscp_path,
    cnp_prio_path,
    dcqcn_param_path,
    ecn_enable_path,
    roce_tos_group,
    roce_tos_path,
)

RANGES = {"roce_tos": 255, "ecn": 1, "cnp_dscp": 63, "cnp_prio": 7, "dcqcn": 2**32 - 1}


def parse_target(target: str) -> tuple[str, str, str, int | None]:
    """-> (kind, device or interface, file path relative to the root, port or priority)."""
    p = target.split("/")
    if len(p) == 4 and p[0] == "rdma" and p[3] == "roce_tos" and p[2].isdigit():
        return "roce_tos", p[1], roce_tos_path(p[1], int(p[2])), int(p[2])
    if len(p) == 4 and p[1] == "ecn" and p[2] in ECN_KINDS and p[3].isdigit() and int(p[3]) < 8:
        return "ecn", p[0], ecn_enable_path(p[0], p[2], int(p[3])), int(p[3])
    if len(p) == 4 and p[1] == "ecn" and p[3] in DCQCN_PARAMS.get(p[2], ()):
        return "dcqcn", p[0], dcqcn_param_path(p[0], p[2], p[3]), None
    if len(p) == 3 and p[1] == "ecn" and p[2] == "cnp_dscp":
        return "cnp_dscp", p[0], cnp_dscp_path(p[0]), None
    if len(p) == 3 and p[1] == "ecn" and p[2] == "cnp_prio":
        return "cnp_prio", p[0], cnp_prio_path(p[0]), None
    raise DriverError(target, "not a sysfs target (rdma/<dev>/<port>/roce_tos, <if>/ecn/...)")


class SysfsDriver:
    name = "sysfs"

    def __init__(self, root: str | Path = "/") -> None:
        self.tree = SysfsTree(root)

    def close(self) -> None:
        pass

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        out: dict[str, Any] = {}
        ports = discover_rdma(self.tree.root)
        for spec in config.roce_tos:
            if spec.device != "*" and not any(p.device == spec.device for p in ports):
                # a named device that is not here: keep the target so plan shows it as unsupported
                out[f"rdma/{spec.device}/{spec.port or 1}/roce_tos"] = spec.tos
            for p in ports:
                if spec.device in ("*", p.device) and spec.port in (None, p.port):
                    out[f"rdma/{p.device}/{p.port}/roce_tos"] = spec.tos
        for ifname in config.interfaces:
            for prio in config.ecn_priorities:
                for kind in ECN_KINDS:
                    out[f"{ifname}/ecn/{kind}/{prio}"] = 1
            for (kind, name), value in config.dcqcn.items():
                out[f"{ifname}/ecn/{kind}/{name}"] = value
            if config.cnp is not None:
                out[f"{ifname}/ecn/cnp_dscp"] = config.cnp.dscp
                out[f"{ifname}/ecn/cnp_prio"] = config.cnp.priority
        return out

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        return {t: self._read(t) for t in targets}

    def _read(self, target: str) -> int:
        kind, owner, rel, _ = parse_target(target)
        if kind == "roce_tos":
            self._check_rdma(target, owner)
            if not self.tree.exists(roce_tos_group(owner)):
                return 0  # no configfs group yet: RDMA-CM uses its default ToS, 0
        value = self._read_int(target, rel)
        if value is None:
            raise Unsupported(target, self._missing(kind, owner, rel))
        return value

    def _read_int(self, target: str, rel: str) -> int | None:
        try:
            return self.tree.read_int(rel)
        except OSError as e:
            raise DriverError(target, f"reading {self.tree.path(rel)}: {e.strerror or e}") from None

    def _check_rdma(self, target: str, device: str) -> None:
        if not self.tree.exists(f"{IB_CLASS_DIR}/{device}"):
            raise Unsupported(target, f"no RDMA device {device} ({self.tree.path(IB_CLASS_DIR)})")
        if not self.tree.exists(RDMA_CM):
            raise Unsupported(
                target,
                f"{self.tree.path(RDMA_CM)} is missing: mount configfs and load rdma_cm (modprobe rdma_cm)",
            )

    def _missing(self, kind: str, owner: str, rel: str) -> str:
        if kind == "roce_tos":
            return f"{self.tree.path(rel)} is missing (no such port of {owner})"
        return f"{self.tree.path(rel)} is missing ({owner} is not a RoCE NIC with DCQCN in sysfs, e.g. mlx5)"

    def write(self, target: str, value: Any) -> None:
        kind, owner, rel, _ = parse_target(target)
        if value is None:
            return  # every target always has a value; nothing was "absent" before Geryon
        range_key = "ecn" if kind == "ecn" else kind
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= RANGES[range_key]:
            raise DriverError(target, f"{value!r} is not an integer 0..{RANGES[range_key]}")
        if kind == "roce_tos":
            self._check_rdma(target, owner)
            try:
                self.tree.mkdir(roce_tos_group(owner))  # configfs then creates ports/<n>/default_roce_tos
            except OSError as e:
                raise DriverError(
                    target, f"mkdir {self.tree.path(roce_tos_group(owner))}: {e.strerror}"
                ) from None
        try:
            self.tree.write(rel, str(value))
        except FileNotFoundError:
            raise Unsupported(target, self._missing(kind, owner, rel)) from None
        except OSError as e:
            raise DriverError(
                target, f"writing {value} to {self.tree.path(rel)}: {e.strerror or e}"
            ) from None
        got = self._read_int(target, rel)
        if got != value:
            raise DriverError(target, f"wrote {value} to {self.tree.path(rel)}, it reads back {got}")
