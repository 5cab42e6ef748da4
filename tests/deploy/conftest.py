from __future__ import annotations

from collections.abc import Iterator

import pytest

from geryon.testbed import Testbed, TestbedSpec, up


@pytest.fixture
def bare_testbed() -> Iterator[Testbed]:
    """A testbed with nothing configured: FIFO switch ports, kernel-default host queues."""
    spec = TestbedSpec(
        hosts=("ps0", "worker0"),
        rate_bits=100_000_000,
        buffer_bytes=256 * 1024,
        switch="fifo",
        host_queues=False,
    )
    with up(spec) as tb:
        yield tb
