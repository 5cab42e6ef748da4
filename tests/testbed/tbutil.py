"""Helpers the testbed tests share (fixtures are in conftest.py)."""

from __future__ import annotations

import os

import pytest

from geryon.testbed import namespaces, state

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and qdiscs need root")


def leftovers(rid: str) -> list[str]:
    """What of run `rid` is still there: namespaces, state and lock files."""
    files = [p.name for p in state.state_dir().glob(f"{rid}.*")] if state.state_dir().is_dir() else []
    return namespaces.listed(f"gtb-{rid}-") + sorted(files)
