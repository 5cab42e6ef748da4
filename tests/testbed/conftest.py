"""Every testbed test gets a private state dir (so `down()` without an id never touches anyone else's
runs) and, when it asks for one, a unique run id whose testbed is taken down in teardown even when
the test fails."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from geryon.testbed import down, state


@pytest.fixture(autouse=True)
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "testbed-state"
    monkeypatch.setenv(state.ENV, str(d))
    return d


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = "t" + secrets.token_hex(4)
    yield rid
    if os.geteuid() == 0:
        down(rid)
