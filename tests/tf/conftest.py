"""Fixtures shared by the TF tests."""

from __future__ import annotations

import pytest

from geryon.tf import sanitizers
from geryon.tf.build import build


@pytest.fixture(scope="module")
def native_built() -> None:
    """The extension, built once per module before its TF processes would race to build it.

    The variant a sanitizer run (test_sanitizers.py) loads: plain otherwise. A module opts in with
    `pytestmark = [..., pytest.mark.usefixtures("native_built")]`.
    """
    build(sanitizer=sanitizers.active())
