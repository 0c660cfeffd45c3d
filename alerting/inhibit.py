"""Inhibition (Alertmanager semantics): a firing source alert mutes target alerts that share the
``equal`` labels. Incidents already carry their members, so these rules are for the rest, e.g. a P0 on
a node muting that node's P2/P3 noise."""

from __future__ import annotations

from collections.abc import Iterable

from alerting.config import InhibitRule
from alerting.matchers import all_match
from alerting.model import Alert


class Inhibitor:
    def __init__(self, rules: list[InhibitRule]) -> None:
        self.rules = rules

    def muted(self, target: Alert, active: Iterable[Alert]) -> bool:
        rules = [r for r in self.rules if all_match(r.target_matchers, target.labels)]
        if not rules:
            return False
        sources = [a for a in active if a.status == "firing" and a.fingerprint != target.fingerprint]
        return any(all_match(r.source_matchers, s.labels)
                   and all(s.labels.get(k, "") == target.labels.get(k, "") for k in r.equal)
                   for r in rules for s in sources)
