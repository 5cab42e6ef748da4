"""An emulated priority fabric on one machine: a switch namespace with a bridge, one namespace per
host, veth links at a set rate, strict-priority queues by DSCP on every switch port (or one FIFO
queue), host queues set by the host agent. See geryon/testbed/README.md.

    from geryon.testbed import TestbedSpec, up
    with up(TestbedSpec(hosts=("ps0", "worker0"), rate_bits=100_000_000)) as tb:
        p = tb.popen("ps0", ["python", "server.py"])
"""

from typing import Any

from geryon.testbed.spec import SpecError, TestbedError, TestbedSpec

__all__ = ["Host", "SpecError", "Testbed", "TestbedError", "TestbedSpec", "attach", "down", "status", "up"]

_KERNEL_SIDE = ("Host", "Testbed", "attach", "down", "status", "up")


def __getattr__(name: str) -> Any:
    # The kernel side needs pyroute2 (the `agent` extra); importing it lazily keeps `geryon` (whose
    # parser registers `geryon testbed`) usable without that extra.
    if name in _KERNEL_SIDE:
        from geryon.testbed import testbed

        return getattr(testbed, name)
    raise AttributeError(f"module 'geryon.testbed' has no attribute {name!r}")
