"""VLAN egress priority map (skb priority -> PCP): config, the rtnetlink requests against what iproute2's
`ip link set ... type vlan egress-qos-map` sends (captured with an LD_PRELOAD shim), the real kernel's
answers where it has them (a veth in a namespace the test makes; this kernel has no 8021q), and
plan/apply/verify/restore against the fake kernel at the socket (tests/agent/vlan_fake.py)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent.agent_netns import VethNs, veth_ns
from agent.vlan_fake import FakeLink, FakeRtnlKernel
from geryon_cli import geryon
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.agent import vlan
from geryon.agent.config import ConfigError, parse_config
from geryon.agent.engine import Slot, apply_plan, make_plan, restore
from geryon.agent.journal import Journal
from geryon.agent.names import target_problem
from geryon.agent.vlan import VlanClient
from geryon.agent.vlan_driver import VlanDriver

FIXTURES = Path(__file__).parent / "fixtures"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def config(vlan_map: dict[str, dict[int, int]]):  # type: ignore[no-untyped-def]
    return parse_config({"interfaces": ["eth0"], "vlan_egress_qos": vlan_map})


def driver(kernel: FakeRtnlKernel) -> VlanDriver:
    return VlanDriver(client_factory=lambda: VlanClient(sock_factory=kernel.socket))


# --- config -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"eth0.100": {5: 8}}, "vlan_egress_qos[eth0.100][5]: 8 is out of range; allowed 0-7"),
        ({"eth0.100": {-1: 1}}, "vlan_egress_qos[eth0.100]: key a number (-1) is not an skb priority"),
        ({"eth0.100": {2**32: 1}}, "is not an skb priority (an integer 0-4294967295)"),
        ({"eth0.100": {"x": 1}}, "key a string ('x') is not an skb priority"),
        ({"eth0.100": {}}, "vlan_egress_qos[eth0.100]: expected a non-empty mapping"),
        ({"../x": {1: 1}}, "vlan_egress_qos: a string ('../x') is not an interface name"),
        ([1, 2], "vlan_egress_qos: expected a mapping of VLAN device"),
    ],
)
def test_bad_values_name_the_field(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        parse_config({"interfaces": ["eth0"], "vlan_egress_qos": value})
    assert message in str(err.value)


def test_journal_targets_are_allow_listed() -> None:
    assert target_problem("vlan", "eth0.100/vlan/egress_qos/5") is None
    assert target_problem("vlan", "eth0.100/vlan/egress_qos/4294967295") is None
    for bad in (
        "../vlan/egress_qos/5",
        "eth0.100/vlan/egress_qos/05",
        "eth0/vlan/egress_qos/x",
        "eth0/vlan/x",
    ):
        assert target_problem("vlan", bad) is not None, bad


# --- requests: byte for byte what iproute2 sends; the real kernel's answers ---------------------------


@pytest.fixture(scope="module")
def nlshim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None or shutil.which("ip") is None:
        pytest.skip("needs gcc and iproute2's ip")
    out = tmp_path_factory.mktemp("shim") / "nlsendshim.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(FIXTURES / "nlsendshim.c"), "-ldl"], check=True
    )
    return out


@pytest.fixture
def ns() -> Iterator[VethNs]:
    with veth_ns(1, prefix="gvl") as v:
        yield v


def _without_seq(msg: bytes) -> bytes:
    return msg[:8] + b"\0\0\0\0" + msg[12:]


@needs_root
def test_requests_are_byte_identical_to_iproute2_and_the_real_kernel_refuses_a_non_vlan(
    nlshim: Path, ns: VethNs, tmp_path: Path
) -> None:
    log = tmp_path / "requests.log"
    run = subprocess.run(
        ["ip", "netns", "exec", ns.name, "env", f"LD_PRELOAD={nlshim}", f"NLSHIM_LOG={log}",
         "ip", "link", "set", "dev", "ga0", "type", "vlan", "egress-qos-map", "2:3", "5:5"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    # No 8021q here, and ga0 is a veth either way: rtnl_changelink answers EOPNOTSUPP.
    assert run.returncode == 2 and "Operation not supported" in run.stderr
    sent = [bytes.fromhex(line) for line in log.read_text().split()]
    assert len(sent) == 2  # ll_name_to_index's RTM_GETLINK, then the RTM_NEWLINK
    assert _without_seq(sent[0]) == _without_seq(vlan.encode_getlink("ga0", 0))
    (index,) = struct.unpack_from("=i", sent[1], 16 + 4)
    assert _without_seq(sent[1]) == _without_seq(vlan.encode_egress_qos(index, [(2, 3), (5, 5)], 0))

    # Our client on the real kernel: the same answers.
    client = VlanClient(netns=ns.name)
    try:
        link = client.get_link("ga0")
        assert (link.index, link.kind, link.vlan_id, link.egress) == (index, "veth", None, {})
        with pytest.raises(OSError) as err:
            client.set_egress(index, [(2, 3)])
        assert err.value.errno == errno.EOPNOTSUPP
        with pytest.raises(OSError) as err:
            client.get_link("nosuch0")
        assert err.value.errno == errno.ENODEV
    finally:
        client.close()


@needs_root
def test_a_non_vlan_device_with_the_knob_exits_2_naming_it(ns: VethNs, tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    where = ["--config", str(cfg), "--netns", ns.name, "--journal", str(tmp_path / "j.json")]
    base = "interfaces: [ga0]\negress: {rate: 1gbit}\ndcb: off\nrdma: off\nvlan_egress_qos:\n"
    for entry, message in [
        ("ga0: {5: 5}", "vlan_egress_qos[ga0]: ga0 is a veth device, not a VLAN (802.1Q) device"),
        ("ga0.100: {5: 9}", "vlan_egress_qos[ga0.100][5]: 9 is out of range; allowed 0-7"),
        ("gvx9: {5: 5}", "vlan_egress_qos[gvx9]: no such interface here"),
    ]:
        cfg.write_text(f"{base}  {entry}\n")
        r = geryon("agent", "plan", *where)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert not (tmp_path / "j.json").exists()  # nothing applied, nothing journaled


# --- the fake kernel: its replies, and plan/apply/verify/restore --------------------------------------


def test_the_fake_reports_the_map_as_vlan_fill_info_does() -> None:
    link = FakeLink(index=7)
    kernel = FakeRtnlKernel({"eth0.100": link})
    client = VlanClient(sock_factory=kernel.socket)
    assert client.get_link("eth0.100").egress == {}
    client.set_egress(7, [(3, 3), (19, 5)])  # 19 shares bucket 3 (skb_prio & 0xF)
    link.set_egress(5, 8)  # another tool's PCP 8: vlan_dev_set_egress_priority masks it to 0
    got = client.get_link("eth0.100")
    assert (got.kind, got.vlan_id, got.egress) == ("vlan", 100, {3: 3, 19: 5, 5: 0})  # entries at 0 reported
    client.set_egress(7, [(3, 0), (19, 0)])
    assert client.get_link("eth0.100").egress == {}  # no nonzero entry: no egress nest at all
    with pytest.raises(ValueError, match="PCP 0-7"):
        vlan.encode_egress_qos(7, [(5, 8)], 1)  # ours never sends a PCP the kernel would silently mask


def test_iproute2_reads_the_fakes_reply_as_geryon_does(nlshim: Path, tmp_path: Path) -> None:
    """`ip -d -j link show` on the fake's RTM_GETLINK reply (answered through the shim, no kernel): the
    fake's shape is one iproute2 parses, and it reads the same map out of it as our decoder."""
    link = FakeLink(index=7, vlan_id=100)
    for prio, pcp in ((3, 3), (19, 5), (5, 0), (6, 6)):  # 19 and 3 share a bucket; 5 is kept at 0
        link.set_egress(prio, pcp)
    (reply,) = FakeRtnlKernel({"eth0.100": link}).handle(vlan.encode_getlink("eth0.100", 1))
    env = {
        **os.environ,
        "LD_PRELOAD": str(nlshim),
        "NLSHIM_LOG": str(tmp_path / "log"),
        "NLSHIM_REPLY": reply.hex(),
    }
    run = subprocess.run(
        ["ip", "-d", "-j", "link", "show", "dev", "eth0.100"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    (shown,) = json.loads(run.stdout)
    info = shown["linkinfo"]
    ours = vlan.decode_link(reply)
    assert (shown["ifindex"], info["info_kind"], info["info_data"]["id"]) == (
        ours.index,
        ours.kind,
        ours.vlan_id,
    )
    assert info["info_data"]["protocol"] == "802.1Q"
    ip_map = [(e["from"], e["to"]) for e in info["info_data"]["egress_qos"]]
    assert ip_map == list(ours.egress.items()) == [(19, 5), (3, 3), (5, 0), (6, 6)]  # vlan_fill_info's order


def test_plan_apply_verify_restore(tmp_path: Path) -> None:
    link = FakeLink(index=7)
    link.set_egress(1, 1)  # an operator's entry Geryon does not own
    link.set_egress(5, 2)  # an old mapping of an skb priority Geryon owns
    kernel = FakeRtnlKernel({"eth0.100": link, "eth0": FakeLink(index=2, kind="")})
    slots = [Slot(driver(kernel))]
    cfg = config({"eth0.100": {3: 3, 5: 5}})
    plan = make_plan(slots, cfg)
    assert {c.target: (c.before, c.after) for c in plan.changes} == {
        "eth0.100/vlan/egress_qos/3": (0, 3),
        "eth0.100/vlan/egress_qos/5": (2, 5),
    }
    journal = Journal.load(tmp_path / "journal.json")
    apply_plan(plan, slots, journal)
    assert link.egress_map() == {1: 1, 3: 3, 5: 5}
    assert make_plan(slots, cfg).empty

    link.set_egress(5, 0)  # drift (another tool): found and repaired
    plan = make_plan(slots, cfg)
    assert [(c.target, c.before, c.after) for c in plan.changes] == [("eth0.100/vlan/egress_qos/5", 0, 5)]
    apply_plan(plan, slots, journal)

    # Dropping an entry from the config releases it to its pre-Geryon value.
    smaller = config({"eth0.100": {3: 3}})
    plan = make_plan(slots, smaller, journal)
    assert [(c.target, c.after, c.release) for c in plan.changes] == [("eth0.100/vlan/egress_qos/5", 2, True)]
    apply_plan(plan, slots, journal)
    assert link.egress_map() == {1: 1, 3: 3, 5: 2}

    restore([Slot(driver(kernel))], Journal.load(tmp_path / "journal.json"))
    assert link.egress_map() == {1: 1, 5: 2}


def test_a_non_vlan_device_is_a_config_error_and_nothing_is_sent() -> None:
    kernel = FakeRtnlKernel({"eth0": FakeLink(index=2, kind="")})
    slots = [Slot(driver(kernel))]
    with pytest.raises(ConfigError, match=r"vlan_egress_qos\[eth0\]: eth0 is a physical .* not a VLAN"):
        make_plan(slots, config({"eth0": {5: 5}}))
    assert all(struct.unpack_from("=H", r, 4)[0] == vlan.RTM_GETLINK for r in kernel.requests)


def test_no_knob_no_netlink() -> None:
    opened = []
    drv = VlanDriver(
        client_factory=lambda: opened.append(1) or VlanClient(sock_factory=FakeRtnlKernel({}).socket)
    )
    assert make_plan([Slot(drv)], parse_config({"interfaces": ["eth0"]})).empty
    assert opened == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 3))
def test_a_malformed_reply_is_ebadmsg_never_another_error(junk: bytes, cut: int) -> None:
    """Replies the decoder cannot read (truncated, random attributes, a short VLAN id) end as EBADMSG,
    never as an exception the driver does not expect."""
    link = FakeLink(index=7)
    link.set_egress(3, 3)
    (good,) = FakeRtnlKernel({"eth0.100": link}).handle(vlan.encode_getlink("eth0.100", 1))
    body = good[16:] if cut == 0 else good[16 : len(good) - cut * 7] + junk
    raw = struct.pack("=IHHII", 16 + len(body), vlan.RTM_NEWLINK, 0, 1, 0) + body

    class Sock:
        def send(self, data: bytes, /) -> int:
            return len(data)

        def recv(self, bufsize: int, /) -> bytes:
            return raw

        def close(self) -> None:
            pass

    client = VlanClient(sock_factory=Sock)
    client._seq = iter([1])  # type: ignore[assignment]  # the reply's sequence number
    try:
        got = client.get_link("eth0.100")
    except OSError as e:
        assert e.errno == errno.EBADMSG
    else:
        assert isinstance(got.egress, dict)
