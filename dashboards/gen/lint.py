"""Dashboard linter: `python -m dashboards.gen.lint [FILE.json ...]` prints one problem per line, exit 1 if any.

Rules: a `datasource` template variable used by every panel (not only `${DS_...}` import inputs), `job`
and `instance` variables, a unit and a description on every panel, no panel without targets, every
rate()/irate()/increase() over `$__rate_interval`, and every metric name known — the trainer catalogue
(verl/metrics/catalog.py), dcgm-exporter's field list (dashboards/dcgm-fields.csv), verl's peers' names
(dashboards/peer-metrics.csv: vLLM, SGLang, Ray, node_exporter), the monitor's own metrics (cross-team
contract), a recording rule in prometheus/rules, or a Prometheus built-in.

Why a small tokenizer instead of a PromQL parser package: we only need the selector names, our queries
are our own, and `promtool check rules` (run by the tests on every query) is the real syntax check.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

# Monitor daemon's /metrics, fixed by the cross-team contract (histograms expose _bucket/_sum/_count).
MONITOR_METRICS = (
    "verl_monitor_samples_ingested_total", "verl_monitor_scrape_errors_total",
    "verl_monitor_scrape_duration_seconds", "verl_monitor_target_up", "verl_monitor_detector_eval_seconds",
    "verl_monitor_eval_lag_seconds", "verl_monitor_alerts_firing", "verl_monitor_series",
    "verl_monitor_series_dropped_total", "verl_alerting_outbox_depth", "verl_alerting_notifications_total",
    "verl_alerting_delivery_retries_total", "verl_alerting_incidents_total",
    "verl_alerting_template_failures_total", "verl_alerting_digests_total",
    "verl_monitor_heartbeat_timestamp_seconds", "verl_monitor_info",
)
MONITOR_HISTOGRAMS = ("verl_monitor_detector_eval_seconds",)
PROMETHEUS_BUILTINS = ("up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped")

KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset",
    "bool", "inf", "nan", "atan2", "start", "end",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_BRACES = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?!\w)(\s*\()?")
_RANGE_FUNCS = re.compile(r"\b(rate|irate|increase)\s*\(")
_GRAFANA_VARS = {
    "$__rate_interval": "1m", "$__interval": "30s", "$__range": "1h", "${__range}": "1h",
    "$__range_s": "3600", "$__interval_ms": "30000",
}


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects: identifiers that are not functions, keywords or labels."""
    text = _STRING.sub('""', expr)
    text = _GROUPING.sub(" ", text)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in KEYWORDS:
            continue
        names.add(name)
    return names


def substitute(expr: str, variables: dict[str, str] | None = None) -> str:
    """Grafana's substitution, enough to hand a panel query to Prometheus."""
    values = {**_GRAFANA_VARS, **(variables or {})}
    for key in sorted(values, key=len, reverse=True):
        expr = expr.replace(key, values[key])
    return re.sub(r"\$\{?(\w+)\}?", ".+", expr)  # remaining template variables match anything


def rate_windows_ok(expr: str) -> bool:
    """Every rate()/irate()/increase() ranges over $__rate_interval."""
    for match in _RANGE_FUNCS.finditer(expr):
        depth, i = 1, match.end()
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        if "[$__rate_interval]" not in expr[match.end():i]:
            return False
    return True


def known_metrics(root: Path = ROOT) -> set[str]:
    if str(root) not in sys.path:  # run as a tool from anywhere: the catalogue lives in the repo
        sys.path.insert(0, str(root))
    from verl.metrics.catalog import CATALOG  # the single source of truth for trainer names

    known = {m.name for m in CATALOG}
    known |= {m.name + suffix for m in CATALOG if m.kind == "histogram" for suffix in ("_bucket", "_sum", "_count")}
    known |= dcgm_fields(root)
    known |= set(MONITOR_METRICS) | set(PROMETHEUS_BUILTINS)
    known |= {h + s for h in MONITOR_HISTOGRAMS for s in ("_bucket", "_sum", "_count")}
    known |= set(recording_rules(root))
    known |= peer_metrics(root)
    return known


def peer_metrics(root: Path = ROOT) -> set[str]:
    """Names of verl's peers (vLLM, SGLang, Ray, node_exporter) from dashboards/peer-metrics.csv."""
    lines = (ln for ln in (root / "dashboards/peer-metrics.csv").read_text().splitlines() if not ln.startswith("#"))
    return {row["metric"] for row in csv.DictReader(lines)}


def dcgm_fields(root: Path = ROOT) -> set[str]:
    lines = (ln for ln in (root / "dashboards/dcgm-fields.csv").read_text().splitlines() if not ln.startswith("#"))
    return {row["field"] for row in csv.DictReader(lines)}


def recording_rules(root: Path = ROOT) -> dict[str, str]:
    """record name -> expr, over prometheus/rules/*.yml."""
    out: dict[str, str] = {}
    for path in sorted((root / "prometheus/rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.update({r["record"]: r["expr"] for r in group["rules"] if "record" in r})
    return out


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def lint(dashboard: dict[str, Any], known: set[str]) -> list[str]:
    problems: list[str] = []
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        problems.append("no `datasource` template variable of type datasource")
    for name in ("job", "instance"):
        if name not in variables:
            problems.append(f"no `{name}` template variable")
    for var in variables.values():
        selector = re.fullmatch(r"label_values\((.*),\s*\w+\)", var.get("definition") or "")
        for metric in metric_names(selector.group(1) if selector else "") - known:
            problems.append(f"variable {var['name']}: unknown metric {metric}")
    ids = set()
    for panel in panels(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate panel id")
        ids.add(panel.get("id"))
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where}: datasource is not the ${{datasource}} variable")
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{where}: no unit")
        if not (panel.get("description") or "").strip():
            problems.append(f"{where}: no description")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        for target in targets:
            expr = target.get("expr", "")
            if not expr.strip():
                problems.append(f"{where}: target {target.get('refId')} has no expr")
            if not rate_windows_ok(expr):
                problems.append(f"{where}: rate()/increase() not over $__rate_interval: {expr}")
            if target.get("datasource", {}).get("uid") not in (None, "${datasource}"):
                problems.append(f"{where}: target {target.get('refId')} bypasses the datasource variable")
            for metric in sorted(metric_names(expr) - known):
                problems.append(f"{where}: unknown metric {metric}")
    if "${DS_" in json.dumps(dashboard):
        problems.append("uses ${DS_...} import inputs: provisioning cannot resolve them")
    return problems


def main(argv: list[str] | None = None) -> int:
    files = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or sorted(
        (ROOT / "dashboards").glob("*.json"))
    known = known_metrics()
    bad = 0
    for path in files:
        try:
            dashboard = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            print(f"{path}: cannot read ({exc.strerror}); check the path", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"{path}: not dashboard JSON ({exc}); fix: export it again from Grafana (Share -> Export)",
                  file=sys.stderr)
            return 2
        for problem in lint(dashboard, known):
            print(f"{path.name}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
