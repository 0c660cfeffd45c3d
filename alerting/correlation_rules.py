"""Correlation rules (``alerting/rules/correlation.yaml`` and the user's files): their shape, their
checks at load time (one-line ``AlertingConfigError`` naming file and key) and the sandboxed templates and
expressions they hold."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from alerting.durations import parse_duration
from alerting.errors import AlertingConfigError
from alerting.model import SEVERITIES
from alerting.procedures import PROCEDURES
from alerting.safe_config import UnsafeYAML, load_yaml_file, number, short, unknown_key
from alerting.templates import sandbox

_ENV = sandbox()


@dataclass
class CorrelationRule:
    name: str
    severity: str
    window_s: float
    all_of: list[str]
    any_of: list[str]
    min_any: int
    join: list[str]
    summary: str = ""
    root_cause: str = ""
    suggestion: str = ""
    runbook: str = ""
    when: str = ""
    diagnose: list[str] = field(default_factory=list)
    require_cause: bool = False  # form only when a procedure measured a cause (the name claims one)

    @property
    def members(self) -> set[str]:
        return set(self.all_of) | set(self.any_of)

    def satisfied(self, present: set[str], ctx: dict[str, Any]) -> bool:
        if not set(self.all_of) <= present or len(present & set(self.any_of)) < self.min_any:
            return False
        if not self.when:
            return True
        try:
            return bool(_compiled_expression(self.when)(**ctx))
        except TemplateError:
            return False


RULE_KEYS = {"name", "severity", "window", "all_of", "any_of", "min_any", "join", "summary", "root_cause",
             "suggestion", "runbook", "when", "diagnose", "require_cause"}


def _names(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise AlertingConfigError(f"{key}: expected a list of names, got {short(value)}")
    return list(value)


@functools.lru_cache(maxsize=256)
def _compiled_expression(text: str) -> Any:
    """Compiling a Jinja expression costs ~5 ms; a 5000-alert webhook used to compile one per alert."""
    return _ENV.compile_expression(text)


@functools.lru_cache(maxsize=256)
def compiled_template(text: str) -> Any:
    return _ENV.from_string(text)


def load_rules(paths: list[Path]) -> list[CorrelationRule]:
    rules: dict[str, CorrelationRule] = {}
    for path in paths:
        try:
            raw = load_yaml_file(path, "correlation rules") or {}
        except OSError as exc:
            raise AlertingConfigError(f"{path}: cannot read correlation rules ({exc.strerror}); fix the path") from None
        except UnsafeYAML as exc:
            raise AlertingConfigError(str(exc)) from None
        if not isinstance(raw, dict) or not isinstance(raw.get("rules") or [], list):
            raise AlertingConfigError(f"{path}: correlation rules must be a mapping with a 'rules:' list "
                              "(rules: [{name: ..., all_of: [...]}]), got a top-level " + type(raw).__name__)
        bad = unknown_key(raw, {"rules"})
        if bad:
            raise AlertingConfigError(f"{path}: unknown key {bad[0]!r}; {bad[1]}")
        for i, r in enumerate(raw.get("rules") or []):
            key = f"{path}: rules[{i}]"
            if not isinstance(r, dict) or not r.get("name"):
                raise AlertingConfigError(f"{key}.name: required key is missing")
            bad = unknown_key(r, RULE_KEYS)
            if bad:
                raise AlertingConfigError(f"{key}.{bad[0]}: unknown key; {bad[1]}")
            sev = str(r.get("severity", "P1"))
            if sev not in SEVERITIES:
                raise AlertingConfigError(f"{key}.severity: {short(sev)!r} is not one of {', '.join(SEVERITIES)}")
            all_of, any_of = _names(r.get("all_of"), f"{key}.all_of"), _names(r.get("any_of"), f"{key}.any_of")
            paths = _names(r.get("diagnose"), f"{key}.diagnose")
            unknown = [p for p in paths if p not in PROCEDURES]
            if unknown:
                raise AlertingConfigError(f"{key}.diagnose: unknown procedure {short(unknown[0])!r}; use one of "
                                  + ", ".join(sorted(PROCEDURES)))
            if not isinstance(r.get("require_cause", False), bool):
                raise AlertingConfigError(f"{key}.require_cause: expected true or false, got {short(r.get('require_cause'))}")
            if not all_of and not any_of:
                raise AlertingConfigError(f"{key}: give all_of and/or any_of member alertnames")
            try:
                min_any = int(number(r.get("min_any", 1 if any_of else 0), f"{key}.min_any", integer=True,
                                     lo=0, hi=len(any_of)))
            except ValueError as exc:
                raise AlertingConfigError(str(exc)) from None
            window_s = parse_duration(r.get("window", "2m"), f"{key}.window")
            if not 0 < window_s < float("inf"):
                raise AlertingConfigError(f"{key}.window: must be a duration > 0, got {short(r.get('window'))}")
            rule = CorrelationRule(
                name=str(r["name"]), severity=sev, window_s=window_s,
                all_of=all_of, any_of=any_of, min_any=min_any,
                join=_names(r.get("join"), f"{key}.join") or ["cluster", "node"], diagnose=paths,
                require_cause=bool(r.get("require_cause", False)),
                **{k: str(r.get(k) or "") for k in ("summary", "root_cause", "suggestion", "runbook", "when")},
            )
            for k in ("root_cause", "suggestion"):
                try:
                    _ENV.from_string(getattr(rule, k))
                except TemplateError as exc:
                    raise AlertingConfigError(f"{key}.{k}: template error: {short(str(exc), 120)}") from None
            rules[rule.name] = rule  # a later file overrides a default rule of the same name
    return list(rules.values())
