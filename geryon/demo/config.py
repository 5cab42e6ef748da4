"""The demo's config: DEFAULTS (+ QUICK) + overrides, every knob validated (UsageError naming its
flag), and the configs of `geryon bench` (the product of its list-valued knobs).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from geryon.cluster.models import ModelError, check_model
from geryon.demo import modes as modes_mod
from geryon.demo.defaults import APIS, BACKGROUND_SHARE, CLASS_DSCP, DEFAULTS, PROFILE_SOURCES, QUICK
from geryon.demo.secondjob import parse as parse_second_job
from geryon.errors import UsageError
from geryon.threshold.simknobs import CHUNK_MAX, CHUNK_MIN


def make_config(overrides: dict[str, Any] | None = None, quick: bool = False) -> dict[str, Any]:
    """DEFAULTS (+ QUICK) + overrides (None values ignored), validated; UsageError names the knob."""
    cfg = dict(DEFAULTS)
    if quick:
        cfg.update(QUICK)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise UsageError(f"config: unknown key {key!r}; allowed: {', '.join(sorted(DEFAULTS))}")
        if value is not None:
            cfg[key] = value
    return validate(cfg)


def _int(cfg: dict[str, Any], key: str, flag: str, low: int, high: int) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{flag} {value!r}: expected an integer in {low}..{high}")
    return value


def validate(cfg: dict[str, Any]) -> dict[str, Any]:
    """Checks every knob (UsageError naming its flag); returns the config with derived fields."""
    cfg = dict(cfg)
    try:
        shape = check_model(cfg["model"], tuple(cfg["input_shape"]) if cfg["input_shape"] else None)
    except ModelError as e:
        raise UsageError(str(e)) from None
    cfg["input_shape"] = list(shape)
    _int(cfg, "batch_size", "--batch-size", 1, 4096)
    _int(cfg, "workers", "--workers", 1, 16)
    _int(cfg, "ps", "--ps", 1, 16)
    _int(cfg, "rate_bits", "--rate", 1_000_000, 10_000_000_000)
    _int(cfg, "buffer_bytes", "--buffer", 4096, 256 * 1024 * 1024)
    _int(cfg, "slice_bytes", "--slice-size", 1024, 1 << 34)
    _int(cfg, "chunk_bytes", "--chunk-size", CHUNK_MIN, CHUNK_MAX)
    _int(cfg, "classes", "--classes", 2, len(CLASS_DSCP))
    _int(cfg, "steps", "--steps", 1, 100_000)
    _int(cfg, "warmup", "--warmup", 1, 1000)
    _int(cfg, "repeats", "--repeats", 1, 100)
    _int(cfg, "search_budget", "--search-budget", 2, 1000)
    _int(cfg, "search_repeats", "search_repeats", 1, 20)
    _int(cfg, "search_points", "--search-points", 3, 100)
    _int(cfg, "threads", "--threads", 1, 64)
    _int(cfg, "settle_rounds", "--settle", 0, 10)
    if cfg["background_bits"] is None:
        cfg["background_bits"] = int(cfg["rate_bits"] * BACKGROUND_SHARE)
    if cfg["background_bits"] != 0:
        _int(cfg, "background_bits", "--background", 1_000_000, cfg["rate_bits"])
    if cfg["profile_source"] not in PROFILE_SOURCES:
        raise UsageError(
            f"--profile-source {cfg['profile_source']!r}: expected one of {', '.join(PROFILE_SOURCES)}"
        )
    if cfg["ps_costs"] is not None and str(cfg["ps_costs"]).strip().lower() in ("none", "off"):
        cfg["ps_costs"] = "none"  # no PS costs (geryon.demo.pscosts.NONE_WORDS)
    elif cfg["ps_costs"] is not None:
        from geryon.threshold.calibration import CalibrationError, load_knobs

        try:
            load_knobs(cfg["ps_costs"])
        except CalibrationError as e:
            raise UsageError(f"--ps-costs: {e}") from None
        cfg["ps_costs"] = str(cfg["ps_costs"])
    if cfg["incast"] is not None and str(cfg["incast"]).strip().lower() in ("none", "off"):
        cfg["incast"] = "none"
    elif cfg["incast"] is not None:
        from geryon.demo.predict import IncastError, load_incast

        try:
            load_incast(Path(cfg["incast"]))
        except IncastError as e:
            raise UsageError(f"--incast: {e}") from None
        cfg["incast"] = str(cfg["incast"])
    check_api(cfg)
    cfg["second_job"] = parse_second_job(cfg["second_job"])
    cfg["modes"] = list(modes_mod.parse_modes(cfg["modes"]))
    search = modes_mod.parse_search(str(cfg["search"]), cfg["classes"])
    cfg["search"] = search.label()
    check_search_chunk(cfg, search.strategy)
    return cfg


def check_search_chunk(cfg: dict[str, Any], strategy: str) -> None:
    """search_chunk: a bool, and only with a search whose searcher takes chunk_sizes (every one of the
    demo's but fixed, which sets nothing: geryon.threshold.search's OPTIONS say which)."""
    value = cfg.get("search_chunk", False)
    if not isinstance(value, bool):
        raise UsageError(f"--search-chunk: expected true or false, got {value!r}")
    if not value:
        return
    from geryon.threshold.search import SEARCHERS  # only here: validating a config needs no searcher

    takes = [s for s in modes_mod.SEARCHES if "chunk_sizes" in SEARCHERS[s].OPTIONS]
    if strategy not in takes:
        raise UsageError(
            f"--search-chunk: the {strategy!r} search sets no chunk size; use --search "
            f"{' or '.join(takes)} to search the chunk size with the thresholds"
        )


def check_api(cfg: dict[str, Any]) -> None:
    """--api and --steps-per-execution: the fit path trains only the models with a tf_keras twin."""
    from geryon.cluster.models import FIT_MODELS

    if cfg["api"] not in APIS:
        raise UsageError(f"--api {cfg['api']!r}: expected one of {', '.join(APIS)}")
    spe = _int(cfg, "steps_per_execution", "--steps-per-execution", 1, 1000)
    if cfg["api"] == "custom" and spe != 1:
        raise UsageError(f"--steps-per-execution {spe}: only --api fit runs more than one step per function")
    if cfg["api"] == "fit" and cfg["model"] not in FIT_MODELS:
        raise UsageError(f"--model {cfg['model']!r}: --api fit trains one of {', '.join(FIT_MODELS)}")


BENCH_LISTS = ("workers", "ps", "rate_bits", "buffer_bytes", "slice_bytes", "classes")


def bench_configs(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The product of the list-valued knobs (BENCH_LISTS), each validated."""
    lists = {
        k: (config[k] if isinstance(config.get(k), list | tuple) else [config.get(k, DEFAULTS[k])])
        for k in BENCH_LISTS
    }
    out = []
    for combo in itertools.product(*(lists[k] for k in BENCH_LISTS)):
        cfg = {**DEFAULTS, **config, **dict(zip(BENCH_LISTS, combo, strict=True))}
        out.append(validate(cfg))
    return out
