"""Rules: YAML that binds detectors to series selectors and says what alert to raise.

```yaml
rules:
  - alert: CPUBoundBottleneck          # alert name (labels.alertname)
    severity: P3                       # P0..P3
    for: 10s                           # condition must hold this long before firing
    keep_firing_for: 0s                # and stays firing this long after it clears
    select: verl_host_cpu_utilization_ratio        # one selector or a list (both name families)
    detector: {type: threshold, op: ">", value: 0.95, spike_filter: 3}
    # step cadence (one sample per training step, e.g. a verl JSONL log): any duration parameter may
    # also be given in samples, `steps: {window: 24}` -> max(seconds, 24 x observed interval);
    # `warmup_steps: N` hides a series' first N samples from the detector; `for_steps: N` likewise
    # raises `for` to N x the interval, `keep_firing_for_steps: N` `keep_firing_for`; `per_step: true`
    # (rules on a per-step log): the steps replace the seconds once the interval is known
    # (monitor/detectors/cadence.py); a leak detector on a memory *peak* may name `explain_by: [selectors]`,
    # the work series (same node and job) whose new highs explain a rise (monitor/detectors/work.py)
    join_on: [node, server]            # what `when:` joins on (default [node]; server: a rollout server's address)
    when:                              # optional extra conditions, joined on the same node
      - select: [verl_gpu_memory_used_bytes, DCGM_FI_DEV_FB_USED]
        detector: {type: fluctuation, window: 60s, min_relative: 0.05}
    labels: {team: infra}              # a value "$__name__" is the series' name (a rule over many series)
    summary: "CPU {{ value | round(2) }} ..."      # Jinja2 (sandboxed): labels, value, details, series
    description: "..."
    runbook: "..."
    plot: false                        # attach a PNG of the series and the fitted line
```
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment

from alerting.model import SEVERITIES
from alerting.safe_config import UnsafeYAML, load_yaml_bytes, read_config_bytes
from alerting.vocabulary import Vocabulary
from monitor import durations
from monitor.detectors import registry
from monitor.detectors.cadence import CadenceScaled
from monitor.detectors.work import WorkLog
from monitor.errors import MonitorConfigError
from monitor.series.selectors import Selector, SelectorError, parse_selector

DEFAULT_RULES = Path(__file__).parents[1] / "rules" / "default.yaml"
SERIES_NAME_LABEL = "$__name__"

_RULE_KEYS = {"alert", "severity", "for", "for_steps", "keep_firing_for", "keep_firing_for_steps", "select", "detector", "when", "labels",
              "summary", "description", "runbook", "plot", "join_on"}
_TEMPLATES = SandboxedEnvironment(autoescape=False)


class RuleError(MonitorConfigError):
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
    steps: dict[str, float] = field(default_factory=dict)  # duration parameter -> samples (cadence.py)
    warmup_steps: int = 0
    per_step: bool = False  # the steps replace the seconds (a per-step log's rule, cadence.py)
    # the work series that explain a memory peak's rise (leak detector, monitor/detectors/work.py)
    explain_by: tuple[Selector, ...] = ()

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        return any(s.matches(name, labels) for s in self.selectors)

    def explains(self, name: str, labels: dict[str, str]) -> bool:
        return any(s.matches(name, labels) for s in self.explain_by)

    def new_detector(self, work: WorkLog | None = None) -> registry.Detector:
        params = dict(self.params) if work is None else {**self.params, "work": work}
        if not self.steps and not self.warmup_steps:
            return registry.build(self.detector_type, params, self.spike_filter)
        return CadenceScaled(lambda p: registry.build(self.detector_type, p if work is None else {**p, "work": work},
                                                      self.spike_filter), dict(self.params),
                             dict(self.steps), self.warmup_steps,
                             ticks=bool(getattr(registry.DETECTORS[self.detector_type], "ticks", False)),
                             per_step=self.per_step)


@dataclass(frozen=True)
class Rule:
    alert: str
    severity: str
    conditions: tuple[Condition, ...]
    for_s: float = 0.0
    for_steps: float = 0.0  # `for` is at least this many sample intervals of the alert's series
    keep_firing_for_s: float = 0.0
    keep_firing_for_steps: float = 0.0  # the condition is held this many sample intervals after it clears
    labels: dict[str, str] = field(default_factory=dict)
    templates: dict[str, Any] = field(default_factory=dict)  # annotation name -> compiled template
    plot: bool = False
    source: str = ""
    join_on: tuple[str, ...] = ("node",)  # the labels a `when:` condition's series must share with the alert's

    def join_key(self, labels: dict[str, str]) -> tuple[str, ...]:
        return tuple(labels.get(k, "unknown") for k in self.join_on)

    def to_json(self) -> dict[str, Any]:
        """What ``GET /api/v1/rules`` shows: how each condition is judged -- in seconds, or in steps of
        the series (``steps``: parameter -> samples; ``per_step``: the steps replace the seconds) -- and
        its warm-up in samples (``warmup_steps``; a ``warmup_s`` in ``steps``)."""
        return {"alert": self.alert, "severity": self.severity, "source": self.source,
                "for_s": self.for_s, "for_steps": self.for_steps,
                "keep_firing_for_s": self.keep_firing_for_s, "keep_firing_for_steps": self.keep_firing_for_steps,
                "conditions": [{"select": [s.text for s in c.selectors], "detector": c.detector_type,
                                "params": c.params, "steps": c.steps, "per_step": c.per_step,
                                "warmup_steps": c.warmup_steps,
                                "judged_in": "steps" if c.per_step else ("seconds or steps" if c.steps else "seconds")}
                               for c in self.conditions]}

    def render(self, context: dict[str, Any]) -> dict[str, str]:
        context = {"vocab": Vocabulary(), **context}  # the user's config vocabulary (alerting/vocabulary.py)
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
    params = {k: v for k, v in det.items()
              if k not in ("type", "spike_filter", "steps", "warmup_steps", "per_step", "explain_by")}
    allowed = registry.accepted_params(kind) - {"work"}  # the work log is the evaluator's, never a rule's
    for k, v in list(params.items()):
        if k not in allowed:
            raise RuleError(f"{where}.detector.{k}: not a parameter of {kind}; use one of {', '.join(sorted(allowed))}")
        if isinstance(v, str) and durations.is_duration(v):
            params[k] = parse_duration(v, f"{where}.detector.{k}")
    spike = det.get("spike_filter", 0)
    if not isinstance(spike, int) or spike < 0:
        raise RuleError(f"{where}.detector.spike_filter: expected a sample count >= 0, got {spike!r}")
    steps = det.get("steps") or {}
    if not isinstance(steps, dict):
        raise RuleError(f"{where}.detector.steps: expected a mapping of duration parameter: sample count")
    for k, n in steps.items():
        if k in allowed and k not in params:  # scale from the detector's own default seconds
            params[k] = registry.default_param(kind, k)
        if k not in allowed or isinstance(params.get(k), bool) or not isinstance(params.get(k), int | float):
            raise RuleError(f"{where}.detector.steps.{k}: not a duration parameter of {kind}; "
                            f"name one of {', '.join(sorted(allowed))} that you also give in seconds")
        if isinstance(n, bool) or not isinstance(n, int | float) or not 0 < n <= 100000:
            raise RuleError(f"{where}.detector.steps.{k}: expected a sample count > 0, got {n!r}")
    warmup = det.get("warmup_steps", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise RuleError(f"{where}.detector.warmup_steps: expected a sample count >= 0, got {warmup!r}")
    per_step = det.get("per_step", False)
    if not isinstance(per_step, bool) or (per_step and not steps):
        raise RuleError(f"{where}.detector.per_step: expected true or false, with `steps:` naming the windows")
    explain = det.get("explain_by") or []
    if "explain_by" in det and "work" not in registry.accepted_params(kind):
        raise RuleError(f"{where}.detector.explain_by: only a detector that reads work (leak, step_overrun) takes it")
    try:
        explain_by = tuple(parse_selector(str(s)) for s in (explain if isinstance(explain, list) else [explain]))
    except SelectorError as exc:
        raise RuleError(f"{where}.detector.explain_by: {exc}") from exc
    cond = Condition(selectors, kind, params, spike, {str(k): float(n) for k, n in steps.items()}, warmup, per_step,
                     explain_by)
    try:
        cond.new_detector()
    except (TypeError, ValueError) as exc:
        raise RuleError(f"{where}.detector: {exc}") from exc
    return cond


def _count(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 100000:
        raise RuleError(f"{where}: expected a sample count >= 0, got {raw!r}")
    return float(raw)


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
    join_on = raw.get("join_on", ["node"])
    if not isinstance(join_on, list) or not join_on or not all(isinstance(k, str) and k for k in join_on):
        raise RuleError(f"{where}.join_on: expected a list of label names like [node, server], got {join_on!r}")
    return Rule(
        alert=name, severity=sev, conditions=tuple(conds),
        for_s=parse_duration(raw.get("for", 0), f"{where}.for"), for_steps=_count(raw.get("for_steps", 0), f"{where}.for_steps"),
        keep_firing_for_s=parse_duration(raw.get("keep_firing_for", 0), f"{where}.keep_firing_for"),
        keep_firing_for_steps=_count(raw.get("keep_firing_for_steps", 0), f"{where}.keep_firing_for_steps"),
        labels={str(k): str(v) for k, v in labels.items()}, templates=templates,
        plot=bool(raw.get("plot", False)), source=where, join_on=tuple(join_on),
    )


# The rules of each file's text (by path and digest), shared: a Rule is frozen and nothing changes one.
# Parsing default.yaml and compiling its 162 templates took 0.19 s a load, and replay, the benchmarks and the
# tests build a pipeline per run: one run of the suite loaded rule files 323 times in its workers.
_LOADED: dict[tuple[str, bytes], tuple[Rule, ...]] = {}
_LOADED_MAX = 32


def load_rules(path: str | Path) -> list[Rule]:
    path = Path(path)
    try:
        data = read_config_bytes(path, "rules file")
    except OSError as exc:
        raise RuleError(f"rules file {path}: cannot read ({exc.strerror}); check the path") from exc
    except UnsafeYAML as exc:
        raise RuleError(str(exc)) from None
    key = (str(path.resolve()), hashlib.blake2b(data, digest_size=16).digest())
    rules = _LOADED.get(key)
    if rules is None:
        rules = tuple(_parse_rules(path, data))
        if len(_LOADED) >= _LOADED_MAX:
            _LOADED.clear()
        _LOADED[key] = rules
    return list(rules)


def _parse_rules(path: Path, data: bytes) -> list[Rule]:
    try:
        doc = load_yaml_bytes(data, f"rules file {path}")  # no aliases, UTF-8 only: the file may be hostile
    except UnsafeYAML as exc:
        raise RuleError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise RuleError(f"rules file {path}: expected a top-level 'rules:' list")
    rules = [_rule(r, f"{path}: rules[{i}]") for i, r in enumerate(doc["rules"])]
    if path.resolve() == DEFAULT_RULES.resolve():
        # the training-signal catalogue's rules are part of the default rules (monitor/evaluation/signals.py)
        from monitor.evaluation import (
            signals,  # deferred: signals imports the verl key table, rules must load alone
        )

        rules += [_rule(r, f"{signals.PATH}: {r['alert']} ({r.get('labels', {}).get('signal', 'uncatalogued')})")
                  for r in signals.load().rule_dicts()]
    return rules


def load_rule_files(paths: list[str | Path] | None) -> list[Rule]:
    rules: list[Rule] = []
    for p in paths or [DEFAULT_RULES]:
        rules.extend(load_rules(p))
    return rules
