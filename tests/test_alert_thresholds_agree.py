"""Issue 34: one alert is stated three times (alerting/catalogue.yaml, monitor/rules/default.yaml,
prometheus/rules/verl-alerts.yml), each in its own words: ``threshold: 3`` / ``min_increase: 3`` /
``increase(...) > 2``. This checks that the three fire on the same values, numerically: every condition
that is a plain comparison (value, counter increase over a window, age of a timestamp) is evaluated on a
grid of values around both thresholds, and the answers must be equal. Counter increases are compared on
integers (a counter rises in whole events, so ``> 2`` is ``>= 3``); gauges and ages on reals."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerting import catalogue
from alerting.config import parse_duration
from monitor.evaluation import signals

ROOT = Path(__file__).resolve().parents[1]
OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
_OP = r"(>=|<=|==|!=|>|<)"
_NUM = r"(-?\d+(?:\.\d+)?(?:e\d+)?)"
_LABELS = r"(?:\{[^}]*\})?"

# (quantity, window seconds or None, predicate on that quantity)
Predicate = tuple[str, "float | None", Callable[[float], bool]]


def seconds(value: Any) -> float:
    return parse_duration(value, "rule") if isinstance(value, str) else float(value)


def metric_names(select: str | list[str]) -> set[str]:
    sel = select if isinstance(select, list) else [select]
    # a rule over many series names no metric: its selector stands for itself
    return {m.group(0) if (m := re.match(r"[A-Za-z_:][\w:]*", s)) else s for s in sel}


def monitor_predicate(det: dict[str, Any]) -> Predicate | None:
    """The monitor detector's condition as its code states it (monitor/detectors/threshold.py,
    events.py, staleness.py); None for detectors that are not one comparison."""
    kind = det["type"]
    if kind == "threshold":
        op, v = OPS[det.get("op", ">")], float(det["value"])
        return "value", None, lambda x: op(x, v)
    if kind == "counter_increase":  # total >= min_increase
        v = float(det.get("min_increase", 1.0))
        return "increase", seconds(det.get("window", 300.0)), lambda x: x >= v
    if kind == "value_age":  # age > max_age
        v = seconds(det.get("max_age", 300.0))
        return "age", None, lambda x: x > v
    return None


def catalogue_predicate(alert: catalogue.CatalogueAlert, headline_op: str) -> Predicate | None:
    """The catalogue's condition in the monitor detector's meaning; a ``threshold`` detector's operator
    is the headline rule's (the catalogue names the limit, the rule the side)."""
    c = alert.condition
    det: dict[str, Any] = {"type": c.detector, catalogue.THRESHOLD_KEY[c.detector]: c.threshold, "op": headline_op}
    if c.window is not None:
        det["window"] = c.window
    return monitor_predicate(det)


def prometheus_predicates(expr: str, metric: str) -> list[Predicate]:
    """The plain comparisons on ``metric`` in a PromQL expression: ``metric OP n``,
    ``increase(metric[w]) OP n`` and ``time() - metric OP n``."""
    m = re.escape(metric)
    out: list[Predicate] = []

    def add(quantity: str, window: float | None, op: str, n: str) -> None:
        f, v = OPS[op], float(n)
        out.append((quantity, window, lambda x: f(x, v)))

    for w, op, n in re.findall(rf"\bincrease\(\s*{m}{_LABELS}\[(\w+)\]\s*\)\s*{_OP}\s*{_NUM}", expr):
        add("increase", parse_duration(w, "expr"), op, n)
    for op, n in re.findall(rf"\btime\(\)\s*-\s*{m}{_LABELS}\s*{_OP}\s*{_NUM}", expr):
        add("age", None, op, n)
    for op, n in re.findall(rf"(?<![\w:\[-])(?<!- ){m}{_LABELS}\s*{_OP}\s*{_NUM}", expr):
        add("value", None, op, n)
    return out


def grid(quantity: str, thresholds: list[float]) -> list[float]:
    if quantity == "increase":  # whole events
        top = int(max(thresholds)) + 3
        return [float(i) for i in range(0, top + 1)]
    pts = {t + d for t in thresholds for d in (-1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0)}
    pts |= {t * f for t in thresholds for f in (0.5, 0.999, 1.001, 2.0)}
    return sorted(pts)


def thresholds_of(det: dict[str, Any], expr_numbers: list[float]) -> list[float]:
    own = [seconds(det[k]) for k in ("value", "min_increase", "max_age") if k in det]
    return own + expr_numbers


def disagreements(a: Predicate, b: Predicate, around: list[float]) -> list[float]:
    return [x for x in grid(a[0], around) if a[2](x) != b[2](x)]


def monitor_rules() -> list[dict[str, Any]]:
    """default.yaml's rules and those the training-signal catalogue generates (monitor/evaluation/signals.py)."""
    return yaml.safe_load((ROOT / "monitor/rules/default.yaml").read_text())["rules"] + signals.load().rule_dicts()


def names_metric(select: str | list[str], metric: str) -> bool:
    if metric.startswith("{"):  # a catalogue entry for a rule over many series
        return any(n.startswith(metric.rstrip("}")) for n in metric_names(select))
    return metric in metric_names(select)


@cache  # read at collection, for each monitor rule: parsed once
def prometheus_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "prometheus/rules/verl-alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def pairs() -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """(alert, metric, monitor detector, Prometheus exprs) for every monitor rule that is one comparison
    and has Prometheus rules of the same alert naming the same metric."""
    out = []
    for rule in monitor_rules():
        if "detector" not in rule or monitor_predicate(rule["detector"]) is None:
            continue
        for metric in sorted(metric_names(rule["select"])):
            exprs = [p["expr"] for p in prometheus_rules()
                     if p["alert"] == rule["alert"] and re.search(rf"\b{re.escape(metric)}\b", p["expr"])]
            if exprs:
                out.append((rule["alert"], metric, rule["detector"], exprs))
    return out


PAIRS = pairs()


def _numbers(expr: str) -> list[float]:
    return [float(n) for _, n in re.findall(rf"{_OP}\s*{_NUM}", expr)]


@pytest.mark.parametrize(("alert", "metric", "det", "exprs"), PAIRS, ids=[f"{p[0]}-{p[1]}" for p in PAIRS])
def test_monitor_and_prometheus_fire_on_the_same_values(alert: str, metric: str, det: dict[str, Any],
                                                        exprs: list[str]) -> None:
    """Prometheus may say more (``absent(up)`` beside ``up == 0``), but one of its rules states the
    monitor's comparison, and every comparison of the same quantity agrees with it."""
    ours = monitor_predicate(det)
    assert ours is not None
    theirs = [(p, e) for e in exprs for p in prometheus_predicates(e, metric) if p[0] == ours[0]]
    assert theirs, f"{alert}: no Prometheus rule compares the {ours[0]} of {metric} as the monitor does"
    for p, expr in theirs:
        assert p[1] == ours[1], f"{alert} {metric}: window {p[1]} s (Prometheus) vs {ours[1]} s (monitor)"
        bad = disagreements(ours, p, thresholds_of(det, _numbers(expr)))
        assert not bad, f"{alert} {metric}: monitor and Prometheus disagree at {bad} in {expr.strip()!r}"


@pytest.mark.parametrize("alert", catalogue.load(), ids=lambda a: a.name)
def test_the_catalogue_fires_on_the_same_values_as_the_headline_rules(alert: catalogue.CatalogueAlert) -> None:
    c = alert.condition
    rule = next((r for r in monitor_rules() if r["alert"] == alert.name and "detector" in r
                 and names_metric(r["select"], c.metric)), None)
    assert rule is not None, f"no monitor rule for {alert.name} selects {c.metric}"
    stated = catalogue_predicate(alert, rule["detector"].get("op", ">"))
    if stated is None:
        pytest.skip(f"{alert.name}: a {c.detector} detector is not one comparison")
    ours = monitor_predicate(rule["detector"])
    assert ours is not None and ours[:2] == stated[:2], alert.name
    around = thresholds_of(rule["detector"], [c.threshold])
    assert not disagreements(stated, ours, around), f"{alert.name}: catalogue vs monitor/rules/default.yaml"
    for prom in (r for r in prometheus_rules() if r["alert"] == alert.name):
        for p in (p for p in prometheus_predicates(prom["expr"], c.metric) if p[0] == stated[0]):
            assert p[1] == stated[1], f"{alert.name}: window (catalogue vs Prometheus)"
            bad = disagreements(stated, p, around + _numbers(prom["expr"]))
            assert not bad, f"{alert.name}: catalogue and Prometheus disagree at {bad}"


def test_a_numeric_disagreement_is_caught() -> None:
    """``min_increase: 3`` agrees with ``> 2`` and ``>= 3`` on whole events, not with ``> 3`` or ``>= 2``."""
    det = {"type": "counter_increase", "window": "5m", "min_increase": 3}
    ours = monitor_predicate(det)
    assert ours is not None
    for expr, agree in (("increase(x[5m]) > 2", True), ("increase(x[5m]) >= 3", True),
                        ("increase(x[5m]) > 3", False), ("increase(x[5m]) >= 2", False)):
        (p,) = prometheus_predicates(expr, "x")
        assert (not disagreements(ours, p, [3.0])) is agree, expr
    gauge = monitor_predicate({"type": "threshold", "op": ">", "value": 0.8})
    assert gauge is not None
    (p,) = prometheus_predicates("verl_reward_std >= 0.8", "verl_reward_std")
    assert disagreements(gauge, p, [0.8]) == [0.8]  # on reals, > and >= differ at the threshold itself
