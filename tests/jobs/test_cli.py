"""`geryon controller` and `geryon jobs` arguments (pure: every case fails before reaching etcd)."""

from __future__ import annotations

import pytest

from geryon.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["controller", "--etcd", "http://10.0.0.1:2379", "--queues", "4"],
            "plain http is allowed only to a loopback",
        ),
        (
            ["controller", "--etcd", "http://127.0.0.1:2379", "--queues", "9"],
            "queues: 9; the fabric's classes are 1 to 8",
        ),
        (
            ["controller", "--etcd", "http://127.0.0.1:2379", "--queues", "4", "--ttl", "1"],
            "--ttl: at least 2 s",
        ),
        (
            ["controller", "--etcd", "http://127.0.0.1:2379", "--queues", "4", "--interval", "5"],
            "--interval: 5.0",
        ),
        (
            ["controller", "--etcd", "http://127.0.0.1:2379", "--queues", "4", "--hosts", "a_b"],
            "--hosts: 'a_b'",
        ),
        (
            ["controller", "--etcd", "http://127.0.0.1:2379", "--queues", "4", "--prefix", "geryon"],
            "--prefix",
        ),
        (["jobs", "register", "--etcd", "http://127.0.0.1:2379", "/nonexistent.json"], "record: "),
    ],
)
def test_bad_arguments_are_one_clear_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
