"""The host agent's desired state: a YAML file, validated into a frozen `AgentConfig`.

Pure logic (no kernel access), so a bad file is rejected before any driver runs and nothing is
half-applied. Every error is a `ConfigError` whose message starts with the field's path
(`classes[1].dscp: ...`) and says what is allowed. The schema is documented in
geryon/agent/schema.md; examples/agent.yaml is the commented default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from geryon import units
from geryon.agent.names import is_ifname, is_net_sysctl, is_rdma_device
from geryon.agent.sysfs import DCQCN_PARAMS
from geryon.fields import Fields, kind, load_yaml

Trust = Literal["dscp", "pcp"]
Policy = Literal["auto", "required", "off"]
Tsa = Literal["strict", "ets"]

MAX_CLASSES = 8  # 802.1p priorities and HTB prio levels both stop at 8
DEFAULT_SYSCTLS: Mapping[str, str] = MappingProxyType({"net.ipv4.tcp_reflect_tos": "1"})
_CLASS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.I)
_SIZE_UNITS = {
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}
# HTB keeps rates in 64-bit bytes/s; beyond 2**32 bytes/s it needs the 64-bit attributes anyway.
_MAX_RATE_BITS = 8 * (2**40)
_MAX_SIZE = 2**31


class ConfigError(ValueError):
    """The agent config is malformed; the message names the field and what is allowed."""


@dataclass(frozen=True)
class ClassSpec:
    """One Geryon priority class. Index 0 in `AgentConfig.classes` is the most urgent."""

    name: str
    dscp: int
    priority: int  # 802.1p priority 0-7 (NIC/switch queue selector)
    lossless: bool  # PFC on this priority
    extra_dscp: tuple[int, ...] = ()  # more DSCPs that belong to this class (same priority)
    tsa: Tsa = "ets"  # transmission selection of this class's traffic class (DCB ETS)
    bandwidth: int = 0  # ETS share in percent when tsa == "ets"
    rate_bits: int | None = None  # host egress ceil for this class; None = the egress rate
    maxrate_bits: int | None = None  # NIC per-TC rate limit (dcb maxrate) for this class's TC; None = none
    nic_buffer: int | None = None  # NIC receive buffer (0-7, dcb buffer) this class's priority lands in
    buffer_bytes: int | None = None  # host egress queue limit; None = the egress buffer

    @property
    def dscps(self) -> tuple[int, ...]:
        return (self.dscp, *self.extra_dscp)


@dataclass(frozen=True)
class CnpSpec:
    """DCQCN congestion notification packets: their DSCP and priority (must not be a data priority)."""

    dscp: int
    priority: int


@dataclass(frozen=True)
class RoceTosSpec:
    """RDMA-CM default ToS for one RDMA device/port; device "*" = every device, port None = every port."""

    device: str
    port: int | None
    tos: int


@dataclass(frozen=True)
class EgressSpec:
    """Host egress queues for TCP flows (HTB tree per interface, see geryon/agent/schema.md)."""

    enabled: bool
    rate_bits: int  # the link: rate = ceil of the parent class 1:1, and each class's default ceil
    burst_bytes: int  # HTB burst/cburst: too small caps throughput well below the rate
    buffer_bytes: int  # bfifo limit per class (byte limit: GSO super-packets make packet limits lie)


DEFAULT_EGRESS = EgressSpec(
    enabled=True, rate_bits=10 * 10**9, burst_bytes=64 * 1024, buffer_bytes=4 * 1024 * 1024
)


@dataclass(frozen=True)
class Ets:
    """The DCB ETS layout derived from the classes: priority p -> TC prio_tc[p]."""

    prio_tc: tuple[int, ...]  # 8 entries
    tc_tsa: tuple[Tsa, ...]  # 8 entries
    tc_bw: tuple[int, ...]  # 8 entries, percent; ETS TCs sum to 100, strict TCs 0


@dataclass(frozen=True)
class AgentConfig:
    interfaces: tuple[str, ...]
    classes: tuple[ClassSpec, ...]
    trust: Trust = "dscp"
    cnp: CnpSpec | None = CnpSpec(dscp=48, priority=6)
    sysctls: Mapping[str, str] = field(default_factory=lambda: DEFAULT_SYSCTLS)
    max_lossless: int = 2
    best_effort_bandwidth: int = 50  # ETS share of TC 0 (every priority no class uses)
    ecn_priorities: tuple[int, ...] = ()  # DCQCN (roce_rp/roce_np) enabled on these priorities
    roce_tos: tuple[RoceTosSpec, ...] = ()
    egress: EgressSpec = field(default_factory=lambda: DEFAULT_EGRESS)
    dcb: Policy = "auto"  # auto: skip with a note where the NIC has no DCB ops; required: error
    rdma: Policy = "auto"  # same for RoCE ToS / ECN / CNP (configfs, sysfs)
    # DCBX mode: host = Geryon writes the NIC's DCB (and sets host mode); lld_managed = an LLDP agent owns
    # it and Geryon only verifies ETS/PFC/APP; None = Geryon writes DCB and leaves the mode alone
    dcbx: Literal["host", "lld_managed"] | None = None
    cable_length: int | None = None  # metres, for the NIC's PFC headroom (mlx5: ieee_pfc.delay); None = leave
    buffer_sizes: tuple[int, ...] | None = None  # bytes of NIC receive buffers 0-7 (dcb buffer); None = leave
    pfc_storm_timeout: int | None = None  # ms, 0 = off (ethtool pfc-prevention-tout); None = leave
    # DCQCN parameters (mlx5 sysfs ecn/<kind>/<name>): {(kind, name): value}; empty = leave them alone
    dcqcn: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    # VLAN device -> {skb priority: PCP}: the entries of its egress priority map Geryon owns (PCP trust,
    # RoCEv1); empty = leave every VLAN map alone
    vlan_egress_qos: Mapping[str, Mapping[int, int]] = field(default_factory=lambda: MappingProxyType({}))
    # The class (by name) of egress traffic no class DSCP matches (the HTB default): None = the last,
    # least urgent class. TF's own gRPC (the chief's step calls) is such traffic: where jobs share a
    # fabric it must not wait below another job's bulk, so the intent's `unmatched` is followed here.
    unmatched: str | None = None

    @property
    def unmatched_index(self) -> int:
        """The index of the class unmatched traffic goes to."""
        if self.unmatched is None:
            return len(self.classes) - 1
        return next(i for i, c in enumerate(self.classes) if c.name == self.unmatched)

    def prio2buffer(self) -> tuple[int, ...] | None:
        """The NIC's priority -> receive buffer map, when a class or buffer_sizes asks for one: each class
        priority to its nic_buffer (default 0), every other priority to buffer 0."""
        if self.buffer_sizes is None and all(c.nic_buffer is None for c in self.classes):
            return None
        out = [0] * 8
        for c in self.classes:
            out[c.priority] = c.nic_buffer or 0
        return tuple(out)

    @property
    def lossless_priorities(self) -> tuple[int, ...]:
        return tuple(sorted(c.priority for c in self.classes if c.lossless))

    @property
    def pfc_enable_mask(self) -> int:
        return sum(1 << p for p in self.lossless_priorities)

    def class_of_dscp(self, dscp: int) -> ClassSpec | None:
        for c in self.classes:
            if dscp in c.dscps:
                return c
        return None

    def app_entries(self) -> tuple[tuple[int, int], ...]:
        """DSCP -> priority APP table entries (selector DSCP): every class DSCP, and the CNP DSCP."""
        entries = [(d, c.priority) for c in self.classes for d in c.dscps]
        if self.cnp is not None:
            entries.append((self.cnp.dscp, self.cnp.priority))
        return tuple(sorted(entries))

    def ets(self) -> Ets:
        """Each class priority and the CNP priority get their own TC (TC number = priority); every
        other priority shares TC 0 (best effort). CNP is strict: it must never wait behind data."""
        prio_tc = [0] * 8
        tsa: list[Tsa] = ["ets"] * 8
        bw = [0] * 8
        for c in self.classes:
            prio_tc[c.priority] = c.priority
            tsa[c.priority] = c.tsa
            bw[c.priority] = c.bandwidth if c.tsa == "ets" else 0
        if self.cnp is not None:
            prio_tc[self.cnp.priority] = self.cnp.priority
            tsa[self.cnp.priority] = "strict"
        if not any(c.priority == 0 for c in self.classes) and (self.cnp is None or self.cnp.priority != 0):
            bw[0] = self.best_effort_bandwidth
        used = set(prio_tc)
        if not any(tsa[tc] == "ets" for tc in used):
            # Every TC in use is strict (e.g. one strict class on priority 0): no ETS share can sum to
            # 100, so the TCs no priority maps to are strict too, or the request would be invalid.
            tsa = ["strict" if tc not in used else t for tc, t in enumerate(tsa)]
        return Ets(prio_tc=tuple(prio_tc), tc_tsa=tuple(tsa), tc_bw=tuple(bw))


def default_classes() -> tuple[ClassSpec, ...]:
    """Two classes: urgent (DSCP 46 -> priority 5, strict) and bulk (NVIDIA's RoCE default DSCP 26 ->
    priority 3, ETS 50 %); both lossless."""
    return (
        ClassSpec(name="urgent", dscp=46, priority=5, lossless=True, tsa="strict"),
        ClassSpec(name="bulk", dscp=26, priority=3, lossless=True, tsa="ets", bandwidth=50),
    )


# ---------------------------------------------------------------------------------------------
# Parsing


def load_config(path: str | Path) -> AgentConfig:
    """Reads and validates a YAML config file. Raises ConfigError (never anything else) on bad input."""
    data = load_yaml(path, ConfigError, "config")
    return parse_config(data, where=str(Path(path)))


def parse_config(data: Any, where: str = "config") -> AgentConfig:
    """Validates a mapping (parsed YAML or JSON) into an AgentConfig. `where` prefixes every error."""
    try:
        return _parse(data)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


_TOP_KEYS = (
    "interfaces",
    "classes",
    "trust",
    "cnp",
    "sysctls",
    "max_lossless",
    "best_effort_bandwidth",
    "ecn_priorities",
    "roce_tos",
    "egress",
    "dcb",
    "rdma",
    "dcbx",
    "cable_length",
    "buffer_sizes",
    "pfc_storm_timeout",
    "dcqcn",
    "vlan_egress_qos",
    "unmatched",
)
_CLASS_KEYS = (
    "name",
    "dscp",
    "priority",
    "lossless",
    "extra_dscp",
    "tsa",
    "bandwidth",
    "rate",
    "buffer",
    "maxrate",
    "nic_buffer",
)
# NIC per-TC max rate: mlx5e_dcbnl_ieee_setmaxrate keeps it in 8-bit units of 100 Mbit/s up to 25.5 Gbit/s
# and of 1 Gbit/s up to 255 Gbit/s, rounding down; a rate on that grid reads back exactly.
_MAXRATE_FINE, _MAXRATE_COARSE = 100 * 10**6, 10**9
_MAXRATE_FINE_MAX, _MAXRATE_MAX = 255 * _MAXRATE_FINE, 255 * _MAXRATE_COARSE


def _parse(data: Any) -> AgentConfig:
    if data is None:
        data = {}
    m = _mapping(data, "(top level)", _TOP_KEYS)
    interfaces = _interfaces(m.get("interfaces"))
    classes = _classes(m["classes"]) if "classes" in m else default_classes()
    trust = _choice(m.get("trust", "dscp"), "trust", ("dscp", "pcp"))
    cnp = _cnp(m["cnp"]) if "cnp" in m else CnpSpec(dscp=48, priority=6)
    max_lossless = _int(m.get("max_lossless", 2), "max_lossless", 0, 8)
    best_effort = _int(m.get("best_effort_bandwidth", 50), "best_effort_bandwidth", 0, 100)
    sysctls = _sysctls(m["sysctls"]) if "sysctls" in m else DEFAULT_SYSCTLS
    egress = _egress(m.get("egress"))
    dcb = _policy(m.get("dcb", "auto"), "dcb")
    rdma = _policy(m.get("rdma", "auto"), "rdma")
    # host: Geryon writes the NIC's DCB. lld_managed: an LLDP agent (lldpad, the NIC firmware's) owns it
    # and the NIC refuses host writes (ice: -EINVAL), so Geryon only verifies ETS/PFC/APP against the
    # classes and writes none of the DCB objects (see geryon/agent/README.md).
    dcbx = _choice(m["dcbx"], "dcbx", ("host", "lld_managed")) if m.get("dcbx") is not None else None
    # mlx5e_dcbnl_ieee_setpfc takes ieee_pfc.delay as the cable length in metres when 0 < delay < 1000
    # (MLX5E_MAX_CABLE_LENGTH) and sizes the lossless buffers' headroom from it.
    cable = _int(m["cable_length"], "cable_length", 1, 999) if m.get("cable_length") is not None else None
    buffer_sizes = _buffer_sizes(m["buffer_sizes"]) if m.get("buffer_sizes") is not None else None
    storm = _storm_timeout(m["pfc_storm_timeout"]) if m.get("pfc_storm_timeout") is not None else None
    dcqcn = _dcqcn(m.get("dcqcn"))
    if dcbx == "lld_managed":
        # These are DCB writes too (DCB_ATTR_IEEE_MAXRATE, DCB_ATTR_DCB_BUFFER, ieee_pfc.delay), which the
        # LLDP agent's NIC would refuse or the agent overwrite: asking for them with lld_managed is a
        # contradiction, said at load time rather than as a failed apply.
        named = [k for k in ("cable_length", "buffer_sizes") if m.get(k) is not None]
        named += [
            f"classes[{i}].{k}"
            for i, c in enumerate(classes)
            for k in ("maxrate", "nic_buffer")
            if getattr(c, "maxrate_bits" if k == "maxrate" else k) is not None
        ]
        if named:
            raise ConfigError(
                f"dcbx: lld_managed leaves the NIC's DCB to the LLDP agent (Geryon only verifies it), but "
                f"the config also sets {', '.join(named)}, which only a write can do; drop them or use "
                "dcbx: host"
            )
    vlan_egress_qos = _vlan_egress_qos(m.get("vlan_egress_qos"))
    unmatched = _unmatched(m.get("unmatched"), classes)
    _check_classes(classes, cnp, max_lossless)
    _check_rates(classes, egress)
    lossless = tuple(sorted(c.priority for c in classes if c.lossless))
    # DCQCN belongs on the lossless RoCE priorities unless said otherwise.
    ecn = _priorities(m["ecn_priorities"], "ecn_priorities") if "ecn_priorities" in m else lossless
    roce_tos = _roce_tos(m["roce_tos"], classes) if "roce_tos" in m else _default_roce_tos(classes)
    cfg = AgentConfig(
        interfaces=interfaces,
        classes=classes,
        trust=trust,  # type: ignore[arg-type]
        cnp=cnp,
        sysctls=sysctls,
        max_lossless=max_lossless,
        best_effort_bandwidth=best_effort,
        ecn_priorities=ecn,
        roce_tos=roce_tos,
        egress=egress,
        dcb=dcb,  # type: ignore[arg-type]
        rdma=rdma,  # type: ignore[arg-type]
        dcbx=dcbx,  # type: ignore[arg-type]
        cable_length=cable,
        buffer_sizes=buffer_sizes,
        pfc_storm_timeout=storm,
        dcqcn=dcqcn,
        vlan_egress_qos=vlan_egress_qos,
        unmatched=unmatched,
    )
    _check_ets(cfg)
    return cfg


_fields = Fields(ConfigError)
_kind = kind
_mapping = _fields.mapping
_int = _fields.integer
_bool = _fields.boolean
_choice = _fields.choice
_list = _fields.items


def _policy(value: Any, name: str) -> str:
    # YAML 1.1 reads an unquoted off/no/false as the boolean false: that is plainly "off". Its true
    # (on/yes/true) could mean auto or required, so it is refused rather than guessed.
    if value is False:
        return "off"
    if value is True:
        raise ConfigError(
            f"{name}: a boolean (True) is ambiguous (YAML reads on/yes/true as true); "
            "write auto (skip where the NIC cannot) or required (fail where it cannot)"
        )
    return _choice(value, name, ("auto", "required", "off"))


def _interfaces(value: Any) -> tuple[str, ...]:
    if value is None:
        raise ConfigError("interfaces: required; list the interfaces Geryon traffic leaves by (e.g. [eth0])")
    items = _list(value, "interfaces")
    if not items:
        raise ConfigError("interfaces: must list at least one interface")
    seen: set[str] = set()
    for i, name in enumerate(items):
        if not is_ifname(name):
            raise ConfigError(
                f"interfaces[{i}]: {_kind(name)} is not an interface name (1-15 characters, no '/' or spaces)"
            )
        if name in seen:
            raise ConfigError(f"interfaces[{i}]: {name!r} is listed twice")
        seen.add(name)
    return tuple(items)


def _priorities(value: Any, name: str) -> tuple[int, ...]:
    items = _list(value, name)
    out = [_int(p, f"{name}[{i}]", 0, 7) for i, p in enumerate(items)]
    if len(set(out)) != len(out):
        raise ConfigError(f"{name}: a priority is listed twice")
    return tuple(sorted(out))


def parse_rate(value: Any, name: str) -> int:
    """A rate in bits/s: a number, or a string like 10gbit, 800mbit, 40Gbps (geryon.units: bits)."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigError(f"{name}: expected a rate like 10gbit, 800mbit or bits/s, got {_kind(value)}")
    try:
        bits = units.parse_rate(value, name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not 8000 <= bits <= _MAX_RATE_BITS:
        raise ConfigError(
            f"{name}: {value} is out of range; allowed 8kbit to {_MAX_RATE_BITS // 10**12} tbit"
        )
    return int(bits)


def parse_size(value: Any, name: str) -> int:
    """A size in bytes: an integer, or a string with units (64k, 64kb, 4mib, 1m)."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()])
    else:
        raise ConfigError(f"{name}: expected a size like 64kb, 4mib or bytes, got {_kind(value)}")
    if not 1500 <= size <= _MAX_SIZE:
        raise ConfigError(f"{name}: {value} is out of range; allowed 1500 bytes to 2 GiB")
    return size


def _classes(value: Any) -> tuple[ClassSpec, ...]:
    items = _list(value, "classes")
    if not 1 <= len(items) <= MAX_CLASSES:
        raise ConfigError(f"classes: {len(items)} classes; allowed 1-{MAX_CLASSES} (index 0 = most urgent)")
    out = []
    for i, item in enumerate(items):
        n = f"classes[{i}]"
        m = _mapping(item, n, _CLASS_KEYS)
        for key in ("name", "dscp", "priority"):
            if key not in m:
                raise ConfigError(f"{n}.{key}: required")
        name = m["name"]
        if not isinstance(name, str) or not _CLASS_NAME.match(name):
            raise ConfigError(
                f"{n}.name: {_kind(name)} is not a class name (a letter, then letters, digits, _ or -; <= 32)"
            )
        extra = tuple(
            _int(d, f"{n}.extra_dscp[{j}]", 0, 63)
            for j, d in enumerate(_list(m.get("extra_dscp", []), f"{n}.extra_dscp"))
        )
        tsa = _choice(m.get("tsa", "strict" if i == 0 else "ets"), f"{n}.tsa", ("strict", "ets"))
        if tsa == "ets":
            bandwidth = _int(m.get("bandwidth", 0), f"{n}.bandwidth", 0, 100)
        else:
            if "bandwidth" in m:
                raise ConfigError(f"{n}.bandwidth: only for tsa: ets (a strict class has no share)")
            bandwidth = 0
        out.append(
            ClassSpec(
                name=name,
                dscp=_int(m["dscp"], f"{n}.dscp", 0, 63),
                priority=_int(m["priority"], f"{n}.priority", 0, 7),
                lossless=_bool(m.get("lossless", False), f"{n}.lossless"),
                extra_dscp=extra,
                tsa=tsa,  # type: ignore[arg-type]
                bandwidth=bandwidth,
                rate_bits=parse_rate(m["rate"], f"{n}.rate") if "rate" in m else None,
                buffer_bytes=parse_size(m["buffer"], f"{n}.buffer") if "buffer" in m else None,
                maxrate_bits=_maxrate(m["maxrate"], f"{n}.maxrate") if "maxrate" in m else None,
                nic_buffer=_int(m["nic_buffer"], f"{n}.nic_buffer", 0, 7) if "nic_buffer" in m else None,
            )
        )
    return tuple(out)


def _unmatched(value: Any, classes: tuple[ClassSpec, ...]) -> str | None:
    if value is None:
        return None
    names = [c.name for c in classes]
    if not isinstance(value, str) or value not in names:
        raise ConfigError(f"unmatched: {_kind(value)} is not a class; allowed: {', '.join(names)}")
    return value


def _maxrate(value: Any, name: str) -> int:
    bits = parse_rate(value, name)
    step = _MAXRATE_FINE if bits <= _MAXRATE_FINE_MAX else _MAXRATE_COARSE
    if bits > _MAXRATE_MAX or bits < _MAXRATE_FINE or bits % step:
        raise ConfigError(
            f"{name}: {units.format_rate(bits)} is not a NIC TC rate; allowed 100mbit to 25.5gbit in "
            "steps of 100mbit, or up to 255gbit in steps of 1gbit (what mlx5 can hold)"
        )
    return bits


def _dcqcn(value: Any) -> Mapping[tuple[str, str], int]:
    if value is None:
        return MappingProxyType({})
    m = _mapping(value, "dcqcn", tuple(DCQCN_PARAMS))
    out: dict[tuple[str, str], int] = {}
    for side, params in m.items():
        pm = _mapping(params, f"dcqcn.{side}", DCQCN_PARAMS[side])
        for name, v in pm.items():
            out[(side, name)] = _int(v, f"dcqcn.{side}.{name}", 0, 2**32 - 1)
    return MappingProxyType(out)


def _vlan_egress_qos(value: Any) -> Mapping[str, Mapping[int, int]]:
    """{VLAN device: {skb priority: PCP}}. The kernel keys the map by the full 32-bit skb->priority and
    keeps 3 bits of PCP (vlan_dev_set_egress_priority masks a PCP of 8 to 0 without a word): both are
    checked here, so nothing out of range reaches it."""
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"vlan_egress_qos: expected a mapping of VLAN device to {{skb priority: PCP}}, got {_kind(value)}"
        )
    out: dict[str, Mapping[int, int]] = {}
    for dev, entries in value.items():
        if not is_ifname(dev):
            raise ConfigError(
                f"vlan_egress_qos: {_kind(dev)} is not an interface name (a VLAN device such as eth0.100)"
            )
        n = f"vlan_egress_qos[{dev}]"
        if not isinstance(entries, Mapping) or not entries:
            raise ConfigError(
                f"{n}: expected a non-empty mapping of skb priority to PCP (e.g. {{3: 3, 5: 5}})"
            )
        m: dict[int, int] = {}
        for prio, pcp in entries.items():
            if not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 2**32 - 1:
                raise ConfigError(f"{n}: key {_kind(prio)} is not an skb priority (an integer 0-4294967295)")
            m[prio] = _int(pcp, f"{n}[{prio}]", 0, 7)
        out[dev] = MappingProxyType(dict(sorted(m.items())))
    return MappingProxyType(out)


def _storm_timeout(value: Any) -> int:
    # mlx5e_set_pfc_prevention_tout: 0 turns storm prevention off, else MLX5E_PFC_PREVEN_TOUT_MIN_MSEC (80)
    # to MLX5E_PFC_PREVEN_TOUT_MAX_MSEC (8000); its "auto" reads back as 100, so write 100 for that.
    ms = _int(value, "pfc_storm_timeout", 0, 8000)
    if 0 < ms < 80:
        raise ConfigError(f"pfc_storm_timeout: {ms} ms; allowed 0 (off) or 80-8000 ms")
    return ms


def _buffer_sizes(value: Any) -> tuple[int, ...]:
    """Up to 8 buffer sizes (buffer 0 first); 0 or a size string per buffer; unlisted buffers are 0."""
    items = _list(value, "buffer_sizes")
    if not 1 <= len(items) <= 8:
        raise ConfigError(f"buffer_sizes: {len(items)} sizes; give 1-8 (NIC receive buffers 0-7)")
    sizes = [0 if v == 0 else parse_size(v, f"buffer_sizes[{i}]") for i, v in enumerate(items)]
    return tuple(sizes + [0] * (8 - len(sizes)))


def _cnp(value: Any) -> CnpSpec | None:
    if value is None:
        return None
    m = _mapping(value, "cnp", ("dscp", "priority"))
    for key in ("dscp", "priority"):
        if key not in m:
            raise ConfigError(f"cnp.{key}: required (or cnp: null to leave CNP alone)")
    return CnpSpec(
        dscp=_int(m["dscp"], "cnp.dscp", 0, 63), priority=_int(m["priority"], "cnp.priority", 0, 7)
    )


def _check_classes(classes: tuple[ClassSpec, ...], cnp: CnpSpec | None, max_lossless: int) -> None:
    names: dict[str, int] = {}
    dscp_owner: dict[int, str] = {}
    prio_owner: dict[int, str] = {}
    for i, c in enumerate(classes):
        n = f"classes[{i}]"
        if c.name in names:
            raise ConfigError(f"{n}.name: {c.name!r} is already the name of classes[{names[c.name]}]")
        names[c.name] = i
        for j, d in enumerate(c.dscps):
            field_name = f"{n}.dscp" if j == 0 else f"{n}.extra_dscp[{j - 1}]"
            if d in dscp_owner:
                raise ConfigError(f"{field_name}: DSCP {d} is already used by class {dscp_owner[d]!r}")
            dscp_owner[d] = c.name
        if c.priority in prio_owner:
            raise ConfigError(
                f"{n}.priority: priority {c.priority} is already used by class {prio_owner[c.priority]!r} "
                "(each class needs its own priority, or the queues cannot tell them apart)"
            )
        prio_owner[c.priority] = c.name
    if cnp is not None:
        if cnp.priority in prio_owner:
            raise ConfigError(
                f"cnp.priority: {cnp.priority} is the data priority of class {prio_owner[cnp.priority]!r}; "
                "CNPs need a priority of their own"
            )
        if cnp.dscp in dscp_owner:
            raise ConfigError(f"cnp.dscp: DSCP {cnp.dscp} is already used by class {dscp_owner[cnp.dscp]!r}")
    lossless = [c.name for c in classes if c.lossless]
    if len(lossless) > max_lossless:
        raise ConfigError(
            f"classes: {len(lossless)} lossless classes ({', '.join(lossless)}) but the NIC supports "
            f"{max_lossless} lossless priorities (max_lossless); make some classes lossless: false"
        )


def _check_rates(classes: tuple[ClassSpec, ...], egress: EgressSpec) -> None:
    # The classes borrow from a parent class at egress.rate (the link): a higher ceiling is never reached.
    for i, c in enumerate(classes):
        if c.rate_bits is not None and c.rate_bits > egress.rate_bits:
            raise ConfigError(
                f"classes[{i}].rate: {units.format_rate(c.rate_bits)} is above egress.rate "
                f"{units.format_rate(egress.rate_bits)}; a class cannot send faster than the link "
                "(raise egress.rate to the link rate, or lower this class's rate)"
            )


def _check_ets(cfg: AgentConfig) -> None:
    ets = cfg.ets()
    ets_tcs = {tc for tc in range(8) if ets.tc_tsa[tc] == "ets" and tc in set(ets.prio_tc)}
    total = sum(ets.tc_bw[tc] for tc in ets_tcs)
    if ets_tcs and total != 100:
        parts = [f"classes[{i}].bandwidth={c.bandwidth}" for i, c in enumerate(cfg.classes) if c.tsa == "ets"]
        if ets.tc_bw[0] and 0 in ets_tcs and not any(c.priority == 0 for c in cfg.classes):
            parts.append(f"best_effort_bandwidth={cfg.best_effort_bandwidth}")
        raise ConfigError(
            f"bandwidth: the ETS shares must sum to 100 percent, got {total} ({', '.join(parts)})"
        )


def _sysctls(value: Any) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ConfigError(f"sysctls: expected a mapping of sysctl name to value, got {_kind(value)}")
    out: dict[str, str] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.startswith("net."):
            # Only the network namespace's own sysctls: anything else (kernel.*, vm.*) is host-global,
            # not per-NIC QoS, and not Geryon's to change.
            raise ConfigError(
                f"sysctls.{key}: only network sysctls (net.*) are allowed, like net.ipv4.tcp_reflect_tos"
            )
        if not is_net_sysctl(key):
            raise ConfigError(
                f"sysctls.{key}: not a sysctl name (dotted parts of letters, digits, _ : @ + -; no '/')"
            )
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, int):
            v = str(v)
        if not isinstance(v, str) or "\n" in v or not v.strip():
            raise ConfigError(f"sysctls.{key}: expected a number or a one-line string, got {_kind(v)}")
        out[key] = v.strip()
    return MappingProxyType(out)


def _egress(value: Any) -> EgressSpec:
    default = DEFAULT_EGRESS
    if value is None:
        return default
    m = _mapping(value, "egress", ("enabled", "rate", "burst", "buffer"))
    return EgressSpec(
        enabled=_bool(m.get("enabled", True), "egress.enabled"),
        rate_bits=parse_rate(m["rate"], "egress.rate") if "rate" in m else default.rate_bits,
        burst_bytes=parse_size(m["burst"], "egress.burst") if "burst" in m else default.burst_bytes,
        buffer_bytes=parse_size(m["buffer"], "egress.buffer") if "buffer" in m else default.buffer_bytes,
    )


def _default_roce_tos(classes: tuple[ClassSpec, ...]) -> tuple[RoceTosSpec, ...]:
    # RDMA-CM connections that set no ToS themselves are bulk traffic: the least urgent class.
    return (RoceTosSpec(device="*", port=None, tos=classes[-1].dscp << 2),)


def _roce_tos(value: Any, classes: tuple[ClassSpec, ...]) -> tuple[RoceTosSpec, ...]:
    if value is None:
        return ()
    out = []
    seen: set[tuple[str, int | None]] = set()
    for i, item in enumerate(_list(value, "roce_tos")):
        n = f"roce_tos[{i}]"
        m = _mapping(item, n, ("device", "port", "tos", "class"))
        device = m.get("device", "*")
        if not (device == "*" or is_rdma_device(device)):
            raise ConfigError(
                f"{n}.device: expected an RDMA device name (e.g. mlx5_0) or '*', got {_kind(device)}"
            )
        port_v = m.get("port", "*")
        port = None if port_v == "*" else _int(port_v, f"{n}.port", 1, 255)
        if ("tos" in m) == ("class" in m):
            raise ConfigError(f"{n}: give exactly one of tos (0-255) or class (a class name)")
        if "tos" in m:
            tos = _int(m["tos"], f"{n}.tos", 0, 255)
        else:
            by_name = {c.name: c for c in classes}
            cname = m["class"]
            if not isinstance(cname, str) or cname not in by_name:
                raise ConfigError(f"{n}.class: {_kind(cname)} is not a class; allowed: {', '.join(by_name)}")
            tos = by_name[cname].dscp << 2
        if (device, port) in seen:
            raise ConfigError(f"{n}: device {device} port {port_v} is listed twice")
        seen.add((device, port))
        out.append(RoceTosSpec(device=device, port=port, tos=tos))
    return tuple(out)
