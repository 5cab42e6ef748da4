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


def test_search_chunk_needs_a_search_that_takes_chunk_sizes() -> None:
    assert config.make_config({})["search_chunk"] is False
    for search in ("sweep", "guided", "bayes"):  # each one's searcher takes chunk_sizes
        assert config.make_config({"search": search, "search_chunk": True})["search_chunk"] is True
    with pytest.raises(UsageError, match=r"--search-chunk: the 'fixed' search sets no chunk size; use"):
        config.make_config({"search": "fixed:0.5", "search_chunk": True})
    with pytest.raises(UsageError, match="--search-chunk: expected true or false, got 'yes'"):
        config.make_config({"search": "guided", "search_chunk": "yes"})


def test_the_chiefs_spec_carries_the_chunk_candidates_only_when_asked() -> None:
    from geryon.demo import defaults, modes
    from geryon.threshold.joint import CHUNK_CANDIDATES

    cluster = {"ps": ["a:1"], "worker": ["b:1"], "chief": ["c:1"]}
    for asked, want in ((False, None), (True, list(CHUNK_CANDIDATES))):
        cfg = config.make_config({"search": "bayes", "search_chunk": asked})
        spec = defaults.chief_spec(cfg, modes.mode("geryon"), cluster, None, False)
        assert spec["search"]["chunk_sizes"] == want
