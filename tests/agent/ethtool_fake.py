"""A fake NIC at the SIOCETHTOOL ioctl boundary (geryon.agent.ethtool's `ioctl(ifname, bytes) -> bytes`).

It reads the request bytes as net/ethtool/ioctl.c does (ethtool_get_pauseparam/ethtool_set_pauseparam;
ethtool_get_tunable/ethtool_set_tunable after ethtool_tunable_valid: ETHTOOL_PFC_PREVENTION_TOUT must be
a __u16, len 2) and answers as mlx5 does (mlx5e_ethtool_get/set_pauseparam: autoneg is refused with
-EINVAL; mlx5e_get/set_pfc_prevention_tout: 0 = off, else 80-8000 ms, "auto" 0xffff reads back as 100).
Written with plain struct, independent of the module under test. A device without the ops (veth)
answers EOPNOTSUPP, as the kernel does when the driver lacks them.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass, field

GPAUSE, SPAUSE, GTUNABLE, STUNABLE = 0x12, 0x13, 0x48, 0x49
PFC_PREVENTION_TOUT, TUNABLE_U16 = 3, 2


@dataclass
class FakeEthtoolNic:
    ops: bool = True  # False: veth (no pause or tunable ops)
    rx_pause: bool = True  # mlx5 ports come up with global pause on
    tx_pause: bool = True
    pfc_storm_ms: int = 0


@dataclass
class FakeEthtool:
    nics: dict[str, FakeEthtoolNic]
    calls: list[bytes] = field(default_factory=list)

    def __call__(self, ifname: str, request: bytes) -> bytes:
        self.calls.append(request)
        nic = self.nics.get(ifname)
        if nic is None:
            raise OSError(errno.ENODEV, "No such device")
        (cmd,) = struct.unpack_from("=I", request)
        if not nic.ops:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if cmd == GPAUSE:
            return struct.pack("=IIII", cmd, 0, int(nic.rx_pause), int(nic.tx_pause))
        if cmd == SPAUSE:
            _cmd, autoneg, rx, tx = struct.unpack_from("=IIII", request)
            if autoneg:
                raise OSError(errno.EINVAL, "Invalid argument")  # mlx5e_ethtool_set_pauseparam
            nic.rx_pause, nic.tx_pause = bool(rx), bool(tx)
            return request
        if cmd in (GTUNABLE, STUNABLE):
            _cmd, tid, type_id, length = struct.unpack_from("=IIII", request)
            if tid != PFC_PREVENTION_TOUT or type_id != TUNABLE_U16 or length != 2:
                raise OSError(errno.EINVAL, "Invalid argument")  # ethtool_tunable_valid
            if cmd == GTUNABLE:
                return request[:16] + struct.pack("=H", nic.pfc_storm_ms)
            (ms,) = struct.unpack_from("=H", request, 16)
            if ms == 0xFFFF:
                ms = 100  # MLX5E_PFC_PREVEN_AUTO_TOUT_MSEC
            elif ms and not 80 <= ms <= 8000:
                raise OSError(errno.EINVAL, "Invalid argument")
            nic.pfc_storm_ms = ms
            return request
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
