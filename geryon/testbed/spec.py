"""What an emulated cluster looks like: `TestbedSpec`, validated on construction (pure, no kernel).

Every error is a `SpecError` (a ValueError, so the CLI maps it to exit 2) whose message starts with
the field's name and says what is allowed.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from geryon import units

SwitchMode = Literal["priority", "fifo"]
SWITCH_MODES: tuple[str, ...] = ("priority", "fifo")

HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
RUN_ID = re.compile(r"^[a-z0-9]{1,10}$")
MAX_HOSTS = 200  # one /24: .1-.200 for hosts
MIN_RATE_BITS = 1_000_000
MAX_RATE_BITS = 10_000_000_000
# A bfifo below two full frames (1514 bytes on the wire) drops nearly everything.
MIN_BUFFER_BYTES = 4096
MAX_BUFFER_BYTES = 256 * 1024 * 1024
MAX_BURST_BYTES = 1024 * 1024
RESERVED_HOSTS = ("sw",)  # gtb-<run>-sw is the switch


class TestbedError(RuntimeError):
    """The testbed could not be built, changed or torn down; the message says what and where."""

    __test__ = False  # not a pytest test class


class SpecError(TestbedError, ValueError):
    """A TestbedSpec field is malformed; the message names the field and what is allowed."""


@dataclass(frozen=True)
class TestbedSpec:
    """One switch, one namespace per host, every link at `rate_bits` (see geryon/testbed/README.md)."""

    __test__ = False  # not a pytest test class

    hosts: tuple[str, ...] = ("ps0", "ps1", "worker0", "worker1", "chief")
    rate_bits: int = 100_000_000
    buffer_bytes: int = 256 * 1024
    switch: SwitchMode = "priority"
    host_queues: bool = True
    intent: Any = None  # a geryon.fabric QosIntent; None = geryon.fabric.intent.default_intent()
    run_id: str | None = None
    # TSO/GSO/GRO on the veths. Off (default): the queues see MTU packets, as a real switch does;
    # faithful up to about 200 Mbit on 2 cores. On: rates up to ~1 Gbit, queues see 64 KB GSO packets.
    offloads: bool = False
    burst_bytes: int | None = None  # HTB burst of every shaped link; None = default_burst(rate_bits)

    def __post_init__(self) -> None:
        hosts = self.hosts
        if isinstance(hosts, str) or not isinstance(hosts, list | tuple):
            raise SpecError(f"hosts: expected a list of host names, got {type(hosts).__name__}")
        if not 1 <= len(hosts) <= MAX_HOSTS:
            raise SpecError(f"hosts: {len(hosts)} hosts; allowed 1-{MAX_HOSTS}")
        seen: set[str] = set()
        for i, h in enumerate(hosts):
            if not isinstance(h, str) or not HOST_NAME.match(h):
                raise SpecError(
                    f"hosts[{i}]: {h!r} is not a host name (a lowercase letter, then up to 7 lowercase "
                    "letters or digits)"
                )
            if h in RESERVED_HOSTS:
                raise SpecError(f"hosts[{i}]: {h!r} is reserved (the switch's namespace is gtb-<run>-sw)")
            if h in seen:
                raise SpecError(f"hosts[{i}]: {h!r} is listed twice")
            seen.add(h)
        object.__setattr__(self, "hosts", tuple(hosts))
        _int_in(self.rate_bits, "rate_bits", MIN_RATE_BITS, MAX_RATE_BITS, units.format_rate)
        _int_in(self.buffer_bytes, "buffer_bytes", MIN_BUFFER_BYTES, MAX_BUFFER_BYTES, _fmt_bytes)
        if self.burst_bytes is not None:
            _int_in(self.burst_bytes, "burst_bytes", MIN_BUFFER_BYTES, MAX_BURST_BYTES, _fmt_bytes)
        if self.switch not in SWITCH_MODES:
            raise SpecError(
                f"switch: {self.switch!r} is not a switch mode; allowed: {', '.join(SWITCH_MODES)}"
            )
        for name in ("host_queues", "offloads"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        if self.intent is not None and not hasattr(self.intent, "classes"):
            raise SpecError(
                f"intent: expected a geryon.fabric QosIntent or None, got {type(self.intent).__name__}"
            )
        if self.run_id is not None and (not isinstance(self.run_id, str) or not RUN_ID.match(self.run_id)):
            raise SpecError(f"run_id: {self.run_id!r} is not a run id (1-10 lowercase letters or digits)")

    @property
    def burst(self) -> int:
        return self.burst_bytes if self.burst_bytes is not None else default_burst(self.rate_bits)


def default_burst(rate_bits: int) -> int:
    """HTB burst for a link: about 4 ms of the link, between 16 and 64 KiB. Much less and HTB's timer
    and softirq jitter on a small machine keep the link below its rate; 32-64 KB at 1 Gbit."""
    return max(16 * 1024, min(64 * 1024, rate_bits // 8 * 4 // 1000))


def new_run_id() -> str:
    return "gtb" + secrets.token_hex(3)


def _int_in(value: Any, name: str, lo: int, hi: int, fmt: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{name}: expected an integer {lo}-{hi}, got {value!r}")
    if not lo <= value <= hi:
        raise SpecError(f"{name}: {fmt(value)} is out of range; allowed {fmt(lo)} to {fmt(hi)}")


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
