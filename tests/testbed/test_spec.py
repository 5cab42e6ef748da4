"""TestbedSpec validation: every bad field is refused on construction, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from geryon.fabric.intent import default_intent
from geryon.testbed.spec import RUN_ID, SpecError, TestbedError, TestbedSpec, default_burst, new_run_id


def test_defaults_are_the_interface_defaults() -> None:
    s = TestbedSpec()
    assert s.hosts == ("ps0", "ps1", "worker0", "worker1", "chief")
    assert (s.rate_bits, s.buffer_bytes, s.switch, s.host_queues) == (
        100_000_000,
        256 * 1024,
        "priority",
        True,
    )
    assert s.intent is None and s.run_id is None and s.offloads is False
    assert s.burst == default_burst(100_000_000)


def test_hosts_list_becomes_a_tuple_and_intent_is_accepted() -> None:
    s = TestbedSpec(hosts=["a", "b1"], intent=default_intent(), run_id="abc123")  # type: ignore[arg-type]
    assert s.hosts == ("a", "b1")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hosts": ()}, "hosts:"),
        ({"hosts": "ps0,ps1"}, "hosts:"),
        ({"hosts": ("ps0", "ps0")}, "hosts[1]:"),
        ({"hosts": ("Ps0",)}, "hosts[0]:"),
        ({"hosts": ("0ps",)}, "hosts[0]:"),
        ({"hosts": ("abcdefghi",)}, "hosts[0]:"),
        ({"hosts": ("a-b",)}, "hosts[0]:"),
        ({"hosts": ("ps0", "sw")}, "hosts[1]:"),
        ({"hosts": tuple(f"h{i}" for i in range(201))}, "hosts:"),
        ({"rate_bits": 0}, "rate_bits:"),
        ({"rate_bits": 999_999}, "rate_bits:"),
        ({"rate_bits": 20_000_000_000}, "rate_bits:"),
        ({"rate_bits": "100mbit"}, "rate_bits:"),
        ({"rate_bits": True}, "rate_bits:"),
        ({"rate_bits": 1e8}, "rate_bits:"),
        ({"buffer_bytes": 1500}, "buffer_bytes:"),
        ({"buffer_bytes": 2**30}, "buffer_bytes:"),
        ({"burst_bytes": 100}, "burst_bytes:"),
        ({"switch": "prio"}, "switch:"),
        ({"switch": None}, "switch:"),
        ({"host_queues": "yes"}, "host_queues:"),
        ({"offloads": 1}, "offloads:"),
        ({"intent": {"classes": []}}, "intent:"),
        ({"run_id": "Run1"}, "run_id:"),
        ({"run_id": "a-b"}, "run_id:"),
        ({"run_id": "abcdefghijk"}, "run_id:"),
        ({"run_id": ""}, "run_id:"),
    ],
)
def test_bad_fields_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        TestbedSpec(**kwargs)
    assert str(err.value).startswith(field), str(err.value)
    # Bad input is a ValueError (the CLI maps it to exit 2) and a TestbedError (one except for callers).
    assert isinstance(err.value, ValueError) and isinstance(err.value, TestbedError)


def test_default_burst_is_about_4_ms_between_16_and_64_kib() -> None:
    assert default_burst(100_000_000) == 50_000
    assert default_burst(20_000_000) == 16 * 1024
    assert default_burst(1_000_000_000) == 64 * 1024
    assert TestbedSpec(burst_bytes=32 * 1024).burst == 32 * 1024


def test_new_run_ids_are_valid_and_distinct() -> None:
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(RUN_ID.match(i) and i.startswith("gtb") for i in ids)
