"""The narrow interface every host-state driver implements, and the errors drivers raise.

A driver manages named targets ("eth0/qdisc", "sysctl/net.ipv4.tcp_reflect_tos", "eth0/dcb/pfc",
"rdma/mlx5_0/1/roce_tos"). Values are JSON-able (the journal stores them) and compared with `==`,
so a driver must observe a target in exactly the shape `desired` produces, unless it has a
`same(target, have, want) -> bool` method that compares by meaning (the DCB driver: NICs report ETS in
shapes a request cannot have). None means "absent /
the kernel's default": writing None removes what Geryon put there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, runtime_checkable

from geryon.agent.config import AgentConfig


class DriverError(RuntimeError):
    """A driver could not read or write a target; the message names the target."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"{target}: {reason}")
        self.target = target
        self.reason = reason


class Unsupported(DriverError):
    """The device cannot do this at all (e.g. veth has no DCB ops). Config decides: skip or error."""


@runtime_checkable
class Driver(Protocol):
    name: str

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        """Target -> the JSON-able value the config asks for."""
        ...

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        """Target -> its current value; None = absent. Raises Unsupported for targets the device lacks."""
        ...

    def write(self, target: str, value: Any) -> None:
        """Makes the target equal `value` (None = remove / back to the kernel default)."""
        ...


def open_slots(
    config: AgentConfig | None, *, netns: str | None = None, root: str = "/"
) -> tuple[list[Any], Callable[[], None]]:
    """The drivers this host runs, each with its Unsupported policy from the config, and a closer.
    With config None (restore) every driver is loaded and Unsupported targets are skipped."""
    from geryon.agent.dcb_driver import DcbDriver
    from geryon.agent.engine import Slot
    from geryon.agent.linux_driver import LinuxDriver
    from geryon.agent.sysfs_driver import SysfsDriver
    from geryon.agent.vlan_driver import VlanDriver

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
