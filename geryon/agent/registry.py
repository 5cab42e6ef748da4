"""The drivers a host runs: the one module that imports every concrete driver (and the engine's Slot).

Everything else (the CLI's apply/restore, the daemon, the testbed) gets its drivers from open_slots
and knows them only by the protocol in geryon.agent.driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from geryon.agent.config import AgentConfig
from geryon.agent.dcb_driver import DcbDriver
from geryon.agent.driver import DriverError
from geryon.agent.engine import Slot
from geryon.agent.linux_driver import LinuxDriver
from geryon.agent.sysfs_driver import SysfsDriver
from geryon.agent.vlan_driver import VlanDriver


def open_slots(
    config: AgentConfig | None, *, netns: str | None = None, root: str = "/"
) -> tuple[list[Any], Callable[[], None]]:
    """The drivers this host runs, each with its Unsupported policy from the config, and a closer.
    With config None (restore) every driver is loaded and Unsupported targets are skipped."""

    def policy(setting: str | None) -> Literal["auto", "required"]:
        return "required" if setting == "required" else "auto"

    slots: list[Slot] = []
    closers: list[Callable[[], None]] = []

    def close() -> None:
        for c in reversed(closers):
            c()

    try:
        linux = LinuxDriver(netns)
        closers.append(linux.close)
        slots.append(Slot(linux, "required"))  # Linux queues work on every interface
        if config is None or config.dcb != "off":
            try:
                dcb = DcbDriver(netns=netns)
            except OSError as e:
                raise DriverError(f"netns/{netns or '-'}/dcb", f"cannot open a dcbnl socket: {e}") from None
            closers.append(dcb.close)
            slots.append(Slot(dcb, policy(config.dcb if config else None)))
        if config is None or config.rdma != "off":
            sysfs = SysfsDriver(root)
            closers.append(sysfs.close)
            slots.append(Slot(sysfs, policy(config.rdma if config else None)))
        # Always present (its socket opens on first use), so a VLAN map entry dropped from the config
        # is still released; a VLAN device the config names must be one (its check: exit 2).
        vlan = VlanDriver(netns)
        closers.append(vlan.close)
        slots.append(Slot(vlan, "required"))
    except BaseException:
        close()
        raise
    return slots, close
