"""One alert catalogue (alerting/catalogue.yaml): the monitor's default rules, the Prometheus alert rules,
the webhook severity map and the README table must agree with it on names, severities, thresholds and
durations. A disagreement anywhere fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerting import catalogue
from alerting.config import parse_duration
from monitor.evaluation import signals

ROOT = Path(__file__).resolve().parents[1]
MONITOR_RULES = ROOT / "monitor/rules/default.yaml"
PROM_RULES = ROOT / "prometheus/rules/verl-alerts.yml"
ALERTS = catalogue.load()
BY_NAME = {a.name: a for a in ALERTS}
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e\d+)?(?![\w.])")


def monitor_rules() -> list[dict[str, Any]]:
    """default.yaml's rules and those the training-signal catalogue generates (monitor/evaluation/signals.py)."""
    return yaml.safe_load(MONITOR_RULES.read_text())["rules"] + signals.load().rule_dicts()


def prom_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(PROM_RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def selects(rule: dict[str, Any], metric: str) -> bool:
    sel = rule["select"] if isinstance(rule["select"], list) else [rule["select"]]
    if metric.startswith("{"):  # a rule over many series: its selector names no metric
        return any(s.startswith(metric.rstrip("}")) for s in sel)
    return any(re.match(rf"{re.escape(metric)}(\{{|$)", s) for s in sel)


def headline(rules: list[dict[str, Any]], name: str, matches: Any) -> dict[str, Any] | None:
    return next((r for r in rules if r["alert"] == name and matches(r)), None)


def seconds(value: Any) -> float:
    return parse_duration(value, "rule") if isinstance(value, str) else float(value)


def test_names_and_severities_agree_everywhere() -> None:
    from monitor.sources.alertmanager import CATALOGUE

    assert catalogue.severities() == CATALOGUE
    monitor = monitor_rules()
    assert {r["alert"] for r in monitor} == set(BY_NAME), "monitor/rules/default.yaml names vs the catalogue"
    for rule in monitor:
        assert rule["severity"] == BY_NAME[rule["alert"]].severity, rule["alert"]
    for rule in prom_rules():
        assert rule["alert"] in BY_NAME, f"{rule['alert']} (Prometheus) is not in the catalogue"
        assert rule["labels"]["severity"] == BY_NAME[rule["alert"]].severity, rule["alert"]


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_monitor_headline_rule_has_the_catalogue_threshold_and_durations(alert: catalogue.CatalogueAlert) -> None:
    c = alert.condition
    rule = headline(monitor_rules(), alert.name, lambda r: selects(r, c.metric))
    assert rule is not None, f"no monitor rule for {alert.name} selects {c.metric}"
    det = rule["detector"]
    assert det["type"] == c.detector, alert.name
    assert seconds(det[catalogue.THRESHOLD_KEY[c.detector]]) == c.threshold, f"{alert.name} threshold"
    if c.window is not None:
        assert seconds(det["window"]) == c.window, f"{alert.name} window"
    assert seconds(rule.get("for", 0)) == c.for_s, f"{alert.name} for"


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_prometheus_headline_rule_has_the_catalogue_threshold_and_durations(alert: catalogue.CatalogueAlert) -> None:
    c = alert.condition
    named = [r for r in prom_rules() if r["alert"] == alert.name]
    if not named:
        pytest.skip(f"{alert.name} is evaluated by the monitor only")
    rule = headline(named, alert.name, lambda r: re.search(rf"\b{re.escape(c.metric)}\b", r["expr"]))
    assert rule is not None, f"no Prometheus rule for {alert.name} uses {c.metric}"
    numbers = {float(n) for n in NUMBER.findall(rule["expr"])}
    if c.detector == "counter_increase":  # increase(x[window]) > threshold - 1 (or >= threshold)
        assert re.search(rf"\[{re.escape(c.raw['window'])}\]\)\s*(>\s*{c.threshold - 1:g}|>=\s*{c.threshold:g})\b",
                         rule["expr"]), f"{alert.name}: expected increase(...[{c.raw['window']}]) >= {c.threshold:g}"
    elif c.detector in ("window_drop", "level_shift"):  # now < (1 - drop) x before
        assert round(1 - c.threshold, 6) in numbers, f"{alert.name}: expected '< {1 - c.threshold:g} *' in expr"
    else:
        assert c.threshold in numbers, f"{alert.name}: threshold {c.threshold:g} not in {rule['expr']!r}"
    if c.detector in ("threshold", "value_age"):  # statistical detectors judge windows; Prometheus' `for` confirms
        assert seconds(rule.get("for", 0)) == c.for_s, f"{alert.name} for"


def test_readme_table_is_generated_from_the_catalogue() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert catalogue.README_BEGIN in readme, "README lost its catalogue markers"
    assert catalogue.replace_readme_table(readme) == readme, "run: python -m alerting.catalogue --readme README.md"


def test_a_disagreement_fails(tmp_path: Path) -> None:
    """The checks above bite: a changed threshold is caught by the same comparison."""
    text = catalogue.PATH.read_text(encoding="utf-8").replace("threshold: 2h", "threshold: 3h")
    (tmp_path / "catalogue.yaml").write_text(text, encoding="utf-8")
    changed = {a.name: a for a in catalogue.load(tmp_path / "catalogue.yaml")}["CheckpointStale"]
    with pytest.raises(AssertionError, match="threshold"):
        test_monitor_headline_rule_has_the_catalogue_threshold_and_durations(changed)
