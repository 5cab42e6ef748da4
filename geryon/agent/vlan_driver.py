"""The VLAN driver: egress priority map entries of VLAN devices (geryon.agent.vlan, rtnetlink).

Targets, one per entry the config names (so an operator's other entries are left alone):
    <vlan>/vlan/egress_qos/<skb priority>   the PCP (0-7) frames of that skb priority are tagged with

0 stands for "no entry" too: the kernel tags such frames PCP 0 either way, and a released entry is
written back to its journaled PCP (0 when there was none). A device that is not a VLAN device (or
does not exist) is a config error at plan time (exit 2), not something to skip: the config named it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable
from typing import Any

from geryon.agent.config import AgentConfig, ConfigError
from geryon.agent.driver import DriverError
from geryon.agent.vlan import Link, VlanClient

_PREFIX = "/vlan/egress_qos/"


def parse_target(target: str) -> tuple[str, int]:
    """'eth0.100/vlan/egress_qos/5' -> ('eth0.100', 5)."""
    dev, sep, prio = target.partition(_PREFIX)
    if not sep or not dev or not prio.isdigit() or int(prio) > 2**32 - 1:
        raise DriverError(target, "not a VLAN target (<vlan device>/vlan/egress_qos/<skb priority>)")
    return dev, int(prio)


def _not_vlan(dev: str, link: Link) -> str:
    what = f"a {link.kind} device" if link.kind else "a physical (or kind-less) device"
    return (
        f"{dev} is {what}, not a VLAN (802.1Q) device; the egress priority map exists only on VLAN "
        "devices (e.g. eth0.100 from `ip link add link eth0 name eth0.100 type vlan id 100`)"
    )


class VlanDriver:
    name = "vlan"

    def __init__(
        self, netns: str | None = None, client_factory: Callable[[], VlanClient] | None = None
    ) -> None:
        self._netns = netns
        self._factory = client_factory
        self._client: VlanClient | None = None  # opened on first use: most configs name no VLAN map

    @property
    def client(self) -> VlanClient:
        if self._client is None:
            self._client = self._factory() if self._factory is not None else VlanClient(netns=self._netns)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        return {
            f"{dev}{_PREFIX}{prio}": pcp
            for dev, entries in config.vlan_egress_qos.items()
            for prio, pcp in entries.items()
        }

    def check(self, config: AgentConfig) -> None:
        """Every device named under vlan_egress_qos exists here and is a VLAN device (exit 2 otherwise)."""
        for dev in config.vlan_egress_qos:
            try:
                link = self.client.get_link(dev)
            except OSError as e:
                why = "no such interface here" if e.errno == errno.ENODEV else f"cannot read it: {e}"
                raise ConfigError(f"vlan_egress_qos[{dev}]: {why}") from None
            if link.kind != "vlan":
                raise ConfigError(f"vlan_egress_qos[{dev}]: {_not_vlan(dev, link)}")

    def _link(self, target: str, dev: str) -> Link:
        try:
            link = self.client.get_link(dev)
        except OSError as e:
            raise DriverError(target, e.strerror or str(e)) from None
        if link.kind != "vlan":
            raise DriverError(target, _not_vlan(dev, link))
        return link

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        links: dict[str, Link] = {}
        out: dict[str, Any] = {}
        for target in targets:
            dev, prio = parse_target(target)
            if dev not in links:
                links[dev] = self._link(target, dev)
            out[target] = links[dev].egress.get(prio, 0)
        return out

    def write(self, target: str, value: Any) -> None:
        dev, prio = parse_target(target)
        pcp = 0 if value is None else value
        if not isinstance(pcp, int) or isinstance(pcp, bool) or not 0 <= pcp <= 7:
            raise DriverError(target, f"a PCP is 0-7, got {value!r}")
        link = self._link(target, dev)
        try:
            self.client.set_egress(link.index, [(prio, pcp)])
        except (OSError, ValueError) as e:
            raise DriverError(target, str(e)) from None
        got = self.observe([target])[target]
        if got != pcp:
            raise DriverError(target, f"the kernel accepted PCP {pcp} but reports {got}")
