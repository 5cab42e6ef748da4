"""Link rates as people write them (``10gbit``, ``40Gbps``, ``800mbit``), in bits per second.

Shared by the simulator's CLI, the testbed and the agent's egress queues. Unlike tc, where ``kbps``
means kilobytes per second, ``bps`` here means bits per second, as the paper and switch vendors
use it; byte rates are not accepted, so ``MBps`` vs ``Mbps`` can never be confused.
"""

from __future__ import annotations

import math
import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?)(bit|bps)?\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str | float, field: str = "rate") -> float:
    """Bits per second from ``10gbit``, ``10Gbps`` or ``2.5e9``; a prefix needs a unit (``10g`` is
    refused, ``10gbit`` is not). Raises ValueError naming `field`."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _RATE.match(str(text))
        if not match or (match.group(2) and not match.group(3)):
            raise ValueError(
                f"{field}: {text!r} is not a rate; write e.g. 10gbit, 40Gbps, 800mbit or a number of bits/s"
            )
        if match.group(3) and "B" in match.group(3):
            raise ValueError(
                f"{field}: {text!r} looks like bytes per second; write bits, e.g. 10gbit or 10Gbps"
            )
        value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field}: {text!r} must be a rate above 0 bits/s")
    return value


def format_rate(bps: float) -> str:
    """``1e10`` -> ``10 Gbit/s``; the shortest of bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"
