"""The two ethtool settings lossless RoCE depends on besides DCB: link-level (global) pause, which must be
off where PFC is on, and the PFC storm-prevention timeout (a NIC stuck sending pause stops after it).

Through the SIOCETHTOOL ioctl (include/uapi/linux/ethtool.h: ETHTOOL_GPAUSEPARAM/SPAUSEPARAM with
struct ethtool_pauseparam, ETHTOOL_GTUNABLE/STUNABLE with struct ethtool_tunable and the u16 tunable
ETHTOOL_PFC_PREVENTION_TOUT). The ioctl is one function, `ioctl(ifname, request bytes) -> reply bytes`,
so tests put a fake NIC exactly there (tests/agent/ethtool_fake.py); a device without the op (veth)
answers EOPNOTSUPP, which becomes EthtoolUnsupported.
"""

from __future__ import annotations

import array
import errno
import fcntl
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from geryon.agent.netlink import in_netns

SIOCETHTOOL = 0x8946
ETHTOOL_GPAUSEPARAM = 0x12
ETHTOOL_SPAUSEPARAM = 0x13
ETHTOOL_GTUNABLE = 0x48
ETHTOOL_STUNABLE = 0x49
ETHTOOL_PFC_PREVENTION_TOUT = 3  # enum tunable_id
ETHTOOL_TUNABLE_U16 = 2  # enum tunable_type_id
PFC_STORM_PREVENTION_AUTO = 0xFFFF
PFC_STORM_PREVENTION_DISABLE = 0

# struct ethtool_pauseparam: __u32 cmd, autoneg, rx_pause, tx_pause
PAUSEPARAM = struct.Struct("=IIII")
# struct ethtool_tunable: __u32 cmd, id, type_id, len; then len bytes of data (a __u16 here)
TUNABLE_U16 = struct.Struct("=IIIIH")
_IFNAMSIZ = 16

Ioctl = Callable[[str, bytes], bytes]


class EthtoolUnsupported(OSError):
    """The device has no such ethtool op (EOPNOTSUPP), e.g. veth."""


@dataclass(frozen=True)
class Pause:
    autoneg: bool
    rx: bool
    tx: bool


def kernel_ioctl(netns: str | None = None) -> Ioctl:
    """The real SIOCETHTOOL: struct ifreq {name[16], ifr_data -> our buffer}; the kernel fills the buffer."""

    def call(ifname: str, request: bytes) -> bytes:
        buf = array.array("B", request)
        addr, _ = buf.buffer_info()
        ifreq = struct.pack(f"{_IFNAMSIZ}sP", ifname.encode()[: _IFNAMSIZ - 1], addr)
        with in_netns(netns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        finally:
            sock.close()
        return buf.tobytes()

    return call


class Ethtool:
    def __init__(self, ioctl: Ioctl) -> None:
        self._ioctl = ioctl

    def _call(self, ifname: str, request: bytes, what: str) -> bytes:
        try:
            return self._ioctl(ifname, request)
        except OSError as e:
            text = f"ethtool {what} {ifname}: {e.strerror or e}"
            if e.errno == errno.EOPNOTSUPP:
                raise EthtoolUnsupported(e.errno, text) from None
            if e.errno == errno.ENODEV:
                raise OSError(e.errno, f"ethtool {what} {ifname}: no such interface") from None
            raise OSError(e.errno, text) from None

    def get_pause(self, ifname: str) -> Pause:
        reply = self._call(ifname, PAUSEPARAM.pack(ETHTOOL_GPAUSEPARAM, 0, 0, 0), "get pause")
        _cmd, autoneg, rx, tx = PAUSEPARAM.unpack_from(reply)
        return Pause(bool(autoneg), bool(rx), bool(tx))

    def set_pause(self, ifname: str, pause: Pause) -> None:
        request = PAUSEPARAM.pack(ETHTOOL_SPAUSEPARAM, int(pause.autoneg), int(pause.rx), int(pause.tx))
        self._call(ifname, request, "set pause")

    def get_pfc_storm_timeout(self, ifname: str) -> int:
        """Milliseconds; 0 = storm prevention off (mlx5 reads its "auto" back as 100)."""
        request = TUNABLE_U16.pack(ETHTOOL_GTUNABLE, ETHTOOL_PFC_PREVENTION_TOUT, ETHTOOL_TUNABLE_U16, 2, 0)
        return int(TUNABLE_U16.unpack_from(self._call(ifname, request, "get pfc-prevention-tout"))[4])

    def set_pfc_storm_timeout(self, ifname: str, msec: int) -> None:
        if not 0 <= msec <= 0xFFFF:
            raise ValueError(f"pfc-prevention-tout: {msec} is outside 0..65535 ms")
        request = TUNABLE_U16.pack(
            ETHTOOL_STUNABLE, ETHTOOL_PFC_PREVENTION_TOUT, ETHTOOL_TUNABLE_U16, 2, msec
        )
        self._call(ifname, request, "set pfc-prevention-tout")
