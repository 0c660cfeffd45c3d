"""Correlation stage: co-occurring alerts become one root-cause incident.

Alerts that can be members of a rule are held for the rule's window before routing. When a rule's
members are all present (same ``join`` labels), they are folded into an incident ``Alert`` whose
annotations carry ``root_cause`` and ``suggestion`` rendered from the members and the live
``verl_config_info``; the members then travel only inside the incident. Held alerts that never form an
incident are released to routing when their window ends."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from alerting.config import ConfigError, parse_duration
from alerting.model import SEVERITIES, Alert, alert_from_json
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
             "suggestion", "runbook", "when"}


def _names(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}: expected a list of names, got {short(value)}")
    return list(value)


@functools.lru_cache(maxsize=256)
def _compiled_expression(text: str) -> Any:
    """Compiling a Jinja expression costs ~5 ms; a 5000-alert webhook used to compile one per alert."""
    return _ENV.compile_expression(text)


@functools.lru_cache(maxsize=256)
def _compiled_template(text: str) -> Any:
    return _ENV.from_string(text)


def load_rules(paths: list[Path]) -> list[CorrelationRule]:
    rules: dict[str, CorrelationRule] = {}
    for path in paths:
        try:
            raw = load_yaml_file(path, "correlation rules") or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read correlation rules ({exc.strerror}); fix the path") from None
        except UnsafeYAML as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(raw, dict) or not isinstance(raw.get("rules") or [], list):
            raise ConfigError(f"{path}: correlation rules must be a mapping with a 'rules:' list "
                              "(rules: [{name: ..., all_of: [...]}]), got a top-level " + type(raw).__name__)
        bad = unknown_key(raw, {"rules"})
        if bad:
            raise ConfigError(f"{path}: unknown key {bad[0]!r}; {bad[1]}")
        for i, r in enumerate(raw.get("rules") or []):
            key = f"{path}: rules[{i}]"
            if not isinstance(r, dict) or not r.get("name"):
                raise ConfigError(f"{key}.name: required key is missing")
            bad = unknown_key(r, RULE_KEYS)
            if bad:
                raise ConfigError(f"{key}.{bad[0]}: unknown key; {bad[1]}")
            sev = str(r.get("severity", "P1"))
            if sev not in SEVERITIES:
                raise ConfigError(f"{key}.severity: {short(sev)!r} is not one of {', '.join(SEVERITIES)}")
            all_of, any_of = _names(r.get("all_of"), f"{key}.all_of"), _names(r.get("any_of"), f"{key}.any_of")
            if not all_of and not any_of:
                raise ConfigError(f"{key}: give all_of and/or any_of member alertnames")
            try:
                min_any = int(number(r.get("min_any", 1 if any_of else 0), f"{key}.min_any", integer=True,
                                     lo=0, hi=len(any_of)))
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            window_s = parse_duration(r.get("window", "2m"), f"{key}.window")
            if not 0 < window_s < float("inf"):
                raise ConfigError(f"{key}.window: must be a duration > 0, got {short(r.get('window'))}")
            rule = CorrelationRule(
                name=str(r["name"]), severity=sev, window_s=window_s,
                all_of=all_of, any_of=any_of, min_any=min_any,
                join=_names(r.get("join"), f"{key}.join") or ["cluster", "node"],
                **{k: str(r.get(k) or "") for k in ("summary", "root_cause", "suggestion", "runbook", "when")},
            )
            for k in ("root_cause", "suggestion"):
                try:
                    _ENV.from_string(getattr(rule, k))
                except TemplateError as exc:
                    raise ConfigError(f"{key}.{k}: template error: {short(str(exc), 120)}") from None
            rules[rule.name] = rule  # a later file overrides a default rule of the same name
    return list(rules.values())


@dataclass
class Held:
    alert: Alert
    until: float


@dataclass
class Incident:
    rule: str
    alert: Alert
    join_key: list[str]
    members: dict[str, Alert] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return self.alert.status == "firing"

    def record(self) -> dict[str, Any]:
        return {"kind": "incident", **self.alert.to_json(), "members": sorted(self.members),
                "root_cause": self.alert.annotations.get("root_cause", ""),
                "suggestion": self.alert.annotations.get("suggestion", "")}


def _view(a: Alert) -> dict[str, Any]:
    return {"labels": dict(a.labels), "annotations": dict(a.annotations), "value": a.value, "status": a.status}


def _render(text: str, ctx: dict[str, Any]) -> str:
    try:
        return " ".join(_compiled_template(text).render(**ctx).split())
    except TemplateError as exc:
        return f"(template failed: {exc})"


class _HeldMap(dict[str, Held]):
    """Held alerts by fingerprint that also count them by alertname, so a rule whose required members
    are not held at all is ruled out without scanning every held alert (a 5000-alert webhook made that
    scan quadratic)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, int] = {}

    def __setitem__(self, fp: str, held: Held) -> None:
        old = self.get(fp)
        if old is not None:
            self._count(old.alert.name, -1)
        super().__setitem__(fp, held)
        self._count(held.alert.name, 1)

    def __delitem__(self, fp: str) -> None:
        self._count(self[fp].alert.name, -1)
        super().__delitem__(fp)

    def pop(self, fp: str, *default: Any) -> Any:  # type: ignore[override]
        if fp in self:
            self._count(self[fp].alert.name, -1)
        return super().pop(fp, *default)

    def _count(self, name: str, d: int) -> None:
        n = self.names.get(name, 0) + d
        if n > 0:
            self.names[name] = n
        else:
            self.names.pop(name, None)


class Correlator:
    def __init__(self, rules: list[CorrelationRule]) -> None:
        self.rules = rules
        self.held: dict[str, Held] = _HeldMap()
        self.incidents: dict[str, Incident] = {}
        self.member_of: dict[str, str] = {}  # member fingerprint -> incident fingerprint (open incidents)
        self.config_info: dict[str, dict[str, str]] = {}

    def _rules_for(self, name: str) -> list[CorrelationRule]:
        return [r for r in self.rules if name in r.members]

    def _config_for(self, node: str) -> dict[str, str]:
        if node in self.config_info:
            return self.config_info[node]
        merged: dict[str, str] = {}  # the trainer may report from another host than the failing GPU
        for info in self.config_info.values():
            merged.update(info)
        return merged

    def observe(self, alert: Alert, now: float) -> tuple[list[Alert], list[Incident]]:
        """Returns alerts to route now and incidents formed or resolved by this alert."""
        fp = alert.fingerprint
        if fp in self.member_of:
            inc = self.incidents[self.member_of[fp]]
            inc.members[fp] = alert
            if all(m.status == "resolved" for m in inc.members.values()):
                inc.alert.status, inc.alert.ends_at = "resolved", now
                for m in inc.members:
                    self.member_of.pop(m, None)
                return [inc.alert], [inc]
            return [], []
        rules = self._rules_for(alert.name)
        if not rules:
            return [alert], []
        if fp in self.held:
            self.held[fp].alert = alert
        elif alert.status == "firing":
            for inc in self.incidents.values():
                rule = next((r for r in rules if r.name == inc.rule), None)
                if inc.open and rule and [alert.labels.get(k, "") for k in rule.join] == inc.join_key:
                    inc.members[fp] = alert
                    self.member_of[fp] = inc.alert.fingerprint
                    return [], []
            self.held[fp] = Held(alert, now + max(r.window_s for r in rules))
        else:
            return [alert], []  # resolved without ever being held: nothing to fold it into
        formed = [inc for r in rules if (inc := self._try_form(r, alert, now))]
        return [i.alert for i in formed], formed

    def _try_form(self, rule: CorrelationRule, trigger: Alert, now: float) -> Incident | None:
        names = getattr(self.held, "names", None)
        if names is not None and (any(n not in names for n in rule.all_of)
                                  or sum(n in names for n in set(rule.any_of)) < rule.min_any):
            return None  # a required member is not held at all: no need to look at the held alerts
        key = [trigger.labels.get(k, "") for k in rule.join]
        members = rule.members
        cands = [h.alert for h in self.held.values() if h.alert.name in members and h.alert.status == "firing"
                 and [h.alert.labels.get(k, "") for k in rule.join] == key]
        present = {a.name for a in cands}
        if not set(rule.all_of) <= present or len(present & set(rule.any_of)) < rule.min_any:
            return None  # checked before the context is built: most alerts of a big batch stop here
        labels = dict(zip(rule.join, key, strict=True))
        last = {a.name: a for a in cands}  # one view per member name (the last one seen), as before
        ctx = {"labels": labels, "present": sorted(present), "members": {n: _view(a) for n, a in last.items()},
               "config": self._config_for(labels.get("node", trigger.labels.get("node", "")))}
        if not rule.satisfied(present, ctx):
            return None
        inc_labels = {"alertname": rule.name, "severity": rule.severity, **{k: v for k, v in labels.items() if v}}
        annotations = {k: v for k, v in {
            "summary": _render(rule.summary, ctx), "root_cause": _render(rule.root_cause, ctx),
            "suggestion": _render(rule.suggestion, ctx), "runbook": rule.runbook,
            "description": "Correlated: " + ", ".join(sorted(present)),
        }.items() if v}
        inc = Incident(rule.name, Alert(labels=inc_labels, annotations=annotations,
                                        starts_at=min(a.starts_at or now for a in cands)), key)
        for a in cands:
            inc.members[a.fingerprint] = a
            self.member_of[a.fingerprint] = inc.alert.fingerprint
            del self.held[a.fingerprint]
        self.incidents[inc.alert.fingerprint] = inc
        return inc

    def expire(self, now: float) -> list[Alert]:
        """Held alerts whose window ended without an incident: route them on their own."""
        due = [fp for fp, h in self.held.items() if h.until <= now]
        return [self.held.pop(fp).alert for fp in due]

    def next_due(self) -> float | None:
        return min((h.until for h in self.held.values()), default=None)

    def expand(self, alert: Alert) -> list[str]:
        """Fingerprints an alert carries: an incident carries its members."""
        inc = self.incidents.get(alert.fingerprint)
        return [alert.fingerprint] + (sorted(inc.members) if inc else [])

    # -- durable state -------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Member and held alerts by fingerprint (they live in the engine's alert table)."""
        return {
            "held": {fp: h.until for fp, h in self.held.items()},
            "incidents": {fp: {"rule": i.rule, "alert": i.alert.to_json(), "join_key": i.join_key,
                               "members": sorted(i.members)} for fp, i in self.incidents.items()},
            "config_info": self.config_info,
        }

    def load_state(self, state: dict[str, Any], resolve: Callable[[str], Alert | None]) -> None:
        self.held = _HeldMap()
        for fp, until in state.get("held", {}).items():
            if (a := resolve(fp)) is not None:
                self.held[fp] = Held(a, float(until))
        self.incidents, self.member_of = {}, {}
        for fp, i in state.get("incidents", {}).items():
            members = {m: a for m in i["members"] if (a := resolve(m)) is not None}
            inc = Incident(i["rule"], alert_from_json(i["alert"]), list(i["join_key"]), members)
            self.incidents[fp] = inc
            if inc.open:
                self.member_of.update({m: fp for m in inc.members})
        self.config_info = {k: dict(v) for k, v in state.get("config_info", {}).items()}

    def referenced(self) -> set[str]:
        return set(self.held) | set(self.member_of)
