import socket

import pytest

from geryon.tf.ports import free_port_pairs


def test_pairs_are_distinct_and_both_ends_bind() -> None:
    ports = free_port_pairs(4, -7000)
    data = [p - 7000 for p in ports]
    assert len(set(ports) | set(data)) == 8
    for port in ports + data:
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))  # raises if taken


def test_an_offset_no_port_can_take_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="found only 0 of 1 free port pairs"):
        free_port_pairs(1, 70000, attempts=5)
