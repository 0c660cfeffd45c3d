"""Small typed builders for Grafana dashboard JSON (schema 39, Grafana 10/11).

Why our own ~150 lines instead of grafanalib or the Grafana Foundation SDK: the dashboards use six panel
kinds and one datasource; the committed JSON must stay stable and diff-able, and the builders exist only
so that every panel gets a unit, a description and the datasource variable by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
WIDTH = 24  # Grafana's grid is 24 columns wide


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False

    def to_json(self, ref_id: str) -> dict[str, Any]:
        return {
            "datasource": DATASOURCE,
            "refId": ref_id,
            "expr": self.expr,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "instant": self.instant,
            "format": "table" if self.instant else "time_series",
            "editorMode": "code",
        }


@dataclass
class Panel:
    """A panel; ``kind`` is Grafana's panel type (timeseries, stat, heatmap, bargauge, table, gauge)."""

    kind: str
    title: str
    description: str
    unit: str
    targets: list[PanelQuery]
    width: int = 12
    height: int = 8
    thresholds: list[tuple[float | None, str]] = field(default_factory=lambda: [(None, "green")])
    stacked: bool = False
    threshold_style: str = "off"  # timeseries: off | line | dashed | line+area | area
    mappings: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    custom: dict[str, Any] = field(default_factory=dict)
    min: float | None = None
    max: float | None = None

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        defaults: dict[str, Any] = {
            "unit": self.unit,
            "thresholds": {
                "mode": "absolute",
                "steps": [{"color": color, "value": value} for value, color in self.thresholds],
            },
            "mappings": self.mappings,
            "color": {"mode": "thresholds" if self.kind in ("stat", "gauge", "bargauge") else "palette-classic"},
        }
        if self.min is not None:
            defaults["min"] = self.min
        if self.max is not None:
            defaults["max"] = self.max
        if self.kind == "timeseries":
            defaults["custom"] = {
                "drawStyle": "line",
                "lineWidth": 1,
                "fillOpacity": 40 if self.stacked else 10,
                "showPoints": "never",
                "spanNulls": True,
                "stacking": {"mode": "normal" if self.stacked else "none", "group": "A"},
                "thresholdsStyle": {"mode": self.threshold_style},
                **self.custom,
            }
        elif self.custom:
            defaults["custom"] = dict(self.custom)
        options = {**_default_options(self.kind), **self.options}
        return {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options,
            "links": self.links,
            "targets": [t.to_json(chr(ord("A") + i)) for i, t in enumerate(self.targets)],
        }


def _default_options(kind: str) -> dict[str, Any]:
    if kind == "timeseries":
        return {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    if kind in ("stat", "gauge", "bargauge"):
        return {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "area",
            "orientation": "auto",
            "textMode": "auto",
        }
    if kind == "heatmap":
        return {
            # the data are already one series per layer: draw them as rows, don't bucket them again
            "calculate": False,
            "rowsFrame": {"layout": "auto"},
            "yAxis": {"axisPlacement": "left", "axisLabel": "layer"},
            "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5, "steps": 64},
            "cellGap": 1,
            "tooltip": {"mode": "single", "yHistogram": False},
            "legend": {"show": True},
        }
    if kind == "table":
        return {"showHeader": True, "cellHeight": "sm"}
    return {}


@dataclass
class Row:
    title: str
    panels: list[Panel]


@dataclass
class Variable:
    """A template variable; ``kind`` is datasource, query, custom or textbox."""

    name: str
    label: str
    kind: str
    query: str
    include_all: bool = False
    multi: bool = False
    default: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "type": self.kind, "hide": 0}
        if self.kind == "datasource":
            out.update(query=self.query, regex="", refresh=1, current={})
        elif self.kind == "query":
            out.update(
                datasource=DATASOURCE,
                definition=self.query,
                query={"query": self.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                refresh=2,  # on time-range change, so new jobs/instances appear without a reload
                sort=1,
                regex="",
                includeAll=self.include_all,
                multi=self.multi,
                # ".+" rather than Grafana's default enumerated regex: stays valid as targets come and go
                allValue=".+" if self.include_all else None,
                current={"selected": True, "text": ["All"], "value": ["$__all"]} if self.include_all else {},
            )
        elif self.kind == "textbox":
            out.update(query=self.default, current={"text": self.default, "value": self.default})
        return out


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    tags: list[str]
    variables: list[Variable]
    rows: list[Row]
    refresh: str = "30s"
    time_from: str = "now-3h"

    def to_json(self) -> dict[str, Any]:
        panels: list[dict[str, Any]] = []
        next_id, y = 1, 0
        for row in self.rows:
            panels.append({
                "id": next_id, "type": "row", "title": row.title, "collapsed": False, "panels": [],
                "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
            })
            next_id, y = next_id + 1, y + 1
            x, line_height = 0, 0
            for panel in row.panels:
                if x + panel.width > WIDTH:
                    x, y, line_height = 0, y + line_height, 0
                panels.append(panel.to_json(next_id, x, y))
                next_id += 1
                x += panel.width
                line_height = max(line_height, panel.height)
            y += line_height
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": self.tags,
            "editable": True,
            "graphTooltip": 1,  # shared crosshair: a KL spike lines up with the reward and loss panels
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "refresh": self.refresh,
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {},
            "timezone": "browser",
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                "type": "dashboard",
            }]},
            "templating": {"list": [v.to_json() for v in self.variables]},
            "links": [],
            "panels": panels,
        }


def standard_variables(anchor_metric: str) -> list[Variable]:
    """datasource, job and instance, chained so that job narrows instance."""
    return [
        Variable("datasource", "Data source", "datasource", "prometheus"),
        Variable("job", "Job", "query", f"label_values({anchor_metric}, job)", include_all=True, multi=True),
        Variable(
            "instance", "Instance", "query", f'label_values({anchor_metric}{{job=~"$job"}}, instance)',
            include_all=True, multi=True,
        ),
    ]


SEL = 'job=~"$job", instance=~"$instance"'


def zero_if_empty(expr: str, label: str | None = None) -> str:
    """An event query that shows 0 rather than 'No data' while nothing has happened yet."""
    if label is None:
        return f"({expr}) or on() vector(0)"
    return f'({expr}) or on() label_replace(vector(0), "{label}", "none", "", "")'


def rate(metric: str, selector: str = SEL, by: str = "") -> str:
    """Per-second rate over Grafana's $__rate_interval (at least four scrapes, whatever the zoom)."""
    agg = f"sum by ({by}) " if by else "sum "
    return f"{agg}(rate({metric}{{{selector}}}[$__rate_interval]))"
