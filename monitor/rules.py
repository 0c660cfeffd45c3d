"""Rules: YAML that binds detectors to series selectors and says what alert to raise.

```yaml
rules:
  - alert: CPUBoundBottleneck          # alert name (labels.alertname)
    severity: P3                       # P0..P3
    for: 10s                           # condition must hold this long before firing
    keep_firing_for: 0s                # and stays firing this long after it clears
    select: verl_host_cpu_utilization_ratio        # one selector or a list (both name families)
    detector: {type: threshold, op: ">", value: 0.95, spike_filter: 3}
    when:                              # optional extra conditions, joined on the same node
      - select: [verl_gpu_memory_used_bytes, DCGM_FI_DEV_FB_USED]
        detector: {type: fluctuation, window: 60s, min_relative: 0.05}
    labels: {team: infra}
    summary: "CPU {{ value | round(2) }} ..."      # Jinja2 (sandboxed): labels, value, details, series
    description: "..."
    runbook: "..."
    plot: false                        # attach a PNG of the series and the fitted line
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment

from alerting.model import SEVERITIES
from alerting.safe_config import UnsafeYAML, load_yaml_file
from monitor import durations
from monitor.detectors import registry
from monitor.selectors import Selector, SelectorError, parse_selector

DEFAULT_RULES = Path(__file__).parent / "rules" / "default.yaml"

_RULE_KEYS = {"alert", "severity", "for", "keep_firing_for", "select", "detector", "when", "labels",
              "summary", "description", "runbook", "plot"}
_TEMPLATES = SandboxedEnvironment(autoescape=False)


class RuleError(ValueError):
    """One line naming the file, the rule and the key, and what to write instead."""


def parse_duration(value: Any, where: str) -> float:
    try:
        return durations.parse_duration(value, where)
    except durations.DurationError as exc:
        raise RuleError(str(exc)) from exc


@dataclass(frozen=True)
class Condition:
    selectors: tuple[Selector, ...]
    detector_type: str
    params: dict[str, Any]
    spike_filter: int = 0

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        return any(s.matches(name, labels) for s in self.selectors)

    def new_detector(self) -> registry.Detector:
        return registry.build(self.detector_type, dict(self.params), self.spike_filter)


@dataclass(frozen=True)
class Rule:
    alert: str
    severity: str
    conditions: tuple[Condition, ...]
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    templates: dict[str, Any] = field(default_factory=dict)  # annotation name -> compiled template
    plot: bool = False
    source: str = ""

    def render(self, context: dict[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, tpl in self.templates.items():
            try:
                out[key] = tpl.render(**context).strip()
            except Exception as exc:  # a bad value in one alert must not stop the others
                out[key] = f"(template error in {key}: {exc})"
        return out


def _condition(raw: Any, where: str) -> Condition:
    if not isinstance(raw, dict) or "select" not in raw or "detector" not in raw:
        raise RuleError(f"{where}: needs 'select' and 'detector'")
    sel = raw["select"]
    sels = sel if isinstance(sel, list) else [sel]
    try:
        selectors = tuple(parse_selector(str(s)) for s in sels)
    except SelectorError as exc:
        raise RuleError(f"{where}.select: {exc}") from exc
    det = raw["detector"]
    if not isinstance(det, dict) or "type" not in det:
        raise RuleError(f"{where}.detector: needs 'type' (one of {', '.join(sorted(registry.DETECTORS))})")
    kind = det["type"]
    if kind not in registry.DETECTORS:
        raise RuleError(f"{where}.detector.type: unknown {kind!r}; use one of {', '.join(sorted(registry.DETECTORS))}")
    params = {k: v for k, v in det.items() if k not in ("type", "spike_filter")}
    allowed = registry.accepted_params(kind)
    for k, v in list(params.items()):
        if k not in allowed:
            raise RuleError(f"{where}.detector.{k}: not a parameter of {kind}; use one of {', '.join(sorted(allowed))}")
        if isinstance(v, str) and durations.DURATION_RE.match(v):
            params[k] = parse_duration(v, f"{where}.detector.{k}")
    spike = det.get("spike_filter", 0)
    if not isinstance(spike, int) or spike < 0:
        raise RuleError(f"{where}.detector.spike_filter: expected a sample count >= 0, got {spike!r}")
    cond = Condition(selectors, kind, params, spike)
    try:
        cond.new_detector()
    except (TypeError, ValueError) as exc:
        raise RuleError(f"{where}.detector: {exc}") from exc
    return cond


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: expected a mapping with alert, severity, select, detector")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise RuleError(f"{where}.{sorted(unknown)[0]}: unknown key; allowed: {', '.join(sorted(_RULE_KEYS))}")
    name = raw.get("alert")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise RuleError(f"{where}.alert: expected an alert name like ThroughputDrop, got {name!r}")
    where = f"{where} ({name})"
    sev = raw.get("severity")
    if sev not in SEVERITIES:
        raise RuleError(f"{where}.severity: expected one of {', '.join(SEVERITIES)}, got {sev!r}")
    conds = [_condition(raw, where)]
    for i, extra in enumerate(raw.get("when") or []):
        conds.append(_condition(extra, f"{where}.when[{i}]"))
    templates = {}
    for key in ("summary", "description", "runbook"):
        if key in raw:
            try:
                templates[key] = _TEMPLATES.from_string(str(raw[key]))
            except TemplateError as exc:
                raise RuleError(f"{where}.{key}: bad template: {exc}") from exc
    labels = raw.get("labels") or {}
    if not isinstance(labels, dict):
        raise RuleError(f"{where}.labels: expected a mapping of label: value")
    return Rule(
        alert=name, severity=sev, conditions=tuple(conds),
        for_s=parse_duration(raw.get("for", 0), f"{where}.for"),
        keep_firing_for_s=parse_duration(raw.get("keep_firing_for", 0), f"{where}.keep_firing_for"),
        labels={str(k): str(v) for k, v in labels.items()}, templates=templates,
        plot=bool(raw.get("plot", False)), source=where,
    )


def load_rules(path: str | Path) -> list[Rule]:
    path = Path(path)
    try:
        doc = load_yaml_file(path, "rules file")  # no aliases, UTF-8 only: the file may be hostile
    except OSError as exc:
        raise RuleError(f"rules file {path}: cannot read ({exc.strerror}); check the path") from exc
    except UnsafeYAML as exc:
        raise RuleError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise RuleError(f"rules file {path}: expected a top-level 'rules:' list")
    return [_rule(r, f"{path}: rules[{i}]") for i, r in enumerate(doc["rules"])]


def load_rule_files(paths: list[str | Path] | None) -> list[Rule]:
    rules: list[Rule] = []
    for p in paths or [DEFAULT_RULES]:
        rules.extend(load_rules(p))
    return rules
