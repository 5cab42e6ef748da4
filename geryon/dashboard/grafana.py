"""House-style helpers over Grafana's foundation SDK (`grafana_foundation_sdk`, the cog-generated builders
and models of Grafana 11.3's dashboard schema).

A dashboard is a list of rows, each a list of panels (SDK panel builders) with a width (of Grafana's 24
columns) and a height; `dashboard()` lays them out (left to right, wrapping before a panel that does not
fit, each row below the last) and numbers them, so no two panels ever overlap and ids are unique. The
SDK's own `Dashboard.with_panel` layout only wraps after a line overflows, so a panel that does not fit
would stick out of the grid. Every panel and query uses the `${datasource}` template variable.
`render()` gives the stable text committed to the repository: sorted keys, two-space indent, a trailing
newline and nothing that changes between runs.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as mc
from grafana_foundation_sdk.models import dashboard as md
from grafana_foundation_sdk.models import prometheus as mp

GRID_COLUMNS = 24
SCHEMA_VERSION = 39  # Grafana 10.3-11.x read it as is; newer versions migrate it on load
DATASOURCE_VARIABLE = "datasource"
# Keys Grafana writes that the SDK's models lack: the text of a query variable's query, which Grafana's
# Prometheus variable editor stores beside the query object and the variables list shows.
SCHEMA_EXTRAS = {"templating.list[].definition"}


class DashboardError(ValueError):
    """A builder got a value Grafana cannot show; the message names the field."""


def _datasource() -> md.DataSourceRef:
    return md.DataSourceRef(type_val="prometheus", uid="${" + DATASOURCE_VARIABLE + "}")


@dataclass(frozen=True)
class Panel:
    """A panel before layout: its size and its SDK builder (without id and grid position)."""

    w: int
    h: int
    builder: Builder[md.Panel]

    def __post_init__(self) -> None:
        title = self.builder.build().title or "?"
        if not 1 <= self.w <= GRID_COLUMNS:
            raise DashboardError(f"panel {title!r}: w={self.w}; allowed 1-{GRID_COLUMNS} grid columns")
        if self.h < 1:
            raise DashboardError(f"panel {title!r}: h={self.h}; must be at least 1")


@dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[Panel] = field(default_factory=tuple)


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> gp.Dataquery:
    """One Prometheus query; refId is set by the panel (A, B, ... in order)."""
    if not expr.strip():
        raise DashboardError("target: expr is empty")
    q = (
        gp.Dataquery()
        .datasource(_datasource())
        .editor_mode(mp.QueryEditorMode.CODE)
        .expr(expr)
        .format(mp.PromQueryFormat.TABLE if table else mp.PromQueryFormat.TIME_SERIES)
        .legend_format(legend or "__auto")
    )
    return q.instant() if instant else q.range()


def _panel(
    builder: gts.Panel | gstat.Panel | gtable.Panel,
    title: str,
    description: str,
    targets: Sequence[gp.Dataquery],
    w: int,
    h: int,
) -> Panel:
    """Title, description, datasource and the queries (refIds A, B, ...) on an SDK panel builder."""
    if not title:
        raise DashboardError("panel: title is empty")
    if not targets:
        raise DashboardError(f"panel {title!r}: targets is empty; give at least one query")
    if len(targets) > len(string.ascii_uppercase):
        raise DashboardError(f"panel {title!r}: {len(targets)} targets; at most 26")
    builder.title(title).description(description).datasource(_datasource())
    builder.targets([t.ref_id(string.ascii_uppercase[i]) for i, t in enumerate(targets)])
    return Panel(w, h, builder)


def thresholds(*steps: tuple[str, float | None]) -> gd.ThresholdsConfig:
    """Absolute colour steps; the first step's value must be None (the base colour)."""
    if not steps or steps[0][1] is not None:
        raise DashboardError("thresholds: the first step is the base colour and takes value None")
    return (
        gd.ThresholdsConfig()
        .mode(md.ThresholdsMode.ABSOLUTE)
        .steps([md.Threshold(value=v, color=c) for c, v in steps])
    )


def override(name: str, **properties: Any) -> gd.DashboardFieldConfigSourceOverrides:
    """Field override for the field (or series) displayed as `name`: unit=..., thresholds=..., etc."""
    values = [
        md.DynamicConfigValue(id_val=k, value=v.build() if isinstance(v, Builder) else v)
        for k, v in sorted(properties.items())
    ]
    return (
        gd.DashboardFieldConfigSourceOverrides()
        .matcher(md.MatcherConfig(id_val="byName", options=name))
        .properties(values)
    )


def timeseries(
    title: str,
    targets: Sequence[gp.Dataquery],
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
    p = (
        gts.Panel()
        .unit(unit)
        .color_scheme(gd.FieldColor().mode(md.FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(mc.GraphDrawStyle.LINE)
        .line_interpolation(mc.LineInterpolation.STEP_AFTER if steps else mc.LineInterpolation.LINEAR)
        .line_width(1)
        .fill_opacity(20 if stack else 10)
        .show_points(mc.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(
            gc.StackingConfig().group("A").mode(mc.StackingMode.NORMAL if stack else mc.StackingMode.NONE)
        )
        .overrides([])
        .legend(
            gc.VizLegendOptions()
            .calcs(["lastNotNull", "max"])
            .display_mode(mc.LegendDisplayMode.TABLE)
            .placement(mc.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(gc.VizTooltipOptions().mode(mc.TooltipDisplayMode.MULTI).sort(mc.SortOrder.DESCENDING))
    )
    if min_value is not None:
        p.min(min_value)
    if max_value is not None:
        p.max(max_value)
    return _panel(p, title, description, targets, w, h)


def stat(
    title: str,
    targets: Sequence[gp.Dataquery],
    *,
    unit: str = "none",
    description: str = "",
    colors: gd.ThresholdsConfig | None = None,
    mappings: Sequence[md.ValueMapping] = (),
    overrides: Sequence[gd.DashboardFieldConfigSourceOverrides] = (),
    w: int = 4,
    h: int = 4,
) -> Panel:
    """A stat panel showing each series' value now, its background coloured by `colors` (thresholds()).
    Its queries are instant: a stat shows one value, so a range query every refresh would be wasted."""
    p = (
        gstat.Panel()
        .unit(unit)
        .color_scheme(gd.FieldColor().mode(md.FieldColorModeId.THRESHOLDS))
        .thresholds(colors or thresholds(("green", None)))
        .mappings(list(mappings))
        .overrides(list(overrides))
        .color_mode(mc.BigValueColorMode.BACKGROUND)
        .graph_mode(mc.BigValueGraphMode.NONE)
        .justify_mode(mc.BigValueJustifyMode.AUTO)
        .orientation(mc.VizOrientation.AUTO)
        .reduce_options(gc.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .text_mode(mc.BigValueTextMode.VALUE_AND_NAME)
    )
    return _panel(p, title, description, [t.instant() for t in targets], w, h)


def table(
    title: str,
    targets: Sequence[gp.Dataquery],
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
    p = (
        gtable.Panel()
        .align(mc.FieldTextAlignment.AUTO)
        .cell_options(mc.TableAutoCellOptions())
        .overrides([override(col, unit=unit) for col, unit in sorted((units or {}).items())])
        .show_header(True)
        .cell_height(mc.TableCellHeight.SM)
        .footer(gc.TableFooterOptions().show(False))
    )
    panel = _panel(p, title, description, targets, w, h)
    refs = [t.build() for t in targets]  # with the refIds _panel gave them
    for t in refs:
        if t.format_val != mp.PromQueryFormat.TABLE or not t.instant:
            raise DashboardError(f"panel {title!r}: target {t.ref_id} must be an instant table query")
    values = {f"Value #{t.ref_id}" for t in refs}
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
    p.transformations(
        [
            md.DataTransformerConfig(id_val="merge", options={}),
            md.DataTransformerConfig(id_val="organize", options=organize),
        ]
    )
    return panel


def datasource_variable(default_uid: str, label: str = "Data source") -> md.VariableModel:
    """The `datasource` variable every panel and query refers to: any Prometheus data source."""
    return md.VariableModel(
        type_val=md.VariableType.DATASOURCE,
        name=DATASOURCE_VARIABLE,
        label=label,
        query="prometheus",
        current=md.VariableOption(text=default_uid, value=default_uid),
        hide=md.VariableHide.DONT_HIDE,
        include_all=False,
        multi=False,
        options=[],
        refresh=md.VariableRefresh.ON_DASHBOARD_LOAD,
        regex="",
    )


@dataclass(frozen=True)
class QueryVariable:
    """A Prometheus query variable: the SDK's model plus the `definition` text its schema lacks."""

    model: md.VariableModel
    definition: str


def query_variable(
    name: str, label: str, definition: str, *, multi: bool = True, include_all: bool = True
) -> QueryVariable:
    """A Prometheus query variable (`label_values(selector, label)` and the like), refreshed when the time
    range changes, sorted, with All matching every value (`.*`) rather than a long alternation."""
    if not name.isidentifier():
        raise DashboardError(f"variable {name!r}: name must be letters, digits and _")
    model = md.VariableModel(
        type_val=md.VariableType.QUERY,
        name=name,
        label=label,
        datasource=_datasource(),
        query={"qryType": 1, "query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        current=md.VariableOption(text=["All"], value=["$__all"]) if include_all else None,
        hide=md.VariableHide.DONT_HIDE,
        include_all=include_all,
        all_value=".*" if include_all else None,
        multi=multi,
        options=[],
        refresh=md.VariableRefresh.ON_TIME_RANGE_CHANGED,
        regex="",
        sort=md.VariableSort.ALPHABETICAL_ASC,
    )
    return QueryVariable(model, definition)


def layout(rows: Sequence[Row]) -> list[md.Panel | md.RowPanel]:
    """Each row's header at full width, its panels left to right below it, wrapping to a new line when the
    next does not fit in 24 columns; ids count up from 1 in that order."""
    out: list[md.Panel | md.RowPanel] = []
    y = 0
    for row in rows:
        header = gd.Row(row.title).collapsed(False).id(len(out) + 1)
        out.append(header.grid_pos(md.GridPos(x=0, y=y, w=GRID_COLUMNS, h=1)).build())
        y += 1
        x = line_h = 0
        for p in row.panels:
            if x + p.w > GRID_COLUMNS:
                y, x, line_h = y + line_h, 0, 0
            panel = p.builder.build()
            panel.id_val = len(out) + 1
            panel.grid_pos = md.GridPos(x=x, y=y, w=p.w, h=p.h)
            out.append(panel)
            x += p.w
            line_h = max(line_h, p.h)
        y += line_h
    return out


def encode(obj: Any) -> Any:
    """An SDK model (or anything holding them) as plain JSON values, through the SDK's encoder."""
    return json.loads(json.dumps(obj, cls=JSONEncoder))


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    tags: Sequence[str],
    rows: Sequence[Row],
    variables: Sequence[md.VariableModel | QueryVariable],
    refresh: str = "5s",
    time_from: str = "now-15m",
) -> dict[str, Any]:
    """The dashboard as JSON values: the SDK's model, encoded, plus the SCHEMA_EXTRAS it cannot hold."""
    if not uid or len(uid) > 40:
        raise DashboardError(f"uid: {uid!r}; Grafana allows 1-40 characters")
    models = [v.model if isinstance(v, QueryVariable) else v for v in variables]
    names = [v.name for v in models]
    if len(set(names)) != len(names):
        raise DashboardError(f"variables: a name appears twice in {names}")
    board = (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(list(tags))
        .editable()
        .tooltip(md.DashboardCursorSync.CROSSHAIR)  # shared crosshair: the same instant in every panel
        .links([])
        .refresh(refresh)
        .time(time_from, "now")
        .timepicker(gd.TimePicker())
        .timezone("")
        .version(1)
        .build()
    )
    board.schema_version = SCHEMA_VERSION
    board.panels = layout(rows)
    board.templating = md.DashboardDashboardTemplating(list_val=models)
    out: dict[str, Any] = encode(board)
    for v, encoded in zip(variables, out["templating"]["list"], strict=True):
        if isinstance(v, QueryVariable):
            encoded["definition"] = v.definition
    return out


def render(board: Mapping[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline (same dict -> same bytes)."""
    return json.dumps(board, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
