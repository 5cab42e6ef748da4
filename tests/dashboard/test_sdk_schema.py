"""The committed dashboard JSON against Grafana's own schema, as the foundation SDK's generated models carry
it (grafana_foundation_sdk: cog-generated from Grafana 11.3's dashboard, panel and Prometheus query
schemas), not against anything this repository wrote.

Two checks: (1) decoding the file through the SDK (`Dashboard.from_json`, with its panel and query plugins
registered) and encoding it again gives the same JSON: `from_json` drops every key its models lack, so
nothing is left out but the one known extra (SCHEMA_EXTRAS); (2) every decoded value has the type the
model's annotations give its field: enums (draw style, legend mode, variable refresh, ...) are members,
strings, numbers and booleans are what the schema says, and every panel type and query is one the SDK
knows (no UnknownDataquery, no panel without its options model).
"""

from __future__ import annotations

import copy
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog import plugins, runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import dashboard as md
from grafana_foundation_sdk.models import prometheus as mp

from geryon.dashboard import flow_priorities
from geryon.dashboard.grafana import SCHEMA_EXTRAS

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "deploy" / "grafana" / "dashboards" / "geryon-flow-priorities.json"

plugins.register_default_plugins()  # panel options/fieldConfig and Prometheus query decoders


def _is_model(obj: Any) -> bool:
    return type(obj).__module__.startswith("grafana_foundation_sdk.models.")


def roundtrip(board: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(md.Dashboard.from_json(board), cls=JSONEncoder))


def lost_keys(before: Any, after: Any, path: str = "") -> set[str]:
    """Paths (list indices as []) of keys in `before` that `after` lacks or holds differently."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: set[str] = set()
        for k, v in before.items():
            p = f"{path}.{k}" if path else k
            out |= {p} if k not in after else lost_keys(v, after[k], p)
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return set().union(*(lost_keys(b, a, f"{path}[]") for b, a in zip(before, after, strict=True)))
    return set() if before == after else {path}


def type_errors(value: Any, hint: Any, path: str) -> list[str]:
    """Where `value` (decoded by the SDK) does not have the type `hint` from an SDK model's annotations."""
    origin = typing.get_origin(hint)
    if hint is typing.Any or hint is object:
        return model_errors(value, path) if _is_model(value) else []
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return []
        results = [type_errors(value, h, path) for h in options if h is not type(None)]
        return [] if any(not r for r in results) else min(results, key=len)
    if origin is typing.Literal:
        return [] if value in typing.get_args(hint) else [f"{path}: {value!r} not in {typing.get_args(hint)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, expected a list"]
        (item,) = typing.get_args(hint)
        return [e for i, v in enumerate(value) for e in type_errors(v, item, f"{path}[{i}]")]
    if origin is dict:
        return [] if isinstance(value, dict) else [f"{path}: {type(value).__name__}, expected an object"]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        members = {m.value for m in hint}
        return [] if value in members else [f"{path}: {value!r} is no {hint.__name__} ({sorted(members)})"]
    if hint is Dataquery:
        if not isinstance(value, mp.Dataquery):
            return [f"{path}: {type(value).__name__}, not a query of a data source the SDK knows"]
        return model_errors(value, path)
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: {value!r}, expected a boolean"]
    if hint in (int, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and (hint is float or float(value).is_integer())
        return [] if ok else [f"{path}: {value!r}, expected {hint.__name__}"]
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: {value!r}, expected a string"]
    if isinstance(hint, type) and hint.__module__.startswith("grafana_foundation_sdk.models."):
        if isinstance(value, dict):  # a field from_json leaves undecoded (transformations, links)
            decoded = hint.from_json(value)
            lost = lost_keys(value, json.loads(json.dumps(decoded, cls=JSONEncoder)))
            return [f"{path}.{k}: not in {hint.__name__}" for k in sorted(lost)] + model_errors(decoded, path)
        if not isinstance(value, hint):
            return [f"{path}: {type(value).__name__}, expected {hint.__name__}"]
        return model_errors(value, path)
    raise AssertionError(f"{path}: the test cannot check hint {hint!r}")


def model_errors(obj: Any, path: str) -> list[str]:
    hints = typing.get_type_hints(type(obj))
    return [
        e for name, hint in hints.items() for e in type_errors(getattr(obj, name), hint, f"{path}.{name}")
    ]


def schema_errors(board: dict[str, Any]) -> list[str]:
    errors = [
        f"{k}: not in the SDK's models" for k in sorted(lost_keys(board, roundtrip(board)) - SCHEMA_EXTRAS)
    ]
    model = md.Dashboard.from_json(board)
    for p in model.panels or []:
        if isinstance(p, md.Panel):
            config = runtime.panelcfg_config(p.type_val)
            if config is None or not _is_model(p.options):
                errors.append(f"panel {p.title!r}: type {p.type_val!r} has no options model in the SDK")
    return errors + model_errors(model, "dashboard")


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert board == flow_priorities()  # the file is what the code generates (test_grafana.py says so too)
    return board


def test_the_sdk_reads_back_every_key_but_the_known_extras(committed: dict[str, Any]) -> None:
    lost = lost_keys(committed, roundtrip(committed))
    # Exactly the extras: if the SDK learns `definition`, SCHEMA_EXTRAS (and grafana.py's patch) can go.
    assert lost == SCHEMA_EXTRAS
    assert all(
        v["definition"] == v["query"]["query"] for v in committed["templating"]["list"] if "definition" in v
    )


def test_every_value_has_the_type_the_sdk_models_give_it(committed: dict[str, Any]) -> None:
    assert schema_errors(committed) == []
    model = md.Dashboard.from_json(committed)
    kinds = {p.type_val for p in model.panels or []}
    assert kinds == {"row", "stat", "timeseries", "table"}
    queries = [t for p in model.panels or [] if isinstance(p, md.Panel) for t in p.targets or []]
    assert queries and all(isinstance(t, mp.Dataquery) for t in queries)


@pytest.mark.parametrize(
    ("path", "bad", "error"),
    [
        (
            ("panels", 9, "fieldConfig", "defaults", "custom", "lineInterpolaton"),
            "linear",
            "lineInterpolaton",
        ),
        (("panels", 9, "fieldConfig", "defaults", "custom", "drawStyle"), "lines", "GraphDrawStyle"),
        (("panels", 1, "options", "colorMode"), "backround", "BigValueColorMode"),
        (("panels", 9, "targets", 0, "format"), "timeseries", "PromQueryFormat"),
        (("panels", 9, "gridPos", "w"), "12", "expected int"),
        (("panels", 14, "transformations", 0, "option"), {}, "not in DataTransformerConfig"),
        (("templating", "list", 1, "refresh"), 3, "VariableRefresh"),
        (("graphTooltip",), 3, "DashboardCursorSync"),
        (("panels", 9, "datasource", "type"), "influxdb", "not a query of a data source"),
        (("panels", 9, "type"), "timeseriez", "has no options model"),
    ],
)
def test_the_check_catches_what_grafana_would_not_read(
    committed: dict[str, Any], path: tuple[str | int, ...], bad: Any, error: str
) -> None:
    board = copy.deepcopy(committed)
    node: Any = board
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    errors = schema_errors(board)
    assert any(error in e for e in errors), errors
