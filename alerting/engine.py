"""The alerting pipeline behind one object: correlate -> route (group / inhibit / silence / repeat) ->
outbox -> notifiers, durable in SQLite. The monitor calls ``submit`` with the alerts it evaluates and
``tick`` on its loop; replay and tests call ``drain`` to run simulated time forward until every
notification is out."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import prometheus_client

from alerting.clock import Clock
from alerting.config import AlertingConfig, ConfigError, load_config
from alerting.correlate import Correlator, load_rules
from alerting.dispatch import Dispatcher
from alerting.inhibit import Inhibitor
from alerting.matchers import matcher_from_json
from alerting.metrics import AlertingMetrics
from alerting.model import Alert, alert_from_json
from alerting.notifiers import Notifier, build_notifier
from alerting.outbox import Outbox
from alerting.route import Router
from alerting.silence import SilenceStore
from alerting.store import load_state, open_db, save_state

HISTORY = 5000  # alerts kept for the JSON API; older resolved ones are dropped first


class AlertEngine:
    """correlate -> route (group/inhibit/silence/repeat) -> outbox -> notifiers; durable in SQLite."""

    def __init__(self, config: AlertingConfig, db_path: str | Path, clock: Clock,
                 on_record: Callable[[dict], None] | None = None,
                 registry: prometheus_client.CollectorRegistry | None = None,
                 transport: httpx.BaseTransport | None = None, sign_clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock
        self.on_record = on_record or (lambda rec: None)
        self.metrics = AlertingMetrics(registry)
        self.lock = threading.RLock()
        try:
            self.conn = open_db(db_path)
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(f"{db_path}: cannot open the alerting state database ({exc}); "
                              "pass a writable path") from None
        self.correlator = Correlator(load_rules(config.correlation_files))
        self.router = Router(config.route, config.receivers)
        self.inhibitor = Inhibitor(config.inhibit_rules)
        self.silences_store = SilenceStore(self.conn)
        self.outbox = Outbox(self.conn, config.outbox)
        self.notifiers: dict[str, Notifier] = {
            name: build_notifier(rc, sign_clock=sign_clock, transport=transport)
            for name, rc in config.receivers.items()}
        for n in self.notifiers.values():
            if hasattr(n, "external_url"):
                n.external_url = config.monitor_url  # type: ignore[attr-defined]
        self.dispatcher = Dispatcher(config, self.outbox, self.notifiers, self.metrics, self._record)
        self.history: dict[str, Alert] = {}
        self._restore()

    @classmethod
    def from_file(cls, path: str | Path, db_path: str | Path, clock: Clock,
                  on_record: Callable[[dict], None] | None = None,
                  registry: prometheus_client.CollectorRegistry | None = None, **kw: Any) -> AlertEngine:
        return cls(load_config(path), db_path, clock, on_record, registry, **kw)

    # -- pipeline ------------------------------------------------------------------------------------
    def _record(self, rec: dict[str, Any]) -> None:
        self.on_record(rec)

    def set_config_info(self, node: str, labels: dict[str, str]) -> None:
        with self.lock:
            info = {k: str(v) for k, v in labels.items() if k != "__name__"}
            if self.correlator.config_info.get(node) != info:
                self.correlator.config_info[node] = info
                self._save()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """Stage changes and their snapshot commit together, so a crash cannot queue a notification
        whose notification-log entry is lost (or the reverse). No HTTP happens inside."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def submit(self, alerts: Sequence[Alert]) -> None:
        with self.lock, self._transaction():
            now = self.clock.now()
            self.conn.executemany(
                "INSERT INTO alerts(fingerprint, value, seen_at) VALUES(?,?,?) ON CONFLICT(fingerprint) "
                "DO UPDATE SET value=excluded.value, seen_at=excluded.seen_at",
                [(a.fingerprint, json.dumps(dict(a.to_json(), value=a.value)), now) for a in alerts])
            for alert in alerts:
                self.history[alert.fingerprint] = alert
                routed, incidents = self.correlator.observe(alert, now)
                for inc in incidents:
                    if inc.open:
                        self.metrics.incidents.labels(inc.rule).inc()
                    self._record(inc.record())
                for a in routed:
                    self.router.add(a, now)
            self._trim_history()
            self._flush(now)
            self._save()

    def _muted_fn(self, now: float) -> Callable[[Alert], bool]:
        active = self.router.active_alerts()
        silences = [s for s in self.silences_store.all() if s.state(now) == "active"]

        def muted(a: Alert) -> bool:
            return any(all(m.matches(a.labels) for m in s.matchers) for s in silences) or \
                self.inhibitor.muted(a, active)
        return muted

    def _flush(self, now: float) -> bool:
        """Expire holds and flush due groups into the outbox; True when state changed."""
        released = self.correlator.expire(now)
        for a in released:
            self.router.add(a, now)
        notes = self.router.flush_due(now, self._muted_fn(now), self.correlator.expand)
        for n in notes:
            self.outbox.put(n, now)
        self.metrics.outbox_depth.set(self.outbox.depth())
        return bool(released or notes)

    def tick(self) -> None:
        with self.lock:
            now = self.clock.now()
            with self._transaction():
                if self._flush(now):  # a quiet tick (the common case in replay) writes nothing
                    self._save()
            if self.dispatcher.run(now) > 0:  # each outcome is committed as it happens
                self._save()
            self.metrics.outbox_depth.set(self.outbox.depth())

    def pending(self) -> bool:
        """Anything still to be sent: held alerts, groups with news, or queued notifications."""
        with self.lock:
            now = self.clock.now()
            return bool(self.correlator.held or self.router.next_due(self._muted_fn(now)) is not None
                        or self.outbox.depth())

    def drain(self, max_wait_s: float) -> bool:
        """Deliver everything pending, moving time forward (a SimulatedClock advances, a SystemClock
        sleeps); True when nothing is left to send."""
        deadline = self.clock.now() + max_wait_s
        while True:
            self.tick()
            with self.lock:
                now = self.clock.now()
                times = [t for t in (self.correlator.next_due(), self.router.next_due(self._muted_fn(now)),
                                     self.dispatcher.next_due(now)) if t is not None]
            if not times:
                return True
            nxt = max(min(times), now)
            if nxt > deadline or (nxt <= now and now >= deadline):
                return False
            # nxt == now only when a delivery could not start (e.g. a two-message WeCom send with one slot
            # left); a short step lets the budget refill instead of spinning.
            self.clock.sleep(nxt - now if nxt > now else min(0.5, deadline - now))

    # -- JSON API for the monitor ----------------------------------------------------------------------
    def _trim_history(self) -> None:
        if len(self.history) > HISTORY:
            keep = self.correlator.referenced() | {a.fingerprint for a in self.router.active_alerts()}
            old = sorted((a for a in self.history.values() if a.fingerprint not in keep),
                         key=lambda a: (a.status == "firing", a.ends_at or a.starts_at))
            gone = old[: len(self.history) - HISTORY]
            for a in gone:
                self.history.pop(a.fingerprint, None)
            self.conn.executemany("DELETE FROM alerts WHERE fingerprint=?", [(a.fingerprint,) for a in gone])

    def alerts(self) -> list[dict[str, Any]]:
        with self.lock:
            now = self.clock.now()
            muted = self._muted_fn(now)
            out = []
            for a in self.history.values():
                if a.fingerprint in self.correlator.held:
                    state = "held"
                elif a.fingerprint in self.correlator.member_of:
                    state = "in_incident"
                else:
                    state = "suppressed" if muted(a) else "active"
                out.append(dict(a.to_json(), value=a.value, state=state))
            return out

    def incidents(self) -> list[dict[str, Any]]:
        with self.lock:
            return [inc.record() for inc in self.correlator.incidents.values()]

    def silences(self) -> list[dict[str, Any]]:
        with self.lock:
            now = self.clock.now()
            return [s.to_json(now) for s in self.silences_store.all()]

    def add_silence(self, matchers: Sequence[str | dict[str, Any]], duration_s: float | None = None,
                    ends_at: float | None = None, created_by: str = "verl-monitor", comment: str = "",
                    starts_at: float | None = None) -> str:
        """Matchers as ``name="value"`` strings or Alertmanager API v2 matcher objects. Raises ValueError."""
        with self.lock:
            now = self.clock.now()
            texts = [m if isinstance(m, str) else str(matcher_from_json(m)) for m in matchers]
            start = now if starts_at is None else starts_at
            end = ends_at if ends_at is not None else start + (duration_s if duration_s is not None else 3600.0)
            return self.silences_store.add(texts, start, end, created_by, comment)

    def expire_silence(self, silence_id: str) -> bool:
        with self.lock:
            return self.silences_store.expire(silence_id, self.clock.now())

    # -- durability --------------------------------------------------------------------------------------
    def _save(self) -> None:
        save_state(self.conn, "engine", {
            "correlator": self.correlator.to_state(), "router": self.router.to_state(),
            "limiters": {k: v.to_state() for k, v in self.dispatcher.limiters.items()},
            "saved_at": time.time(),
        })

    def _restore(self) -> None:
        state = load_state(self.conn, "engine")
        rows = self.conn.execute("SELECT value FROM alerts ORDER BY seen_at").fetchall()
        self.history = {a.fingerprint: a for a in (alert_from_json(json.loads(r[0])) for r in rows)}
        self.correlator.load_state(state.get("correlator", {}), self.history.get)

        def resolve(fp: str) -> Alert | None:
            inc = self.correlator.incidents.get(fp)
            return inc.alert if inc else self.history.get(fp)
        self.router.load_state(state.get("router", {}), resolve)
        for k, v in state.get("limiters", {}).items():
            if k in self.dispatcher.limiters:
                self.dispatcher.limiters[k].load_state(v)

    def close(self) -> None:
        with self.lock:
            self._save()
            for n in self.notifiers.values():
                n.close()
            self.conn.close()
