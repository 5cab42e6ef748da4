"""Linux host queues and sysctls, over pyroute2 netlink (works on any interface, veth included).

Targets:
  "<ifname>/qdisc"  the interface's egress tree (the shared layout, see geryon/agent/schema.md):
                    root HTB 1:, one parent class 1:1 at the egress rate (rate = ceil), and under it
                    class 1:(0x10 + c) with HTB prio c per strict Geryon class c (ETS classes, when
                    more than one, share one prio, weighted by bandwidth), 8 kbit guaranteed, ceil =
                    the class rate, a bfifo leaf per class, u32 filters on the DS field (IPv4 and
                    IPv6) per class DSCP; unmatched traffic goes to the config's `unmatched`
                    class, by default the least urgent (HTB default). None = the kernel's default
                    root (what a link has before anyone configures it).
  "sysctl/<name>"   a sysctl, read and written through /proc/sys inside the namespace.

Values are what the kernel reports back, in the exact shape `desired` builds, so drift is plain `!=`.
HTB burst is not part of the value: the kernel keeps it as a transmit time, which does not convert
back to the same byte count.
"""

from __future__ import annotations

import errno
import os
import re
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from geryon.agent.config import AgentConfig, ConfigError
from geryon.agent.driver import DriverError
from geryon.agent.htb_shares import weighted_quanta
from geryon.agent.names import is_net_sysctl

# pyroute2 0.9.7 has no bfifo plugin: without one it ignores `parent` (the bfifo replaces the root
# qdisc) and cannot encode or decode the limit. bfifo's options are pfifo's (struct tc_fifo_qopt).
_tc_plugins.setdefault("bfifo", sched_pfifo)

ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
PARENT_MINOR = 0x1  # 1:1, the link: the Geryon classes borrow from it
FIRST_MINOR = 0x10  # Geryon class c is 1:(0x10 + c)
# 8 kbit: the parent lends the rest strictly by prio, so this is work-conserving strict priority.
# (HTB classes directly under the root have no one to borrow from and would be stuck at this rate.)
GUARANTEED_BYTES_S = 1000
FILTER_PREF = {"ip": 1, "ipv6": 2}
_PROTO_NAME = {ETH_P_IP: "ip", ETH_P_IPV6: "ipv6"}
# Root qdiscs (other than our HTB) that can be re-created exactly from what the kernel reports.
_RESTORABLE_FOREIGN = ("pfifo", "bfifo")
# HTB's round-robin quantum (bytes a class may send per turn among classes of one prio) where a tree
# gives none: a few MTU frames. Trees carry "quantum" only for other values (the software switch's
# DWRR classes, weighted by it), so observe() reports a class's quantum only when it differs.
DEFAULT_QUANTUM = 1514 * 4


def classid(minor: int) -> str:
    return f"1:{minor:x}"


def _parse_classid(text: str) -> int:
    major, minor = text.split(":")
    return (int(major, 16) << 16) | int(minor or "0", 16)


def _fmt_handle(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}" if handle & 0xFFFF else f"{handle >> 16:x}:"


def desired_tree(config: AgentConfig) -> dict[str, Any]:
    """The egress tree for one interface, as observe() reports it."""
    eg = config.egress
    link = (eg.rate_bits // 8) * 8  # the kernel keeps bytes/s
    parent = classid(PARENT_MINOR)
    classes: list[dict[str, Any]] = [
        {"classid": parent, "prio": 0, "rate_bits": link, "ceil_bits": link, "leaf": None}
    ]
    filters = []
    shared = shared_ets(config)
    quanta = ets_quanta(config, shared)
    for c, spec in enumerate(config.classes):
        minor = FIRST_MINOR + c
        ceil = spec.rate_bits if spec.rate_bits is not None else eg.rate_bits
        entry: dict[str, Any] = {
            "classid": classid(minor),
            "parent": parent,
            # ETS classes that share the link share one prio (the first of theirs), round-robin by
            # quantum; every other class keeps prio c, so classes are served in order.
            "prio": shared[0] if c in shared else c,
            "rate_bits": GUARANTEED_BYTES_S * 8,
            "ceil_bits": (ceil // 8) * 8,  # the kernel keeps bytes/s
            "leaf": {
                "kind": "bfifo",
                "limit": spec.buffer_bytes if spec.buffer_bytes is not None else eg.buffer_bytes,
            },
        }
        if c in quanta:
            entry["quantum"] = quanta[c]
        classes.append(entry)
        for dscp in spec.dscps:
            for proto in ("ip", "ipv6"):
                filters.append({"protocol": proto, "dscp": dscp, "classid": classid(minor)})
    return {
        "kind": "htb",
        "default": classid(FIRST_MINOR + config.unmatched_index),
        "classes": classes,
        "filters": sorted(filters, key=_filter_key),
    }


def shared_ets(config: AgentConfig) -> list[int]:
    """The ETS classes that share one HTB prio, as the NIC's ETS shares a link and the software switch
    renders DWRR classes (geryon.fabric.render.linux): the ETS classes when there are two or more and
    all come after every strict class; else none (an ETS class between strict ones keeps its place in
    the order, and the default layouts, one ETS class last, keep prio c throughout)."""
    ets = [i for i, s in enumerate(config.classes) if s.tsa != "strict"]
    strict = [i for i, s in enumerate(config.classes) if s.tsa == "strict"]
    if len(ets) < 2 or (strict and max(strict) > min(ets)):
        return []
    return ets


def ets_quanta(config: AgentConfig, shared: list[int]) -> dict[int, int]:
    """{class index: HTB quantum} for the `shared` ETS classes, proportional to their `bandwidth`
    (geryon.agent.htb_shares); {} when a share is 0 (no weight to scale) or they are equal."""
    shares = {i: config.classes[i].bandwidth for i in shared}
    if 0 in shares.values():
        return {}
    return weighted_quanta(shares)


def recreatable(tree: dict[str, Any]) -> bool:
    """Whether the driver can re-create this observed root exactly, whoever made it: a fifo root, or
    an HTB tree of classes with fifo leaves and DSCP filters at the root (Geryon's own layout is one)."""
    kind = tree.get("kind")
    if kind in _RESTORABLE_FOREIGN:
        return "limit" in tree
    if kind != "htb":
        return False
    classes = tree.get("classes", [])
    ids = {c.get("classid") for c in classes}
    inner = {c["parent"] for c in classes if "parent" in c}
    for c in classes:
        leaf = c.get("leaf")
        if "parent" in c and c["parent"] not in ids:
            return False
        if leaf is not None and (
            c.get("classid") in inner or leaf.get("kind") not in ("bfifo", "pfifo") or "limit" not in leaf
        ):
            return False
    return all("dscp" in f and "parent" not in f for f in tree.get("filters", []))


_GERYON_CLASS = re.compile(r"1:1[0-7]")


def _geryon_shaped(tree: dict[str, Any]) -> bool:
    # Geryon's own tree that someone edited by hand (a leaf swapped, a filter added) is drift to
    # repair, not a foreign setup to protect: classes 1:10-1:17 under the parent 1:1 (or flat under
    # the root, as an early agent made them, which is how an upgrade repairs that tree too).
    classes = tree.get("classes", [])
    if tree.get("kind") != "htb" or not any(_GERYON_CLASS.fullmatch(c.get("classid", "")) for c in classes):
        return False
    parent = classid(PARENT_MINOR)
    for c in classes:
        cid, under = c.get("classid", ""), c.get("parent")
        ok = (
            under is None if cid == parent else bool(_GERYON_CLASS.fullmatch(cid)) and under in (None, parent)
        )
        if not ok:
            return False
    return True


def _parents_first(classes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HTB classes in an order the kernel accepts: each after the class it hangs under."""
    ids = {c["classid"] for c in classes}
    depth: dict[str, int] = {}

    def level(c: dict[str, Any], seen: frozenset[str] = frozenset()) -> int:
        cid = c["classid"]
        if cid not in depth:
            parent = c.get("parent")
            if parent in seen:
                raise ValueError(f"class {cid} is in a cycle of parents")
            up = next((x for x in classes if x["classid"] == parent), None) if parent in ids else None
            depth[cid] = 0 if up is None else 1 + level(up, seen | {cid})
        return depth[cid]

    return sorted(classes, key=level)


def _filter_key(f: dict[str, Any]) -> tuple[Any, ...]:
    return (f.get("parent", ""), f["protocol"], f.get("dscp", -1), f["classid"], str(f.get("raw", "")))


def _u32_key(proto: str, dscp: int) -> str:
    # IPv4: DSCP is the top 6 bits of byte 1 (TOS). IPv6: the top 6 bits of the traffic class,
    # which spans bits 4-11 of the first word.
    if proto == "ip":
        return f"0x{dscp << 18:08x}/0x00fc0000+0"
    return f"0x{dscp << 22:08x}/0x0fc00000+0"


def _dscp_from_bytes(proto: str, match: dict[int, tuple[int, int]]) -> int | None:
    """The DSCP a u32 selector matches, from {header byte offset: (mask, value)}, or None."""
    if proto == "ip" and set(match) == {1} and match[1][0] == 0xFC:
        return match[1][1] >> 2
    if proto == "ipv6" and set(match) == {0, 1} and match[0][0] == 0x0F and match[1][0] == 0xC0:
        return ((match[0][1] & 0x0F) << 2) | (match[1][1] >> 6)
    return None


def _decode_u32_sel(raw: bytes) -> dict[int, tuple[int, int]] | None:
    """struct tc_u32_sel (16 bytes) + nkeys x struct tc_u32_key {__be32 mask, val; int off, offmask}.
    Decoded by hand: pyroute2 0.9.7 decodes the keys 4 bytes off."""
    if len(raw) < 16:
        return None
    nkeys = raw[2]
    out: dict[int, tuple[int, int]] = {}
    for k in range(nkeys):
        start = 16 + 16 * k
        if len(raw) < start + 16:
            return None
        mask, val = struct.unpack_from(">II", raw, start)
        off, offmask = struct.unpack_from("=ii", raw, start + 8)
        if offmask:
            return None
        for i in range(4):
            mbyte = (mask >> (8 * (3 - i))) & 0xFF
            if mbyte:
                out[off + i] = (mbyte, (val >> (8 * (3 - i))) & 0xFF & mbyte)
    return out


class LinuxDriver:
    """Egress queues and sysctls of one network namespace (None = the agent's own)."""

    name = "linux"

    def __init__(self, netns_name: str | None = None, proc_sys: str = "/proc/sys") -> None:
        self.netns = netns_name
        self.proc_sys = proc_sys
        self.burst_bytes = 64 * 1024  # from the config at desired(); not observable, see above
        try:
            self._ipr = IPRoute(netns=netns_name) if netns_name else IPRoute()
        except (OSError, NetlinkError) as e:
            raise DriverError(f"netns/{netns_name}", f"cannot open netlink: {e}") from None

    def close(self) -> None:
        self._ipr.close()

    def __enter__(self) -> LinuxDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Driver protocol -------------------------------------------------------------------

    def check(self, config: AgentConfig) -> None:
        """Config errors only the host can tell: interfaces that do not exist here."""
        have = self.interfaces()
        for i, name in enumerate(config.interfaces):
            if name not in have:
                where = f" in network namespace {self.netns}" if self.netns else ""
                listing = ", ".join(sorted(have)) or "none"
                raise ConfigError(f"interfaces[{i}]: no interface {name!r}{where}; have: {listing}")
        # A misspelled sysctl is bad input (exit 2), not a failure to read the host (exit 1).
        if config.sysctls:
            with self._in_netns():
                for key in config.sysctls:
                    if not os.path.isfile(self._sysctl_path(f"sysctl/{key}")):
                        raise ConfigError(f"sysctls.{key}: no such sysctl on this kernel")

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.burst_bytes = config.egress.burst_bytes
        if config.egress.enabled:
            tree = desired_tree(config)
            for name in config.interfaces:
                out[f"{name}/qdisc"] = tree
        for key, value in config.sysctls.items():
            out[f"sysctl/{key}"] = " ".join(value.split())
        return out

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        sysctls = []
        for target in targets:
            if target.startswith("sysctl/"):
                sysctls.append(target)
            elif target.endswith("/qdisc"):
                out[target] = self._observe_tree(target, target[: -len("/qdisc")])
            else:
                raise DriverError(target, "not a target of the linux driver")
        if sysctls:
            with self._in_netns():
                for target in sysctls:
                    out[target] = self._read_sysctl(target)
        return out

    def write(self, target: str, value: Any) -> None:
        if target.startswith("sysctl/"):
            if value is None:
                return  # a sysctl cannot be absent; nothing Geryon made to remove
            with self._in_netns():
                self._write_sysctl(target, str(value))
        elif target.endswith("/qdisc"):
            self._write_tree(target, target[: -len("/qdisc")], value)
        else:
            raise DriverError(target, "not a target of the linux driver")

    # -- interfaces ----------------------------------------------------------------------------

    def interfaces(self) -> dict[str, int]:
        return {str(link.get("IFLA_IFNAME")): int(link["index"]) for link in self._ipr.get_links()}

    def _index(self, target: str, ifname: str) -> int:
        found = self._ipr.link_lookup(ifname=ifname)
        if not found:
            raise DriverError(target, f"no interface {ifname!r}")
        return int(found[0])

    # -- egress tree ---------------------------------------------------------------------------

    def _observe_tree(self, target: str, ifname: str) -> dict[str, Any] | None:
        idx = self._index(target, ifname)
        try:
            qdiscs = list(self._ipr.get_qdiscs(index=idx))
            root = [q for q in qdiscs if q["parent"] == 0xFFFFFFFF]
            if not root or root[0]["handle"] == 0:
                return None  # the kernel's default root (noqueue, pfifo_fast, mq...)
            kind = str(root[0].get("TCA_KIND"))
            if kind != "htb":
                return self._describe_foreign(root[0], kind)
            return self._describe_htb(idx, root[0], qdiscs)
        except NetlinkError as e:
            raise DriverError(target, f"cannot read the qdiscs: {e}") from None

    @staticmethod
    def _describe_foreign(root: Any, kind: str) -> dict[str, Any]:
        desc: dict[str, Any] = {"kind": kind, "handle": _fmt_handle(int(root["handle"]))}
        opts = root.get("TCA_OPTIONS")
        if kind in _RESTORABLE_FOREIGN and opts is not None:
            desc["limit"] = int(opts["limit"])
        return desc

    def _describe_htb(self, idx: int, root: Any, qdiscs: list[Any]) -> dict[str, Any]:
        handle = int(root["handle"])
        opts = root.get("TCA_OPTIONS")
        init = opts.get("TCA_HTB_INIT") if opts is not None else None
        default_minor = int(init["defcls"]) if init else 0
        leaves = {int(q["parent"]): q for q in qdiscs if q["parent"] != 0xFFFFFFFF}
        classes = []
        for c in sorted(self._ipr.get_classes(index=idx), key=lambda m: int(m["handle"])):
            copts = c.get("TCA_OPTIONS")
            parms = copts.get("TCA_HTB_PARMS") if copts is not None else None
            if parms is None:
                continue
            rate = int(copts.get("TCA_HTB_RATE64") or parms["rate"])
            ceil = int(copts.get("TCA_HTB_CEIL64") or parms["ceil"])
            entry: dict[str, Any] = {
                "classid": _fmt_handle(int(c["handle"])),
                "prio": int(parms["prio"]),
                "rate_bits": rate * 8,
                "ceil_bits": ceil * 8,
                "leaf": None,
            }
            if int(parms["quantum"]) != DEFAULT_QUANTUM:
                entry["quantum"] = int(parms["quantum"])
            if int(c["parent"]) not in (handle, 0xFFFFFFFF):
                entry["parent"] = _fmt_handle(int(c["parent"]))  # absent: directly under the root
            leaf = leaves.get(int(c["handle"]))
            if leaf is not None:
                lkind = str(leaf.get("TCA_KIND"))
                lopts = leaf.get("TCA_OPTIONS")
                entry["leaf"] = {"kind": lkind}
                if lkind in ("bfifo", "pfifo") and lopts is not None:
                    entry["leaf"]["limit"] = int(lopts["limit"])
            classes.append(entry)
        filters = self._describe_filters(idx, handle)
        # Filters on an inner class (one others hang under) also steer traffic; they are observed so
        # that a tree with them is never taken for one the driver could re-create.
        for inner in sorted({c["parent"] for c in classes if "parent" in c}):
            for f in self._describe_filters(idx, _parse_classid(inner)):
                filters.append({**f, "parent": inner})
        return {
            "kind": "htb",
            "default": _fmt_handle((handle & 0xFFFF0000) | default_minor),
            "classes": classes,
            "filters": sorted(filters, key=_filter_key),
        }

    def _describe_filters(self, idx: int, parent: int) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = []
        for f in self._ipr.get_filters(index=idx, parent=parent):
            fopts = f.get("TCA_OPTIONS")
            if fopts is None or f.get("TCA_KIND") != "u32":
                if f.get("TCA_KIND") not in (None, "u32"):
                    filters.append({"protocol": "?", "classid": "?", "raw": str(f.get("TCA_KIND"))})
                continue
            sel = fopts.get("TCA_U32_SEL")
            if sel is None:
                continue  # the u32 hash table node, not a rule
            proto_num = struct.unpack("!H", struct.pack("=H", int(f["info"]) & 0xFFFF))[0]
            proto = _PROTO_NAME.get(proto_num, f"0x{proto_num:04x}")
            cls = fopts.get("TCA_U32_CLASSID")
            raw = bytes(sel.data[sel.offset + 4 : sel.offset + sel.length])
            match = _decode_u32_sel(raw)
            dscp = _dscp_from_bytes(proto, match) if match is not None else None
            entry: dict[str, Any] = {"protocol": proto, "classid": _fmt_handle(int(cls)) if cls else "?"}
            if dscp is None:
                entry["raw"] = raw.hex()
            else:
                entry["dscp"] = dscp
            filters.append(entry)
        return filters

    def _write_tree(self, target: str, ifname: str, value: Any) -> None:
        if value is None and not self._ipr.link_lookup(ifname=ifname):
            return  # the interface is gone, and with it anything Geryon put there
        idx = self._index(target, ifname)
        current = self._observe_tree(target, ifname)
        if value is not None and value == current:
            return
        if (
            current is not None
            and value is not None
            and not recreatable(current)
            and not _geryon_shaped(current)
        ):
            raise DriverError(
                target,
                f"the root qdisc {current['kind']!r} (as it is now) was not set by Geryon and could not be "
                f"restored later; remove it first (tc qdisc del dev {ifname} root)",
            )
        if value is not None and value.get("kind") != "htb" and value.get("kind") not in _RESTORABLE_FOREIGN:
            raise DriverError(target, f"cannot re-create a root qdisc of kind {value.get('kind')!r}")
        try:
            if current is not None:
                # HTB has no "change" for the tree: replace the whole root.
                self._ipr.tc("del", index=idx, handle=0, parent=0xFFFFFFFF)
            if value is not None:
                self._create_root(idx, value)
        except (NetlinkError, KeyError, TypeError, ValueError) as e:
            # Never leave the interface half-built or bare: put back what was there before.
            restored = self._put_back(idx, current)
            if isinstance(e, NetlinkError):
                raise DriverError(target, f"netlink refused the change: {e}; {restored}") from None
            raise DriverError(target, f"malformed queue description ({e!r}); {restored}") from None

    def _create_root(self, idx: int, value: dict[str, Any]) -> None:
        if value["kind"] == "htb":
            self._add_htb(idx, value)
        else:
            self._ipr.tc(
                "add", value["kind"], idx, handle=_parse_classid(value["handle"]), limit=value["limit"]
            )

    def _put_back(self, idx: int, previous: dict[str, Any] | None) -> str:
        """After a failed write: removes whatever part of the new root got built and re-creates the
        previous root. Returns what it did, for the error message."""
        with suppress(NetlinkError):
            self._ipr.tc("del", index=idx, handle=0, parent=0xFFFFFFFF)
        if previous is None:
            return "the interface is back to the kernel's default root"
        if not (recreatable(previous) or _geryon_shaped(previous)):
            return f"the previous root qdisc {previous['kind']!r} could not be re-created"
        try:
            self._create_root(idx, previous)
        except (NetlinkError, KeyError, TypeError, ValueError) as e:
            with suppress(NetlinkError):
                self._ipr.tc("del", index=idx, handle=0, parent=0xFFFFFFFF)
            return f"re-creating the previous root failed too ({e}); the kernel's default root is in place"
        return "the previous root is back"

    def _add_htb(self, idx: int, tree: dict[str, Any]) -> None:
        default = _parse_classid(tree["default"])
        root = default & 0xFFFF0000  # 1: for Geryon's tree; a foreign tree keeps its own major
        self._ipr.tc("add", "htb", idx, handle=root, default=default & 0xFFFF)
        # Classes and leaves before filters: a filter may only point at an existing class, and
        # traffic must never reach the default before its class exists (it would go to the direct queue).
        for c in _parents_first(tree["classes"]):
            if "parent" in c and c["parent"] not in {x["classid"] for x in tree["classes"]}:
                raise ValueError(f"class {c['classid']} hangs under {c['parent']}, which is not in the tree")
            cid = _parse_classid(c["classid"])
            burst = self.burst_bytes
            self._ipr.tc(
                "add-class",
                "htb",
                idx,
                handle=cid,
                parent=_parse_classid(c["parent"]) if "parent" in c else root,
                rate=c["rate_bits"] // 8,
                ceil=c["ceil_bits"] // 8,
                burst=burst,
                cburst=burst,
                prio=c["prio"],
                quantum=c.get("quantum", DEFAULT_QUANTUM),
            )
            leaf = c.get("leaf")
            if leaf is not None:
                kw = {"limit": leaf["limit"]} if "limit" in leaf else {}
                self._ipr.tc("add", leaf["kind"], idx, handle=(cid & 0xFFFF) << 16, parent=cid, **kw)
        for f in tree["filters"]:
            if "dscp" not in f or "parent" in f:
                raise ValueError(f"filter {f} is not a DSCP match at the root")
            proto = ETH_P_IP if f["protocol"] == "ip" else ETH_P_IPV6
            self._ipr.tc(
                "add-filter",
                "u32",
                idx,
                parent=root,
                prio=FILTER_PREF[f["protocol"]],
                protocol=proto,
                target=_parse_classid(f["classid"]),
                keys=[_u32_key(f["protocol"], f["dscp"])],
            )

    # -- sysctls -------------------------------------------------------------------------------

    @contextmanager
    def _in_netns(self) -> Iterator[None]:
        # /proc/sys/net/* shows the network namespace of the thread that opens it.
        if not self.netns:
            yield
            return
        netns.pushns(self.netns)
        try:
            yield
        finally:
            netns.popns()

    def _sysctl_path(self, target: str) -> str:
        # Only network sysctls, and only as a path that stays under <proc_sys>/net: the name comes from
        # the config or the journal, and this path is written as root.
        key = target[len("sysctl/") :]
        if not is_net_sysctl(key):
            raise DriverError(target, "not a network sysctl name (net.<a>.<b>..., no '/' or empty parts)")
        base = os.path.join(self.proc_sys, "net")
        path = os.path.normpath(os.path.join(self.proc_sys, *key.split(".")))
        if os.path.commonpath([base, path]) != os.path.normpath(base):
            raise DriverError(target, f"{path} is outside {base}")
        return path

    def _read_sysctl(self, target: str) -> str:
        path = self._sysctl_path(target)
        try:
            with open(path, encoding="ascii") as fh:
                return " ".join(fh.read().split())
        except FileNotFoundError:
            raise DriverError(target, f"no such sysctl on this kernel ({path})") from None
        except OSError as e:
            raise DriverError(target, f"cannot read {path}: {e.strerror}") from None

    def _write_sysctl(self, target: str, value: str) -> None:
        path = self._sysctl_path(target)
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(value)
        except FileNotFoundError:
            raise DriverError(target, f"no such sysctl on this kernel ({path})") from None
        except OSError as e:
            why = "not allowed" if e.errno in (errno.EPERM, errno.EACCES) else e.strerror
            raise DriverError(target, f"cannot write {value!r} to {path}: {why}") from None
