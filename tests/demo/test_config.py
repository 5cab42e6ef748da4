"""geryon.demo.config: overrides are validated, unknown keys and modes refused (naming the flag)."""

from __future__ import annotations

import pytest

from geryon.demo import config
from geryon.errors import UsageError


def test_overrides_are_validated_and_unknown_keys_refused() -> None:
    assert config.make_config({"steps": 3, "model": None})["steps"] == 3
    with pytest.raises(UsageError, match="unknown key 'stepz'"):
        config.make_config({"stepz": 3})
    with pytest.raises(UsageError, match="--batch-size 0"):
        config.make_config({"batch_size": 0})
    with pytest.raises(UsageError, match=r"--search 'fixed:1\.5'"):
        config.make_config({"search": "fixed:1.5"})


def test_an_unknown_mode_names_the_flag_and_what_is_allowed() -> None:
    with pytest.raises(
        UsageError, match=r"--modes: unknown mode 'hybrid'; allowed: vanilla, ps, geryon, paper"
    ):
        config.make_config({"modes": "geryon,hybrid"})
