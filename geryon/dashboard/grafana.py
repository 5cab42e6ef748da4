"""Small builders for Grafana dashboard JSON (plain dicts, no grafanalib).

A dashboard is a list of rows, each a list of panels with a width (of Grafana's 24 columns) and a height;
`dashboard()` lays them out (left to right, wrapping, each row below the last) and numbers them, so no two
panels ever overlap and ids are unique. Every panel and query uses the `${datasource}` template variable.
`render()` gives the stable text committed to the repository: sorted keys, two-space indent, a trailing
newline and nothing that changes between runs.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GRID_COLUMNS = 24
SCHEMA_VERSION = 39  # Grafana 10.3-11.x read it as is; newer versions migrate it on load
DATASOURCE_VARIABLE = "datasource"
DATASOURCE = {"type": "prometheus", "uid": "${" + DATASOURCE_VARIABLE + "}"}


class DashboardError(ValueError):
    """A builder got a value Grafana cannot show; the message names the field."""


@dataclass(frozen=True)
class Panel:
    """A panel before layout: its size and its JSON without id and gridPos."""

    w: int
    h: int
    body: Mapping[str, Any]

    def __post_init__(self) -> None:
        title = self.body.get("title", "?")
        if not 1 <= self.w <= GRID_COLUMNS:
            raise DashboardError(f"panel {title!r}: w={self.w}; allowed 1-{GRID_COLUMNS} grid columns")
        if self.h < 1:
            raise DashboardError(f"panel {title!r}: h={self.h}; must be at least 1")


@dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[Panel] = field(default_factory=tuple)


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> dict[str, Any]:
    """One Prometheus query; refId is set by the panel (A, B, ... in order)."""
    if not expr.strip():
        raise DashboardError("target: expr is empty")
    return {
        "datasource": dict(DATASOURCE),
        "editorMode": "code",
        "expr": expr,
        "format": "table" if table else "time_series",
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
    }


def _with_ref_ids(targets: Sequence[Mapping[str, Any]], title: str) -> list[dict[str, Any]]:
    if not targets:
        raise DashboardError(f"panel {title!r}: targets is empty; give at least one query")
    if len(targets) > len(string.ascii_uppercase):
        raise DashboardError(f"panel {title!r}: {len(targets)} targets; at most 26")
    return [{**t, "refId": string.ascii_uppercase[i]} for i, t in enumerate(targets)]


def _panel(
    kind: str,
    title: str,
    description: str,
    targets: Sequence[Mapping[str, Any]],
    field_config: dict[str, Any],
    options: dict[str, Any],
    w: int,
    h: int,
    **extra: Any,
) -> Panel:
    if not title:
        raise DashboardError("panel: title is empty")
    body = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": dict(DATASOURCE),
        "targets": _with_ref_ids(targets, title),
        "fieldConfig": field_config,
        "options": options,
        **extra,
    }
    return Panel(w, h, body)


def thresholds(*steps: tuple[str, float | None]) -> dict[str, Any]:
    """Absolute colour steps; the first step's value must be None (the base colour)."""
    if not steps or steps[0][1] is not None:
        raise DashboardError("thresholds: the first step is the base colour and takes value None")
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def override(name: str, **properties: Any) -> dict[str, Any]:
    """Field override for the field (or series) displayed as `name`: unit=..., displayName=..., etc."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k, "value": v} for k, v in sorted(properties.items())],
    }


def timeseries(
    title: str,
    targets: Sequence[Mapping[str, Any]],
    *,
    unit: str,
    description: str = "",
    w: int = 12,
    h: int = 8,
    min_value: float | None = None,
    max_value: float | None = None,
    steps: bool = False,
    stack: bool = False,
) -> Panel:
    """A time series panel. `steps`: draw values as steps (thresholds, counts), not interpolated lines."""
    defaults: dict[str, Any] = {
        "unit": unit,
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line",
            "lineInterpolation": "stepAfter" if steps else "linear",
            "lineWidth": 1,
            "fillOpacity": 20 if stack else 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        },
    }
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    options = {
        "legend": {
            "calcs": ["lastNotNull", "max"],
            "displayMode": "table",
            "placement": "bottom",
            "showLegend": True,
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel(
        "timeseries", title, description, targets, {"defaults": defaults, "overrides": []}, options, w, h
    )


def stat(
    title: str,
    targets: Sequence[Mapping[str, Any]],
    *,
    unit: str = "none",
    description: str = "",
    colors: Mapping[str, Any] | None = None,
    mappings: Sequence[Mapping[str, Any]] = (),
    overrides: Sequence[Mapping[str, Any]] = (),
    w: int = 4,
    h: int = 4,
) -> Panel:
    """A stat panel showing each series' value now, its background coloured by `colors` (thresholds()).
    Its queries are instant: a stat shows one value, so a range query every refresh would be wasted."""
    defaults = {
        "unit": unit,
        "color": {"mode": "thresholds"},
        "thresholds": colors or thresholds(("green", None)),
        "mappings": list(mappings),
    }
    options = {
        "colorMode": "background",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "textMode": "value_and_name",
    }
    field_config = {"defaults": defaults, "overrides": list(overrides)}
    instant = [{**t, "instant": True, "range": False} for t in targets]
    return _panel("stat", title, description, instant, field_config, options, w, h)


def table(
    title: str,
    targets: Sequence[Mapping[str, Any]],
    *,
    columns: Mapping[str, str],
    units: Mapping[str, str] | None = None,
    description: str = "",
    w: int = 24,
    h: int = 8,
) -> Panel:
    """A table of instant queries (format table), merged into one row per label set. `columns` maps the
    fields to keep (labels, and `Value #<refId>` for each query's value) to their column titles, in
    order; the queries should aggregate `by` exactly the label columns, as only Time is hidden. `units`
    maps a column title to its unit."""
    refs = _with_ref_ids(targets, title)
    for t in refs:
        if t.get("format") != "table" or not t.get("instant"):
            raise DashboardError(f"panel {title!r}: target {t['refId']} must be an instant table query")
    values = {f"Value #{t['refId']}" for t in refs}
    missing = sorted(values - set(columns))
    if missing:
        raise DashboardError(f"panel {title!r}: columns has no title for {', '.join(missing)}")
    unknown = sorted(set(units or {}) - set(columns.values()))
    if unknown:
        raise DashboardError(f"panel {title!r}: units names unknown columns {', '.join(unknown)}")
    organize = {
        "excludeByName": {"Time": True},
        "indexByName": {name: i for i, name in enumerate(columns)},
        "renameByName": dict(columns),
    }
    transformations = [{"id": "merge", "options": {}}, {"id": "organize", "options": organize}]
    field_config = {
        "defaults": {"custom": {"align": "auto", "cellOptions": {"type": "auto"}}},
        "overrides": [override(col, unit=unit) for col, unit in sorted((units or {}).items())],
    }
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    return _panel(
        "table", title, description, targets, field_config, options, w, h, transformations=transformations
    )


def datasource_variable(default_uid: str, label: str = "Data source") -> dict[str, Any]:
    """The `datasource` variable every panel and query refers to: any Prometheus data source."""
    return {
        "name": DATASOURCE_VARIABLE,
        "label": label,
        "type": "datasource",
        "query": "prometheus",
        "current": {"text": default_uid, "value": default_uid},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def query_variable(
    name: str, label: str, definition: str, *, multi: bool = True, include_all: bool = True
) -> dict[str, Any]:
    """A Prometheus query variable (`label_values(selector, label)` and the like), refreshed when the time
    range changes, sorted, with All matching every value (`.*`) rather than a long alternation."""
    if not name.isidentifier():
        raise DashboardError(f"variable {name!r}: name must be letters, digits and _")
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DATASOURCE),
        "definition": definition,
        "query": {"qryType": 1, "query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "current": {"text": ["All"], "value": ["$__all"]} if include_all else {},
        "hide": 0,
        "includeAll": include_all,
        "allValue": ".*" if include_all else None,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
    }


def layout(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Each row's header at full width, its panels left to right below it, wrapping to a new line when the
    next does not fit in 24 columns; ids count up from 1 in that order."""
    out: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        out.append(
            {
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "panels": [],
                "id": len(out) + 1,
                "gridPos": {"x": 0, "y": y, "w": GRID_COLUMNS, "h": 1},
            }
        )
        y += 1
        x = line_h = 0
        for p in row.panels:
            if x + p.w > GRID_COLUMNS:
                y, x, line_h = y + line_h, 0, 0
            out.append({**p.body, "id": len(out) + 1, "gridPos": {"x": x, "y": y, "w": p.w, "h": p.h}})
            x += p.w
            line_h = max(line_h, p.h)
        y += line_h
    return out


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    tags: Sequence[str],
    rows: Sequence[Row],
    variables: Sequence[Mapping[str, Any]],
    refresh: str = "5s",
    time_from: str = "now-15m",
) -> dict[str, Any]:
    if not uid or len(uid) > 40:
        raise DashboardError(f"uid: {uid!r}; Grafana allows 1-40 characters")
    names = [v["name"] for v in variables]
    if len(set(names)) != len(names):
        raise DashboardError(f"variables: a name appears twice in {names}")
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(tags),
        "editable": True,
        "graphTooltip": 1,  # shared crosshair: the same instant in every panel
        "links": [],
        "panels": layout(rows),
        "refresh": refresh,
        "schemaVersion": SCHEMA_VERSION,
        "templating": {"list": [dict(v) for v in variables]},
        "time": {"from": time_from, "to": "now"},
        "timepicker": {},
        "timezone": "",
        "version": 1,
    }


def render(board: Mapping[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline (same dict -> same bytes)."""
    return json.dumps(board, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
