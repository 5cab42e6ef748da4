"""An emulated priority fabric on one machine: a switch namespace with a bridge, one namespace per
host, veth links at a set rate, strict-priority queues by DSCP on every switch port (or one FIFO
queue), host queues set by the host agent. See geryon/testbed/README.md.

    from geryon.testbed import TestbedSpec, up
    with up(TestbedSpec(hosts=("ps0", "worker0"), rate_bits=100_000_000)) as tb:
        p = tb.popen("ps0", ["python", "server.py"])
"""

from geryon.testbed.spec import SpecError, TestbedError, TestbedSpec
from geryon.testbed.testbed import Host, Testbed, attach, down, status, up

__all__ = ["Host", "SpecError", "Testbed", "TestbedError", "TestbedSpec", "attach", "down", "status", "up"]
