"""The narrow interface every host-state driver implements, and the errors drivers raise.

A driver manages named targets ("eth0/qdisc", "sysctl/net.ipv4.tcp_reflect_tos", "eth0/dcb/pfc",
"rdma/mlx5_0/1/roce_tos"). Values are JSON-able (the journal stores them) and compared with `==`,
so a driver must observe a target in exactly the shape `desired` produces, unless it has a
`same(target, have, want) -> bool` method that compares by meaning (the DCB driver: NICs report ETS in
shapes a request cannot have). None means "absent /
the kernel's default": writing None removes what Geryon put there.

A leaf: the concrete drivers import it; geryon.agent.registry, the one module that imports them,
builds the set a host runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

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
