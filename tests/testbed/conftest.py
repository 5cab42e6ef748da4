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


def leftovers(rid: str) -> list[str]:
    """What of run `rid` is still there: namespaces, state and lock files."""
    ns = (
        sorted(n for n in os.listdir("/run/netns") if n.startswith(f"gtb-{rid}-"))
        if os.path.isdir("/run/netns")
        else []
    )
    files = [p.name for p in state.state_dir().glob(f"{rid}.*")] if state.state_dir().is_dir() else []
    return ns + files


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and qdiscs need root")
