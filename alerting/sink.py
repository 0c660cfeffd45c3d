"""The seam between whoever evaluates alerts (the monitor) and the alerting engine, as data and one
subscription: ``DiagnosisNeeds`` is what alerting needs measured for its diagnoses, handed to the monitor
as data when it is built; ``LogFollower`` is the engine as the monitor's pipeline meets it, once, at
build time: it subscribes to the alert book's transition log (``alerting.translog``).

Nothing crosses at runtime but rows of that log: transitions and the evidence snapshots that explain
them, written in the book's transactions and read by the engine on its own thread and connection.
``AlertSink.views`` (``AlertViews``) is what the monitor's HTTP surface (console, API) shows of the engine
and changes in it, on the listener's thread, never on the scrape loop's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from alerting.correlate import REDIAGNOSE_S
from alerting.model import Alert
from alerting.procedures import EVIDENCE_SERIES, TRIGGER_ALERTS
from alerting.translog import TransitionLog


@dataclass(frozen=True)
class DiagnosisNeeds:
    """``trigger_alerts``: the alerts a diagnosis procedure explains (evidence is captured while one
    fires); ``rediagnose_s``: how often that evidence is measured again; ``series_read``: the series the
    procedures read (the monitor keeps their history and copies them into the evidence)."""

    trigger_alerts: frozenset[str]
    rediagnose_s: float
    series_read: frozenset[str]


def diagnosis_needs() -> DiagnosisNeeds:
    """What this version's diagnosis procedures read; the same for every engine."""
    return DiagnosisNeeds(TRIGGER_ALERTS, REDIAGNOSE_S, EVIDENCE_SERIES)


class LogFollower(Protocol):
    def follow(self, log: TransitionLog) -> None:
        """Subscribe to ``log`` (woken after each commit) and read it from the cursor last committed."""


class AlertViews(Protocol):
    """What the monitor's HTTP surface (API, console) shows of the engine and changes in it
    (``alerting.engine_views.EngineViews``)."""

    def alerts(self) -> list[dict[str, Any]]: ...

    def incidents(self) -> list[dict[str, Any]]: ...

    def mute_status(self, alerts: Sequence[Alert]) -> dict[str, dict[str, Any]]:
        """Alertmanager's ``status`` of each alert (``state``, ``silencedBy``, ``inhibitedBy``) by fingerprint."""

    def runbook_base(self) -> str:
        """Where a runbook given as a repository path is read (``runbook_base_url``; "" when unset), so the
        console links it as the chat messages do."""

    def deliveries(self, fingerprint: str) -> list[dict[str, Any]]:
        """The notifications that carried this alert and each one's outcome, oldest first."""

    def silences(self) -> list[dict[str, Any]]: ...

    def add_silence(self, matchers: Sequence[str | dict[str, Any]], duration_s: float | None = None,
                    ends_at: float | None = None, created_by: str = "verl-monitor", comment: str = "",
                    starts_at: float | None = None) -> str: ...

    def expire_silence(self, silence_id: str) -> bool: ...


class AlertSink(LogFollower, Protocol):
    """The engine as the daemon builds it: subscribed once, then started, shown (``views``, and its
    health on /healthz) and closed."""

    views: AlertViews

    def start(self, monitor_url: str = "") -> None:
        """Daemon mode: following the log, timers and delivery workers in threads of their own; chat
        links open ``monitor_url`` (the console) unless the engine's config names one."""

    def problems(self) -> list[str]:
        """/healthz reasons: delivery workers stuck or dead, outcomes not written, transitions not taken."""

    def oldest_undelivered(self) -> float | None: ...

    def close(self) -> None: ...
