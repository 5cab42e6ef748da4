"""Builds the emulated cluster in the kernel (pyroute2): namespaces, a bridge, veth links, addresses,
offloads and RPS, sysctls, and the queues of switch ports and hosts. Every step checks first and
does only what is missing, so building an existing (or half-built) run again is safe.

Layout of run R with hosts h1..hn:
  gtb-R-sw   bridge br0; port p-<h> per host (its egress is the link toward h: the switch queues)
  gtb-R-<h>  eth0 = 10.77.0.<i+1>/24 (its egress is the host queue), lo
Each veth pair is created from the switch with its peer placed directly in the host's namespace, so no
interface name ever has to be unique outside the namespace it lives in.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from pyroute2 import IPRoute

from geryon.testbed import namespaces, state, userns
from geryon.testbed.queues import (
    HOST_IFNAME,
    SYSCTLS,
    host_config,
    host_fifo_tree,
    switch_port,
    switch_trees,
)
from geryon.testbed.spec import TestbedError, TestbedSpec

BRIDGE = "br0"
SUBNET = "10.77.0"
PREFIXLEN = 24
# TCP segmentation/receive offloads: off, the stack sends MTU packets and every queue holds real frames.
OFFLOADS = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp-accecn-segmentation",
    "tx-generic-segmentation",
    "rx-gro",
)

Say = Callable[[str], None]


def ns_name(run_id: str, host: str) -> str:
    return f"gtb-{run_id}-{host}"


def switch_ns(run_id: str) -> str:
    return f"gtb-{run_id}-sw"


def address(spec: TestbedSpec, host: str) -> str:
    return f"{SUBNET}.{spec.hosts.index(host) + 1}"


def build(spec: TestbedSpec, run_id: str, say: Say) -> None:
    sw = switch_ns(run_id)
    created = sum(namespaces.create(n) for n in [sw, *(ns_name(run_id, h) for h in spec.hosts)])
    say(f"{created} namespace(s) created, {len(spec.hosts) + 1 - created} existed")
    # No IPv6 on the switch: no router solicitations or MLD reports from the bridge into the queues.
    ipv6_off = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
    _sysctls(sw, ipv6_off, missing_ok=True)  # a kernel without IPv6 has nothing to turn off
    with namespaces.iproute(sw) as ipr:
        _up(ipr, "lo")
        if not ipr.link_lookup(ifname=BRIDGE):
            ipr.link("add", ifname=BRIDGE, kind="bridge")
        br = _up(ipr, BRIDGE)
        # The bridge's alias names the state dir that records this run: a `down` elsewhere can tell a
        # run recorded in another dir (a test's private one) from an orphan (see testbed._orphan_runs).
        ipr.link("set", index=br, ifalias=str(state.state_dir())[:255])
        for host in spec.hosts:
            port = switch_port(host)
            if not ipr.link_lookup(ifname=port):
                fd = os.open(namespaces.ns_path(ns_name(run_id, host)), os.O_RDONLY)
                try:
                    ipr.link("add", ifname=port, kind="veth", peer={"ifname": HOST_IFNAME, "net_ns_fd": fd})
                finally:
                    os.close(fd)
            idx = ipr.link_lookup(ifname=port)[0]
            ipr.link("set", index=idx, master=br)
            _up(ipr, port)
    for host in spec.hosts:
        with namespaces.iproute(ns_name(run_id, host)) as ipr:
            _up(ipr, "lo")
            idx = _up(ipr, HOST_IFNAME)
            addr = address(spec, host)
            have = {a.get("IFA_ADDRESS") for a in ipr.get_addr(index=idx, family=2)}
            if addr not in have:
                ipr.addr("add", index=idx, address=addr, prefixlen=PREFIXLEN)
    say(f"links up: {len(spec.hosts)} hosts on {BRIDGE} in {sw}, {SUBNET}.0/{PREFIXLEN}")
    _offloads(spec, run_id, say)
    if not spec.host_queues:
        for host in spec.hosts:
            _sysctls(ns_name(run_id, host), SYSCTLS)


def recorded_in(run_id: str) -> str | None:
    """The state dir the run's switch says records it (its bridge's alias); None if unreadable."""
    try:
        with namespaces.iproute(switch_ns(run_id)) as ipr:
            found = ipr.link_lookup(ifname=BRIDGE)
            if not found:
                return None
            alias = ipr.get_links(found[0])[0].get("IFLA_IFALIAS")
    except (OSError, IndexError):
        return None
    return str(alias) if alias else None


def _up(ipr: IPRoute, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise TestbedError(f"interface {ifname} is missing")
    ipr.link("set", index=found[0], state="up")
    return int(found[0])


def _sysctls(ns: str, values: dict[str, str], missing_ok: bool = False) -> None:
    with namespaces.inside(ns):
        for key, value in values.items():
            try:
                with open("/proc/sys/" + key.replace(".", "/"), "w", encoding="ascii") as fh:
                    fh.write(value)
            except FileNotFoundError:
                if not missing_ok:
                    raise TestbedError(f"sysctl {key}: not on this kernel") from None


def _offloads(spec: TestbedSpec, run_id: str, say: Say) -> None:
    """Offloads per the spec on both ends of every link; with them off, RPS spreads each veth's
    receive work over all CPUs by flow hash (no reordering across CPUs, no spurious retransmits)."""
    from pyroute2.ethtool.ioctl import IoctlEthtool

    ends = [(switch_ns(run_id), switch_port(h)) for h in spec.hosts]
    ends += [(ns_name(run_id, h), HOST_IFNAME) for h in spec.hosts]
    for ns, ifname in ends:
        with namespaces.inside(ns):
            eth = IoctlEthtool(ifname)  # its socket, and so its ioctls, belong to `ns`
        try:
            features = eth.get_features()
            for name in OFFLOADS:
                if name in features and features.is_active(name) != spec.offloads:
                    features.set_value(name, spec.offloads)
            eth.set_features(features)
        finally:
            eth.close()
    if not spec.offloads:
        mask = _cpu_mask(os.cpu_count() or 1)
        by_ns: dict[str, list[str]] = {}
        for ns, ifname in ends:
            by_ns.setdefault(ns, []).append(ifname)
        for ns, ifnames in by_ns.items():
            # /sys/class/net shows the namespace sysfs was mounted in: `ip netns exec` mounts ns's own.
            script = "; ".join(
                f'for f in /sys/class/net/{i}/queues/rx-*/rps_cpus; do echo {mask} > "$f"; done'
                for i in ifnames
            )
            try:
                _run(["ip", "netns", "exec", ns, "sh", "-ec", script], f"RPS in {ns}")
            except TestbedError:
                if userns.privilege_mode() == "root":
                    raise
                # The kernel only lets the initial user namespace's CAP_NET_ADMIN set rps_cpus.
                say("note: a user namespace may not set RPS; expect some reordering at high packet rates")
                return


def _cpu_mask(n: int) -> str:
    hexmask = format((1 << n) - 1, "x")
    groups: list[str] = []
    while hexmask:
        groups.insert(0, hexmask[-8:])
        hexmask = hexmask[:-8]
    return ",".join(groups)


def _run(argv: list[str], what: str) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)
    except subprocess.CalledProcessError as e:
        raise TestbedError(f"{what}: {' '.join(argv[:5])}... failed: {e.stderr.strip()}") from None


# -- queues --------------------------------------------------------------------------------------


def apply_host_queues(spec: TestbedSpec, run_id: str, say: Say) -> None:
    """Host egress queues and sysctls: with host_queues, exactly what `geryon agent apply --netns`
    does with host_config(spec) (the agent's engine and Linux driver); else one queue at the link rate."""
    from geryon.agent.driver import DriverError
    from geryon.agent.engine import EngineError, apply_plan, drift, make_plan
    from geryon.fabric.render.linux import ApplyError, apply_ports

    for host in spec.hosts:
        ns = ns_name(run_id, host)
        if spec.host_queues:
            from geryon.agent.registry import open_slots  # loads every driver

            cfg = host_config(spec)
            slots, close = open_slots(cfg, netns=ns)
            try:
                plan = make_plan(slots, cfg, None)
                apply_plan(plan, slots, None)
                left = drift(make_plan(slots, cfg, None))
            except EngineError as e:
                raise TestbedError(f"host queues of {host}: {e}") from None
            finally:
                close()
            if left:
                raise TestbedError(f"host queues of {host}: still differ after apply: {'; '.join(left)}")
        else:
            try:  # the fabric's writer: LinuxDriver, then read back and compare
                apply_ports({HOST_IFNAME: host_fifo_tree(spec)}, netns=ns, burst_bytes=spec.burst)
            except (DriverError, ApplyError) as e:
                raise TestbedError(f"host queue of {host}: {e}") from None
    what = "agent config (classes by DSCP)" if spec.host_queues else "one queue"
    say(f"host queues: {what} on eth0 of {len(spec.hosts)} hosts")


def apply_switch(spec: TestbedSpec, run_id: str, mode: str, say: Say) -> None:
    """Every switch port's egress queues for `mode`: written and read back by the fabric's Linux
    renderer (the agent's LinuxDriver underneath)."""
    from geryon.agent.driver import DriverError
    from geryon.fabric.render.linux import ApplyError, apply_ports

    trees = switch_trees(spec, mode)
    try:
        apply_ports(trees, netns=switch_ns(run_id))
    except (DriverError, ApplyError) as e:
        raise TestbedError(f"switch queues ({mode}): {e}") from None
    say(f"switch: {mode} queues on {len(trees)} ports")
