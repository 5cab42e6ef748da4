"""The SIOCETHTOOL calls: struct layouts as include/uapi/linux/ethtool.h has them, the real kernel's
answers for a veth in a namespace the test makes (no pause or tunable ops), and the fake mlx5."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator

import pytest
from agent.agent_netns import VethNs, veth_ns
from agent.ethtool_fake import FakeEthtool, FakeEthtoolNic

from geryon.agent import ethtool
from geryon.agent.ethtool import Ethtool, EthtoolUnsupported, Pause, kernel_ioctl


def test_request_layouts() -> None:
    # struct ethtool_pauseparam: 4 x __u32 (cmd, autoneg, rx_pause, tx_pause)
    assert ethtool.PAUSEPARAM.size == 16
    # struct ethtool_tunable: __u32 cmd, id, type_id, len, then the __u16 value
    assert ethtool.TUNABLE_U16.size == 18
    fake = FakeEthtool({"eth0": FakeEthtoolNic()})
    e = Ethtool(fake)
    e.set_pfc_storm_timeout("eth0", 300)
    assert fake.calls[-1] == struct.pack("=IIIIH", 0x49, 3, 2, 2, 300)
    e.set_pause("eth0", Pause(False, False, True))
    assert fake.calls[-1] == struct.pack("=IIII", 0x13, 0, 0, 1)


def test_fake_mlx5_semantics() -> None:
    e = Ethtool(FakeEthtool({"eth0": FakeEthtoolNic()}))
    assert e.get_pause("eth0") == Pause(False, True, True)
    with pytest.raises(OSError) as err:
        e.set_pause("eth0", Pause(True, False, False))  # mlx5 has no pause autonegotiation
    assert err.value.errno == errno.EINVAL
    e.set_pfc_storm_timeout("eth0", 0xFFFF)
    assert e.get_pfc_storm_timeout("eth0") == 100  # "auto" reads back as MLX5E_PFC_PREVEN_AUTO_TOUT_MSEC


@pytest.fixture
def ns() -> Iterator[VethNs]:
    with veth_ns(1, prefix="get") as v:
        yield v


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_real_veth_has_no_pause_or_tunable_ops(ns: VethNs) -> None:
    e = Ethtool(kernel_ioctl(ns.name))
    ifname = ns.ifnames[0]
    with pytest.raises(EthtoolUnsupported):
        e.get_pause(ifname)
    with pytest.raises(EthtoolUnsupported):
        e.get_pfc_storm_timeout(ifname)
    with pytest.raises(OSError, match="no such interface"):
        e.get_pause("gnosuch0")
