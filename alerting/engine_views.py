"""What people see of the alerting engine and what they change (the monitor's API and console,
``verl-alert``): its alerts, incidents, deliveries and silences. ``AlertEngine`` (``alerting.engine``) holds
one as ``views``; it reads the engine's stages through ``EngineParts`` (public names only) at call time,
under the engine's lock, because a failed write rebuilds them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from alerting.clock import Clock
from alerting.config import AlertingConfig
from alerting.correlate import Correlator
from alerting.dispatch import Dispatcher
from alerting.durable import STORAGE_ERRORS, StorageHealth
from alerting.inhibit import Inhibitor
from alerting.matchers import matcher_from_json
from alerting.model import Alert
from alerting.outbox import Outbox
from alerting.silence import SilenceStore


class EngineParts(Protocol):
    """The engine as its views read it."""

    lock: threading.RLock
    config: AlertingConfig
    clock: Clock
    health: StorageHealth
    history: dict[str, Alert]
    correlator: Correlator
    silences_store: SilenceStore
    inhibitor: Inhibitor
    outbox: Outbox
    dispatcher: Dispatcher

    def muted(self, now: float) -> Callable[[Alert], bool]: ...

    def transaction(self, op: str, reload: bool = True) -> AbstractContextManager[None]: ...


class EngineViews:
    """The engine's alerts, incidents, deliveries and silences, as people see and change them."""

    def __init__(self, engine: EngineParts) -> None:
        self.engine = engine

    def alerts(self) -> list[dict[str, Any]]:
        with self.engine.lock:
            now = self.engine.clock.now()
            muted = self.engine.muted(now)
            out = []
            for a in self.engine.history.values():
                state = self.engine.correlator.state_of(a.fingerprint) or ("suppressed" if muted(a) else "active")
                out.append(dict(a.to_json(), value=a.value, state=state))
            return out

    def runbook_base(self) -> str:
        return self.engine.config.runbook_base_url or ""

    def mute_status(self, alerts: Sequence[Alert]) -> dict[str, dict[str, Any]]:
        """Each alert's ``status`` as Alertmanager's API v2 shows it, by fingerprint: ``state``
        ("active" or "suppressed"), ``silencedBy`` (the ids of the silences muting it now) and
        ``inhibitedBy`` (the fingerprints of the firing alerts inhibiting it)."""
        with self.engine.lock:
            now = self.engine.clock.now()
            index = self.engine.silences_store.index(now)
            inhibitors = self.engine.inhibitor.inhibited_by(self.engine.dispatcher.active_alerts())
            out = {}
            for a in alerts:
                silenced = sorted(s.id for s in index.matching(a.labels) if s.starts_at <= now < s.ends_at)
                inhibited = inhibitors(a)
                out[a.fingerprint] = {"state": "suppressed" if silenced or inhibited else "active",
                                      "silencedBy": silenced, "inhibitedBy": inhibited}
            return out

    def deliveries(self, fingerprint: str) -> list[dict[str, Any]]:
        """The notifications that carried this alert (until pruned), oldest first: receiver, firing or
        resolved, queued when, and the outcome (pending, delivered, failed) with attempts and last error."""
        with self.engine.lock:
            rows = self.engine.outbox.conn.execute(
                "SELECT receiver, status, state, attempts, last_error, created_at, payload FROM outbox "
                "WHERE instr(payload, ?) > 0 ORDER BY id", (fingerprint,)).fetchall()
        out = []
        for receiver, status, state, attempts, error, created, payload in rows:
            try:
                carried = fingerprint in json.loads(payload).get("fingerprints", [])
            except (ValueError, AttributeError):
                carried = False
            if carried:
                out.append({"receiver": receiver, "status": status, "outcome": state, "attempts": attempts,
                            "error": error, "at": created})
        return out

    def incidents(self) -> list[dict[str, Any]]:
        with self.engine.lock:
            return self.engine.correlator.incident_records()

    def silences(self) -> list[dict[str, Any]]:
        with self.engine.lock:
            now = self.engine.clock.now()
            return [s.to_json(now) for s in self.engine.silences_store.all()]

    def add_silence(self, matchers: Sequence[str | dict[str, Any]], duration_s: float | None = None,
                    ends_at: float | None = None, created_by: str = "verl-monitor", comment: str = "",
                    starts_at: float | None = None) -> str:
        """Matchers as ``name="value"`` strings or Alertmanager API v2 matcher objects. Raises ValueError."""
        with self.engine.lock:
            now = self.engine.clock.now()
            texts = [m if isinstance(m, str) else str(matcher_from_json(m)) for m in matchers]
            start = now if starts_at is None else starts_at
            end = ends_at if ends_at is not None else start + (duration_s if duration_s is not None else 3600.0)
            with self.engine.transaction("silence", reload=False):
                sid = self.engine.silences_store.add(texts, start, end, created_by, comment, now=now)
            self.save_silences()
            return sid

    def expire_silence(self, silence_id: str) -> bool:
        with self.engine.lock:
            with self.engine.transaction("silence", reload=False):
                done = self.engine.silences_store.expire(silence_id, self.engine.clock.now())
            self.save_silences()
            return done

    def save_silences(self) -> None:
        """The silences' snapshot (``silences.json``) rewritten; a failure is the storage health's, not raised."""
        try:
            self.engine.silences_store.save_snapshot()
        except STORAGE_ERRORS as exc:
            self.engine.health.failed("silences.json", "snapshot", exc)
        else:
            self.engine.health.ok("silences.json")
