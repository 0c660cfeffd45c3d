"""A stand-in for the alerting engine on the monitor's side of the seam (``alerting.sink.LogFollower``):
it subscribes to the alert book's transition log like the engine does and records what each read took
(transitions, and the evidence snapshot written with them)."""

from __future__ import annotations

from alerting.evidence import Evidence
from alerting.model import Alert
from alerting.translog import TransitionLog


class RecordingSink:
    def __init__(self) -> None:
        self.submitted: list[Alert] = []  # every transition taken, in log order
        self.calls: list[tuple[list[str], Evidence | None]] = []  # per read that took rows or evidence
        self.at = 0
        self.evidence_at = 0
        self.log: TransitionLog | None = None

    def follow(self, log: TransitionLog) -> None:
        self.log = log.reader()
        self.at = log.head()  # as an engine that took everything before a restart: only what is new counts
        self.evidence_at = log.evidence_head()
        log.subscribe(self.catch_up)  # simulated time: read at once when the book commits

    def catch_up(self) -> int:
        assert self.log is not None, "take before follow: the pipeline wires follow at construction"
        rows = self.log.after(self.at)
        if rows:
            self.at = rows[-1][0]
        found = self.log.evidence_after(self.evidence_at)
        evidence = None
        if found is not None:
            self.evidence_at, evidence = found
        alerts = [a for _, a in rows if a is not None]
        self.submitted += alerts
        if alerts or evidence is not None:
            self.calls.append(([a.name for a in alerts], evidence))
        return len(alerts)
