"""Prometheus assets: promtool check config / check rules / test rules, rule-test coverage, alert catalogue,
annotations and runbooks, and the Alertmanager routing to the monitor's webhook receiver."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # dashboards/ is a tool directory next to the packages, not installed

from alerting.catalogue import severities  # noqa: E402
from dashboards.gen import lint  # noqa: E402

PROM = ROOT / "prometheus"
RULE_FILES = sorted((PROM / "rules").glob("*.yml"))
TEST_FILES = sorted((PROM / "tests").glob("*.yml"))
MONITOR_RULES = ROOT / "monitor/rules/default.yaml"
# the watcher's own alerts (MonitorDown, Watchdog, ...) page the monitoring, not training: not catalogued
HEALTH_RULES = PROM / "rules" / "verl-monitor-health.yml"
# The alert catalogue (alertname -> severity) is alerting/catalogue.yaml; tests/test_alert_catalogue.py
# checks every copy against it, these checks keep the Prometheus-side view.
CATALOGUE = severities()
WEBHOOK_PATH = "/api/v1/alertmanager/webhook"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found; fix: `make promtool` (installs Debian's prometheus package)")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rules() -> list[dict]:
    return [r for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def alert_rules() -> list[dict]:
    return [r for r in rules() if "alert" in r]


def test_promtool_check_config() -> None:
    result = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "rules found" in result.stdout  # the rule_files glob matched


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules() -> None:
    assert TEST_FILES
    result = promtool("test", "rules", *(p.name for p in TEST_FILES), cwd=PROM / "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_rule_both_fires_and_stays_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    checked_exprs: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
            checked_exprs |= {c["expr"] for c in case.get("promql_expr_test", [])}
    names = {r["alert"] for r in alert_rules()}
    assert names - fires == set(), "alerts never shown firing"
    assert names - quiet == set(), "alerts never shown quiet"
    assert set(lint.recording_rules()) - checked_exprs == set(), "recording rules without a promql_expr_test"


def monitor_catalogue() -> dict[str, set[str]]:
    """alertname -> severities used by the monitor's default rules, whatever their exact layout."""
    found: dict[str, set[str]] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            name = next((node[k] for k in ("alert", "alertname", "name") if isinstance(node.get(k), str)), None)
            sev = node.get("severity") or (node.get("labels") or {}).get("severity")
            if isinstance(name, str) and isinstance(sev, str):
                found.setdefault(name, set()).add(sev)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(MONITOR_RULES.read_text()))
    return found


def test_alert_names_and_severities_match_the_catalogue() -> None:
    """The contract list until the monitor's default rules exist; then both, and they must agree."""
    if MONITOR_RULES.exists():
        monitor = monitor_catalogue()
        assert monitor, f"{MONITOR_RULES} yields no alert names: update monitor_catalogue() to its layout"
        disagree = {n: s for n, s in monitor.items() if n in CATALOGUE and s != {CATALOGUE[n]}}
        assert disagree == {}, "monitor default rules disagree with the alert catalogue"
    health = {r["alert"] for g in yaml.safe_load(HEALTH_RULES.read_text())["groups"] for r in g["rules"]}
    for rule in (r for r in alert_rules() if r["alert"] not in health):
        assert rule["alert"] in CATALOGUE, f"{rule['alert']} is not in the alert catalogue"
        assert rule["labels"]["severity"] == CATALOGUE[rule["alert"]], rule["alert"]


def test_alert_annotations_and_runbooks() -> None:
    readme = (PROM / "README.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9]", "", h.lower()) for h in re.findall(r"^#+\s+(.+)$", readme, re.M)}
    for rule in alert_rules():
        notes = rule["annotations"]
        assert {"summary", "description", "runbook", "value"} <= set(notes), rule["alert"]
        path, _, anchor = notes["runbook"].partition("#")
        assert path == "prometheus/README.md" and anchor in anchors, notes["runbook"]


def test_rule_expressions_use_known_metrics() -> None:
    known = lint.known_metrics()
    for rule in rules():
        assert lint.metric_names(rule["expr"]) - known == set(), rule.get("alert") or rule.get("record")


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for name in lint.recording_rules():
        assert re.fullmatch(r"[a-z_]+:[A-Za-z0-9_]+:[a-z0-9_]+", name), name


def test_scrape_config_covers_trainer_monitor_and_dcgm() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert {"verl-trainer", "verl-monitor", "dcgm-exporter"} <= set(jobs)
    assert jobs["dcgm-exporter"]["scrape_interval"] == "5s"
    assert config["global"]["external_labels"]["cluster"] == "default"
    for target in (t for j in jobs.values() for sc in j["static_configs"] for t in sc["targets"]):
        assert target.startswith("127.0.0.1:"), "laptop defaults stay on loopback"


def test_alertmanager_routes_to_the_monitor_webhook() -> None:
    config = yaml.safe_load((PROM / "alertmanager.yml").read_text())
    receivers = {r["name"]: r for r in config["receivers"]}

    def route_receivers(route: dict, inherited: str | None = None) -> list[str]:
        own = route.get("receiver", inherited)
        return [own, *(n for child in route.get("routes", []) for n in route_receivers(child, own))]

    assert set(route_receivers(config["route"])) <= set(receivers)
    hooks = [w for r in receivers.values() for w in r.get("webhook_configs", [])]
    assert hooks and all(h["url"].endswith(WEBHOOK_PATH) and h["send_resolved"] for h in hooks)
    assert {"alertname", "node"} <= set(config["route"]["group_by"])
    for rule in config.get("inhibit_rules", []):
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            assert re.fullmatch(r'\w+(=~|!~|!=|=)"[^"]*"', matcher), matcher
    amtool = shutil.which("amtool")
    if amtool:  # Debian's prometheus-alertmanager is optional; the structure above is checked regardless
        result = subprocess.run([amtool, "check-config", str(PROM / "alertmanager.yml")],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
