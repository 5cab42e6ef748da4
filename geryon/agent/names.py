"""What a name the agent turns into a path may look like: interface, RDMA device, sysctl, journal target.

Targets from the journal are read back from a file and end up as paths under /proc/sys, /sys and
configfs, written as root; a target like `sysctl/x./../../etc/...` or an interface `..` must never
get that far. So every name is checked against one allow-list here, by the config loader (names from
the operator) and by the journal reader (names from disk) alike.
"""

from __future__ import annotations

import re

from geryon.agent.sysfs import DCQCN_PARAMS

# Linux interface names (dev_valid_name): 1-15 bytes, no '/', no whitespace, not "." or "..".
IFNAME = r"[A-Za-z0-9_.:@+-]{1,15}"
# RDMA device names (ib_device_rename refuses '/'; configfs makes one directory per device).
RDMA_DEV = r"[A-Za-z0-9_.-]{1,64}"
# A network sysctl: net.<part>.<part>...; the dots are path separators under /proc/sys/net, so no part
# may be empty (that is how '..' would appear) and none may hold a '/'.
SYSCTL = r"net(?:\.[A-Za-z0-9_:@+-]+)+"

_IFNAME_RE = re.compile(rf"^{IFNAME}$")
_RDMA_DEV_RE = re.compile(rf"^{RDMA_DEV}$")
_SYSCTL_RE = re.compile(rf"^{SYSCTL}$")

# Per driver, the targets it manages (see each driver's module docstring).
_TARGETS = {
    "linux": re.compile(rf"^(?:(?P<if>{IFNAME})/qdisc|sysctl/{SYSCTL})$"),
    "dcb": re.compile(rf"^(?P<if>{IFNAME})/dcb/[a-z_]+(?:/[a-z_]+)*(?:/[0-9]{{1,3}})?$"),
    "sysfs": re.compile(
        rf"^(?:rdma/(?P<dev>{RDMA_DEV})/[0-9]{{1,3}}/roce_tos"
        rf"|(?P<if>{IFNAME})/ecn/(?:roce_rp|roce_np)/[0-7]"
        rf"|(?P<if3>{IFNAME})/ecn/roce_rp/(?:{'|'.join(DCQCN_PARAMS['roce_rp'])})"
        rf"|(?P<if4>{IFNAME})/ecn/roce_np/(?:{'|'.join(DCQCN_PARAMS['roce_np'])})"
        rf"|(?P<if2>{IFNAME})/ecn/(?:cnp_dscp|cnp_prio))$"
    ),
    # a VLAN device's egress map entry: skb priority (u32) -> PCP
    "vlan": re.compile(rf"^(?P<if>{IFNAME})/vlan/egress_qos/(?:0|[1-9][0-9]{{0,9}})$"),
}
DRIVERS = tuple(_TARGETS)


def _not_dots(name: str) -> bool:
    return name not in (".", "..")


def is_ifname(name: object) -> bool:
    return isinstance(name, str) and bool(_IFNAME_RE.match(name)) and _not_dots(name)


def is_rdma_device(name: object) -> bool:
    return isinstance(name, str) and bool(_RDMA_DEV_RE.match(name)) and _not_dots(name)


def is_net_sysctl(name: object) -> bool:
    return isinstance(name, str) and bool(_SYSCTL_RE.match(name))


def target_problem(driver: object, target: object) -> str | None:
    """None when `target` is a well-formed target of `driver`; otherwise what is wrong with it."""
    if not isinstance(driver, str) or driver not in _TARGETS:
        return f"driver {driver!r} is not one of {', '.join(DRIVERS)}"
    if not isinstance(target, str) or len(target) > 256:
        return "target must be a string of at most 256 characters"
    m = _TARGETS[driver].match(target)
    if m is None:
        return f"{target!r} is not a {driver} target"
    for key in ("if", "if2", "if3", "if4", "dev"):
        name = m.groupdict().get(key)
        if name is not None and not _not_dots(name):
            return f"{target!r}: {name!r} is not a device name"
    return None
