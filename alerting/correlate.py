"""Correlation stage: co-occurring alerts become one root-cause incident.

Alerts that can be members of a rule are held for the rule's window before routing. When a rule's
members are all present (same ``join`` labels), they are folded into an incident ``Alert`` whose
annotations carry ``root_cause`` and ``suggestion`` rendered from the members and the live
``verl_config_info``; the members then travel only inside the incident. Held alerts that never form an
incident are released to routing when their window ends, but stay candidates for as long as they fire:
members that arrive minutes apart still correlate.

A rule that names diagnosis procedures (``diagnose:``, see ``alerting/procedures.py``) gets its root cause
and suggestion from them, read from the ``Evidence`` the monitor hands forward with the alerts (``note_evidence``),
instead of its templates; and when a procedure measured a cause, one member alert is enough to form the
incident."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError

from alerting.correlation_rules import CorrelationRule, compiled_template, load_rules
from alerting.evidence import Evidence, EvidenceReader
from alerting.findings import Case
from alerting.model import Alert, alert_from_json
from alerting.procedures import EXPLAINS, TRIGGERS, diagnose

__all__ = ["REDIAGNOSE_S", "CorrelationRule", "Correlator", "Held", "Incident", "load_rules"]  # rules load here too


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
    revision: int = 0  # > 0: re-diagnosed after a member joined (the record is an update, not a new incident)

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
        return " ".join(compiled_template(text).render(**ctx).split())
    except TemplateError as exc:
        return f"(template failed: {exc})"


class _NamedMap(dict[str, Any]):
    """Alerts (or holds) by fingerprint that also count them by alertname, so a rule whose required
    members are not there at all is ruled out without scanning every alert (a 5000-alert webhook made
    that scan quadratic)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, int] = {}

    @staticmethod
    def _name(value: Any) -> str:
        return value.alert.name if isinstance(value, Held) else value.name

    def __setitem__(self, fp: str, value: Any) -> None:
        old = self.get(fp)
        if old is not None:
            self._count(self._name(old), -1)
        super().__setitem__(fp, value)
        self._count(self._name(value), 1)

    def __delitem__(self, fp: str) -> None:
        self._count(self._name(self[fp]), -1)
        super().__delitem__(fp)

    def pop(self, fp: str, *default: Any) -> Any:  # type: ignore[override]
        if fp in self:
            self._count(self._name(self[fp]), -1)
        return super().pop(fp, *default)

    def update(self, *args: Any, **kw: Any) -> None:  # type: ignore[override]
        for fp, value in dict(*args, **kw).items():
            self[fp] = value

    def _count(self, name: str, d: int) -> None:
        n = self.names.get(name, 0) + d
        if n > 0:
            self.names[name] = n
        else:
            self.names.pop(name, None)


def incident_row(inc: Incident) -> dict[str, Any]:
    """One incident as saved: its alert, rule, join key and member fingerprints."""
    return {"rule": inc.rule, "alert": inc.alert.to_json(), "join_key": inc.join_key, "members": sorted(inc.members)}


REDIAGNOSE_S = 5.0  # how often members still waiting for evidence are diagnosed again


class Correlator:
    def __init__(self, rules: list[CorrelationRule]) -> None:
        self.rules = rules
        self.held: dict[str, Held] = _NamedMap()
        self.live: dict[str, Alert] = _NamedMap()  # firing members outside incidents, held or already routed alone
        self.released: set[str] = set()   # members routed alone: their updates keep reaching routing
        self.incidents: dict[str, Incident] = {}
        self.member_of: dict[str, str] = {}  # member fingerprint -> incident fingerprint (open incidents)
        self.config_info: dict[str, dict[str, str]] = {}
        self.evidence: EvidenceReader = Evidence()
        self._next_diagnosis = -math.inf

    # -- what the engine may ask (it never reaches into the dictionaries below) ------------------------
    def state_of(self, fp: str) -> str | None:
        """``held`` (waiting out its window), ``in_incident`` (travels inside one), or None."""
        if fp in self.held:
            return "held"
        return "in_incident" if fp in self.member_of else None

    def holds(self, fp: str) -> bool:
        return fp in self.held

    def incident_records(self) -> list[dict[str, Any]]:
        return [inc.record() for inc in self.incidents.values()]

    def incident(self, fp: str) -> Incident | None:
        return self.incidents.get(fp)

    def all_incidents(self) -> dict[str, Incident]:
        """The incidents by fingerprint (a copy: for saving each in its own row)."""
        return dict(self.incidents)

    def forget_incidents(self, cutoff: float, keep: set[str]) -> bool:
        """Drop incidents resolved before ``cutoff`` (except ``keep``: still routed); True when any went."""
        gone = [fp for fp, inc in self.incidents.items()
                if not inc.open and (inc.alert.ends_at or inc.alert.starts_at) < cutoff and fp not in keep]
        for fp in gone:
            del self.incidents[fp]
        return bool(gone)

    def note_evidence(self, evidence: Evidence) -> bool:
        """The monitor's newest measurements: diagnosed against on the next flush (members still
        waiting are diagnosed again at once, as their evidence may just have arrived). True when the
        config labels changed (they are part of the saved state)."""
        self.evidence = evidence
        self._next_diagnosis = -math.inf
        config = {node: dict(info) for node, info in evidence.config.items()}
        changed = any(self.config_info.get(node) != info for node, info in config.items())
        self.config_info.update(config)
        return changed

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
        alone = [alert] if fp in self.released else []  # routing already knows it: keep it current
        if alert.status != "firing":
            self.live.pop(fp, None)
            self.released.discard(fp)
        if fp in self.member_of:
            inc = self.incidents[self.member_of[fp]]
            inc.members[fp] = alert
            if all(m.status == "resolved" for m in inc.members.values()):
                inc.alert.status, inc.alert.ends_at = "resolved", now
                for m in inc.members:
                    self.member_of.pop(m, None)
                return alone + [inc.alert], [inc]
            return alone, []
        rules = self._rules_for(alert.name)
        if not rules:
            return [alert], []
        if fp in self.held:
            self.held[fp].alert = alert
        elif alert.status == "firing":
            self.live[fp] = alert
            for inc in self.incidents.values():
                rule = next((r for r in rules if r.name == inc.rule), None)
                if inc.open and rule and [alert.labels.get(k, "") for k in rule.join] == inc.join_key:
                    paged = inc.alert.annotations.get("diagnosis", "").split(",")  # causes the page named
                    self._absorb(inc, alert)
                    changed = self._update(inc, rule)
                    if rule.diagnose and not alone and not any(alert.name in EXPLAINS.get(c, ()) for c in paged):
                        # the page already sent does not explain this member: it pages on its own as well
                        self.released.add(fp)
                        alone = [alert]
                    if changed:
                        return alone + [inc.alert], [inc]
                    return alone, []
            if not alone:
                self.held[fp] = Held(alert, now + max(r.window_s for r in rules))
        else:
            return [alert], []  # resolved without ever being held: nothing to fold it into
        if alert.status == "firing":
            self.live[fp] = alert
        formed = [inc for r in rules if (inc := self._try_form(r, alert, now))]
        return alone + [i.alert for i in formed], formed

    def _absorb(self, inc: Incident, alert: Alert) -> None:
        inc.members[alert.fingerprint] = alert
        self.member_of[alert.fingerprint] = inc.alert.fingerprint
        self.held.pop(alert.fingerprint, None)
        self.live.pop(alert.fingerprint, None)

    def _try_form(self, rule: CorrelationRule, trigger: Alert, now: float) -> Incident | None:
        names = getattr(self.live, "names", None)
        if names is not None:
            together = all(n in names for n in rule.all_of) and sum(n in names for n in set(rule.any_of)) >= rule.min_any
            diagnosable = any(n in names for p in rule.diagnose for n in TRIGGERS.get(p, ()))
            if not together and not diagnosable:
                return None  # neither the members nor a procedure's trigger fire: no need to look further
        key = [trigger.labels.get(k, "") for k in rule.join]
        members = rule.members
        cands = [a for a in self.live.values() if a.name in members and a.status == "firing"
                 and [a.labels.get(k, "") for k in rule.join] == key]
        if not cands:
            return None
        present = {a.name for a in cands}
        labels = dict(zip(rule.join, key, strict=True))
        last = {a.name: a for a in cands}  # one view per member name (the last one seen), as before
        ctx = {"labels": labels, "present": sorted(present), "members": {n: _view(a) for n, a in last.items()},
               "config": self._config_for(labels.get("node", trigger.labels.get("node", "")))}
        diag = diagnose(rule.diagnose, Case(cands, ctx["config"], self.evidence)) if rule.diagnose else None
        caused = diag is not None and diag.cause
        if not caused and (rule.require_cause or not rule.satisfied(present, ctx)):
            return None
        inc_labels = {"alertname": rule.name, "severity": rule.severity, **{k: v for k, v in labels.items() if v}}
        annotations = {"summary": _render(rule.summary, ctx), "runbook": rule.runbook,
                       "description": "Correlated: " + ", ".join(sorted(present))}
        if diag is not None:
            annotations.update(diag.annotations())
        else:
            annotations.update(root_cause=_render(rule.root_cause, ctx), suggestion=_render(rule.suggestion, ctx))
        inc = Incident(rule.name, Alert(labels=inc_labels, annotations={k: v for k, v in annotations.items() if v},
                                        starts_at=min(a.starts_at or now for a in cands)), key)
        self.incidents[inc.alert.fingerprint] = inc
        for a in cands:
            self._absorb(inc, a)
        return inc

    def _update(self, inc: Incident, rule: CorrelationRule) -> bool:
        """Diagnose an open incident again with its new member; True when its texts changed."""
        if not rule.diagnose:
            return False
        firing = [a for a in inc.members.values() if a.status == "firing"]
        config = self._config_for(inc.alert.labels.get("node", firing[0].labels.get("node", "") if firing else ""))
        diag = diagnose(rule.diagnose, Case(firing, config, self.evidence))
        ann = diag.annotations()
        ann["description"] = "Correlated: " + ", ".join(sorted({a.name for a in inc.members.values()}))
        if not diag.cause and inc.alert.annotations.get("diagnosis", "undetermined") != "undetermined":
            return False  # never replace a measured cause by "not determined"
        if all(inc.alert.annotations.get(k) == v for k, v in ann.items()):
            return False
        inc.alert.annotations.update(ann)
        inc.revision += 1
        return True

    def rediagnose(self, now: float) -> list[Incident]:
        """Members still waiting (held or routed alone) are diagnosed again as evidence arrives: the
        kl_coef gauge may be scraped a few seconds after the KL alert fired."""
        if now < self._next_diagnosis or not self.live:
            return []
        self._next_diagnosis = now + REDIAGNOSE_S
        formed = []
        for rule in (r for r in self.rules if r.diagnose):
            seen: set[tuple[str, ...]] = set()
            for a in list(self.live.values()):
                k = tuple(a.labels.get(j, "") for j in rule.join)
                if a.name in rule.members and k not in seen and a.fingerprint in self.live:
                    seen.add(k)
                    if (inc := self._try_form(rule, a, now)) is not None:
                        formed.append(inc)
        return formed

    def expire(self, now: float) -> list[Alert]:
        """Held alerts whose window ended without an incident: route them on their own."""
        due = [fp for fp, h in self.held.items() if h.until <= now]
        self.released.update(fp for fp in due if self.held[fp].alert.status == "firing")
        return [self.held.pop(fp).alert for fp in due]

    def next_due(self) -> float | None:
        return min((h.until for h in self.held.values()), default=None)

    def expand(self, alert: Alert) -> list[str]:
        """Fingerprints an alert carries: an incident carries its members."""
        inc = self.incidents.get(alert.fingerprint)
        return [alert.fingerprint] + (sorted(inc.members) if inc else [])

    # -- durable state -------------------------------------------------------------------------------
    def to_state(self, with_incidents: bool = True) -> dict[str, Any]:
        """Member and held alerts by fingerprint (they live in the engine's alert table); without the
        incidents when the engine saves each in a row of its own (``incident_row``)."""
        state: dict[str, Any] = {
            "held": {fp: h.until for fp, h in self.held.items()},
            "live": sorted(self.live), "released": sorted(self.released),
            "config_info": self.config_info,
        }
        if with_incidents:
            state["incidents"] = {fp: incident_row(i) for fp, i in self.incidents.items()}
        return state

    def load_state(self, state: dict[str, Any], resolve: Callable[[str], Alert | None]) -> None:
        self.held = _NamedMap()
        for fp, until in state.get("held", {}).items():
            if (a := resolve(fp)) is not None:
                self.held[fp] = Held(a, float(until))
        self.live = _NamedMap()
        self.live.update({fp: a for fp in state.get("live", []) if (a := resolve(fp)) is not None})
        self.live.update({fp: h.alert for fp, h in self.held.items() if h.alert.status == "firing"})
        self.released = set(state.get("released", []))
        self.incidents, self.member_of = {}, {}
        for fp, i in state.get("incidents", {}).items():
            members = {m: a for m in i["members"] if (a := resolve(m)) is not None}
            inc = Incident(i["rule"], alert_from_json(i["alert"]), list(i["join_key"]), members)
            self.incidents[fp] = inc
            if inc.open:
                self.member_of.update({m: fp for m in inc.members})
        self.config_info = {k: dict(v) for k, v in state.get("config_info", {}).items()}

    def referenced(self) -> set[str]:
        return set(self.held) | set(self.member_of) | set(self.live)
