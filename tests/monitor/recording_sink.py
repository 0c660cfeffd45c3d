"""A stand-in for the alerting engine on the monitor's side of the seam (``alerting.sink.AlertSink``):
it follows the alert book's transition log like the engine does and records what each ``take`` read."""

from __future__ import annotations

from alerting.evidence import Evidence
from alerting.model import Alert
from alerting.sink import DiagnosisNeeds, diagnosis_needs
from alerting.translog import TransitionLog


class RecordingSink:
    def __init__(self) -> None:
        self.submitted: list[Alert] = []  # every transition taken, in log order
        self.calls: list[tuple[list[str], Evidence | None]] = []  # per take that read rows or got evidence
        self.at = 0
        self.log: TransitionLog | None = None

    def follow(self, log: TransitionLog) -> None:
        self.log = log
        self.at = log.head()  # as an engine that took everything before a restart: only what is new counts

    def needs(self) -> DiagnosisNeeds:
        return diagnosis_needs()

    def catch_up(self, evidence: Evidence | None = None) -> int:
        assert self.log is not None, "take before follow: the pipeline wires follow at construction"
        rows = self.log.after(self.at)
        if rows:
            self.at = rows[-1][0]
        alerts = [a for _, a in rows]
        self.submitted += alerts
        if alerts or evidence is not None:
            self.calls.append(([a.name for a in alerts], evidence))
        return len(alerts)
