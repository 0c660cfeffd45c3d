"""Alert state machine: pending -> firing -> resolved, one state per fingerprint, durable in SQLite.

Several rules may yield the same fingerprint (e.g. the verl and DCGM families for one GPU); the alert
is active while any of them is. Only transitions are written and emitted, so a restart restores the
firing alerts and never repeats a record. Each transition is appended to the transition log
(``alerting.translog``, one row per (fingerprint, status, startsAt)) in the same transaction as the
alert's ``alerts`` row, with the evidence snapshot that explains it: the log is the one record of alert
state the alerting engine follows (on its own thread and connection), written once, here. A transition
is emitted only after its rows are committed; a write that fails is kept queued and retried (see
``AlertBook``).

An alert can also arrive already evaluated, from Prometheus through the Alertmanager webhook. Its
fingerprint ignores scrape plumbing (``alerting.model.NON_IDENTITY_LABELS``), so when the monitor's own
rules and Prometheus see one outage they share one state: it fires (and pages) once, and resolves only
when neither side holds it any more.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerting import translog
from alerting.durable import STORAGE_ERRORS, Backoff, StorageHealth, committed, open_sqlite, reappear
from alerting.evidence import Evidence
from alerting.model import Alert
from alerting.translog import TransitionLog
from monitor.book.deadlines import Deadlines
from monitor.evaluation.instances import AlertState, Annotated, Candidate, Evaluation

Explain = Callable[[list[Alert]], Evidence]  # the evidence measured for new transitions


SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
  fingerprint TEXT PRIMARY KEY, labels TEXT NOT NULL, annotations TEXT NOT NULL, status TEXT NOT NULL,
  starts_at REAL NOT NULL, ends_at REAL, value REAL, updated_at REAL NOT NULL);
"""
# Added after the first release; databases from before get them by ALTER TABLE on open.
_LATER_COLUMNS = {"generator_url": "TEXT NOT NULL DEFAULT ''", "external": "INTEGER NOT NULL DEFAULT 0",
                  "plot_file": "TEXT NOT NULL DEFAULT ''"}


@dataclass
class _Write:
    """A queued write: a transition (``alert`` set: its event row and state row) or a flags update."""

    fp: str
    alert: Alert | None
    row: tuple[Any, ...]
    at: float


class AlertBook:
    """Owns alert states. ``update`` takes the evaluator's active candidates at ``now`` and returns
    the transitions (firing and resolved ``Alert`` objects) to hand to the alerting engine.

    Commit, then act: a transition changes the in-memory state at once (detection and the API go on
    while the disk is full) but is returned -- and so paged -- only once its row is committed. Writes
    that fail (disk full, read-only, I/O error) stay queued in order and are retried with backoff on
    later calls; each failure is reported to ``health``."""

    DB = "state.db"

    def __init__(self, db_path: str | Path | None = None, restore_grace_s: float = 600.0,
                 url_prefix: str = "", health: StorageHealth | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.RLock()
        self.states: dict[str, AlertState] = {}
        self._seq = itertools.count()
        # fingerprints of firing states the evaluator stopped holding (restored, cleared and kept firing for a
        # while, or held by Prometheus alone since), each due when its keep_firing_for or restore grace may
        # have run out: an update looks at the ones that changed and at those due, never at every state nor
        # at every loose one (at 1 h of the 1000-GPU load, 171 kept-firing leak alerts were most of a quiet
        # tick's book); one held by Prometheus, or that only ever came from it, waits for the webhook
        self._loose = Deadlines()
        # (alertname, severity) -> firing states, kept as states enter and leave firing: the firing gauge is
        # refreshed on every tick with a transition, and counting the states then cost O(firing) -- at 6 h of
        # the 1000-GPU load, ~800 firing, a third of such a tick (benchmarks/monitor_memory.py)
        self._firing: Counter[tuple[str, str]] = Counter()
        self.restore_grace_s = restore_grace_s
        self.url_prefix = url_prefix  # generatorURL of own alerts: <url_prefix>/<fingerprint> (the monitor's API)
        self.health = health or StorageHealth()
        self._db: sqlite3.Connection | None = None
        self._path = Path(db_path) if db_path is not None else None
        self._unwritten: list[_Write] = []  # transitions and flag changes not yet committed, in order
        self._backoff = Backoff(monotonic)
        self._evidence: Evidence | None = None  # a snapshot not yet committed, written with the next commit
        self.log = TransitionLog.in_memory()  # what the alerting engine follows: in memory without a database
        if self._path is not None:
            self.DB = self._path.name
            self._db = open_sqlite(self._path, SCHEMA, self.health)
            translog.create(self._db)
            self.log = TransitionLog(self._db, self._path)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(alerts)")}
            for col, decl in _LATER_COLUMNS.items():
                if col not in have:
                    self._db.execute(f"ALTER TABLE alerts ADD COLUMN {col} {decl}")
            self._restore()

    def _restore(self) -> None:
        assert self._db is not None
        for fp, labels, ann, starts, value, url, external, plot in self._db.execute(
                "SELECT fingerprint, labels, annotations, starts_at, value, generator_url, external, plot_file "
                "FROM alerts WHERE status='firing'"):
            # A restored alert waits for its detectors to warm up again before it may resolve.
            self._put(fp, AlertState(json.loads(labels), json.loads(ann), "firing", starts, value=value,
                                     restored=True, keep_firing_for=self.restore_grace_s,
                                     generator_url=url or "", external=bool(external), plot_file=plot or ""))
            self._loose.set(fp, -math.inf)  # looked at on the first update: its grace starts there

    def _put(self, fp: str, st: AlertState) -> None:
        old = self.states.get(fp)
        if old is not None:
            self._count(old, -1)
        st.seq = old.seq if old is not None else next(self._seq)
        self.states[fp] = st
        self._count(st, 1)

    def _drop(self, fp: str) -> None:
        """Take ``fp``'s state out of the book (before a firing one's status changes to resolved)."""
        st = self.states.pop(fp, None)
        self._loose.discard(fp)
        if st is not None:
            self._count(st, -1)

    def _count(self, st: AlertState, sign: int) -> None:
        if st.status == "firing":
            key = (st.labels["alertname"], st.labels.get("severity", "P3"))
            n = self._firing[key] + sign
            if n:
                self._firing[key] = n
            else:
                del self._firing[key]

    def resolved_record(self, fp: str) -> Alert | None:
        """The committed resolve of ``fp`` (the API's view of an alert no longer firing), None when it has none."""
        if self._db is None:
            return None
        with self._lock:
            row = self._db.execute("SELECT labels, annotations, starts_at, ends_at, value, generator_url, plot_file "
                                   "FROM alerts WHERE fingerprint=? AND status='resolved'", (fp,)).fetchone()
        if row is None:
            return None
        return Alert(labels=json.loads(row[0]), annotations=json.loads(row[1]), starts_at=row[2], ends_at=row[3],
                     status="resolved", value=row[4], generator_url=row[5] or "", plot_file=row[6] or "")

    def recently_resolved(self, limit: int = 20) -> list[Alert]:
        """The last ``limit`` committed resolves, newest first (the console's "recently resolved")."""
        if self._db is None:
            return []
        with self._lock:
            rows = self._db.execute("SELECT fingerprint FROM alerts WHERE status='resolved' "
                                    "ORDER BY ends_at DESC LIMIT ?", (limit,)).fetchall()
        return [a for a in (self.resolved_record(r[0]) for r in rows) if a is not None]

    def _url(self, fp: str) -> str:
        return f"{self.url_prefix.rstrip('/')}/{fp}" if self.url_prefix else ""

    @staticmethod
    def _by_fp(candidates: list[Candidate]) -> dict[str, list[Candidate]]:
        by_fp: dict[str, list[Candidate]] = {}
        for c in candidates:
            by_fp.setdefault(c.fp, []).append(c)
        return by_fp

    def starting(self, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates that start firing on the next ``update`` with them (one per fingerprint):
        the ones the annotate stage renders before the book commits them."""
        with self._lock:
            out = []
            for fp, group in self._by_fp(candidates).items():
                ready = [c for c in group if c.ready]
                st = self.states.get(fp)
                if ready and (st is None or st.status != "firing"):
                    out.append(min(ready, key=lambda c: c.since))
            return out

    def update(self, now: float, evaluation: Evaluation, annotations: Mapping[str, Annotated] | None = None,
               evidence: Explain | None = None) -> list[Alert]:
        """``evaluation``: the alert instances that changed (every candidate of a changed fingerprint), the
        fingerprints that hold (a fingerprint in neither has stopped holding) and those that changed.
        ``annotations``: fingerprint -> what the annotate stage rendered for the ``starting`` ones;
        ``evidence``: measures what explains the new transitions, written in their transaction."""
        held = evaluation.held
        with self._lock:
            by_fp = self._by_fp(evaluation.candidates)
            for fp in evaluation.changed:
                if fp in by_fp or fp in held:
                    self._loose.discard(fp)  # held again
            for fp, group in by_fp.items():
                ready = [c for c in group if c.ready]
                st = self.states.get(fp)
                keep = max(c.rule.keep_firing_for_s for c in group)
                if not ready:
                    if st is None or st.status == "resolved":
                        c = min(group, key=lambda c: c.since)
                        self._put(fp, AlertState(dict(c.labels), {}, "pending", c.since, value=c.value))
                    elif st.status == "firing":
                        st.cleared_at = None  # still active, only its `for` restarted: keep firing
                        st.own_active = True
                        st.let_go()
                    continue
                c = min(ready, key=lambda c: c.since)
                if st is not None and st.status == "firing":
                    st.cleared_at, st.value, st.own_active, st.live = None, c.value, True, c.binding
                    if st.restored or st.external:
                        st.restored, st.keep_firing_for = False, keep
                    continue
                done = (annotations or {}).get(fp) or Annotated({})
                st = AlertState(dict(c.labels), dict(done.annotations), "firing", c.since, value=c.value,
                                keep_firing_for=keep, generator_url=self._url(fp), own_active=True,
                                plot_file=done.plot_file, live=c.binding)
                self._put(fp, st)
                self._transition(fp, st, now)
            for fp in self._unheld(by_fp, held, evaluation.changed | self._loose.pop_due(now)):
                st = self.states[fp]
                if st.status == "pending":
                    self._drop(fp)
                elif st.status == "firing":
                    st.own_active = False
                    st.let_go()
                    if st.external:
                        st.cleared_at = None  # Prometheus still reports it: it resolves through the webhook
                        self._loose.set(fp, math.inf)
                        continue
                    if st.cleared_at is None:
                        st.cleared_at = now  # also starts a restored alert's grace period
                    if now - st.cleared_at >= st.keep_firing_for:
                        self._drop(fp)
                        st.status, st.ends_at = "resolved", now
                        self._transition(fp, st, now)
                    else:
                        self._loose.set(fp, st.cleared_at + st.keep_firing_for)
            return self._commit(now, evidence)

    def _unheld(self, by_fp: Mapping[str, Any], held: Mapping[str, Any], looked_at: Set[str]) -> list[str]:
        """Of ``looked_at`` (the fingerprints that changed and the loose ones due), the states nothing holds
        now, in the order they entered the book. Every other state is held as it was."""
        states = self.states
        fps = [fp for fp in looked_at if fp in states and fp not in by_fp and fp not in held]
        return sorted(fps, key=lambda fp: states[fp].seq)

    def receive(self, alerts: list[Alert], now: float, evidence: Explain | None = None) -> list[Alert]:
        """Alerts that arrived already evaluated (Alertmanager webhook), all in one transaction (a
        5000-alert webhook: one commit, not 5000); returns the committed transitions."""
        with self._lock:
            for a in alerts:
                self.external(a, now)
            return self._commit(now, evidence)

    def note_evidence(self, evidence: Evidence, now: float) -> None:
        """A fresh snapshot while alerts fire, with no transition: written now (or with the next commit
        when the disk refuses it; a newer one replaces it)."""
        with self._lock:
            self._evidence = evidence
            self._commit(now)

    def external(self, alert: Alert, now: float) -> None:
        """Record one alert that arrived already evaluated; a repeat, or an outage the monitor's own rules
        already hold, changes nothing visible. Queued: ``receive`` commits and returns the transitions."""
        with self._lock:
            fp = alert.fingerprint
            st = self.states.get(fp)
            if alert.status == "firing":
                if st is not None and st.status == "firing":
                    if not st.external:
                        st.external = True
                        st.generator_url = st.generator_url or alert.generator_url
                        self._save_flags(fp, st)
                    return
                st = AlertState(dict(alert.labels), dict(alert.annotations), "firing", alert.starts_at or now,
                                value=alert.value, generator_url=alert.generator_url, external=True)
                self._put(fp, st)
            else:
                if st is None or st.status != "firing":
                    return
                if st.own_active:  # the monitor still sees it: it resolves when its own rules clear
                    if st.external:
                        st.external = False
                        self._save_flags(fp, st)
                    return
                self._drop(fp)
                st.status, st.ends_at = "resolved", alert.ends_at or now
            self._transition(fp, st, now)

    def _save_flags(self, fp: str, st: AlertState) -> None:
        if self._db is not None:
            self._unwritten.append(_Write(fp, None, (int(st.external), st.generator_url, fp), 0.0))

    def _transition(self, fp: str, st: AlertState, now: float) -> None:
        """Queue the transition; ``_commit`` writes it and only then returns it."""
        alert = st.to_alert()
        row = (fp, json.dumps(st.labels), json.dumps(st.annotations), alert.status, st.starts_at,
               st.ends_at, st.value, now, st.generator_url, int(st.external), st.plot_file)
        self._unwritten.append(_Write(fp, alert, row, now))

    def _commit(self, now: float, evidence: Explain | None = None) -> list[Alert]:
        """Write what is queued in one transaction, with the evidence of the new transitions; the
        transitions are returned only once it landed. Without a database every transition is returned
        at once (and logged in memory)."""
        if self._db is None:
            out = [w.alert for w in self._unwritten if w.alert is not None]
            for w in self._unwritten:
                if w.alert is not None:
                    translog.append(self.log.conn, w.alert, w.at)
            self._unwritten = []
            self._write_evidence(self.log.conn, out, evidence, now)
            self._evidence = None
            return out
        self._reappear()  # a deleted state dir is noticed on the next evaluation, written or not
        if not (self._unwritten or self._evidence is not None) or not self._backoff.due():
            return []
        todo = list(self._unwritten)
        try:
            self._db.execute("BEGIN IMMEDIATE")  # event rows and current states change together or not at all
            try:
                new = [w.alert for w in todo if self._write(w)]
                self._write_evidence(self._db, [a for a in new if a is not None], evidence, now)
                self._db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
        except STORAGE_ERRORS as exc:
            self._backoff.failed()
            self.health.failed(self.DB, "transition", exc, self._path)
            return []
        committed()
        self._backoff.landed()
        self.health.ok(self.DB)
        del self._unwritten[:len(todo)]
        self._evidence = None
        return [a for a in new if a is not None]

    def _write_evidence(self, conn: Any, new: list[Alert], evidence: Explain | None, now: float) -> None:
        """The snapshot that explains ``new`` (measured now, in their transaction), else one noted before."""
        snapshot = evidence(new) if evidence is not None and new else self._evidence
        if snapshot is not None:
            self.log.append_evidence(conn, snapshot, now)

    def _reappear(self) -> None:
        if self._db is not None and self._path is not None:
            fresh = reappear(self._db, self._path, self.health)
            if fresh is not None:
                self._db = self.log.conn = fresh

    def _write(self, w: _Write) -> bool:
        """One queued write; False when the event was already recorded (before a restart: not new)."""
        assert self._db is not None
        if w.alert is None:  # flags only
            self._db.execute("UPDATE alerts SET external=?, generator_url=? WHERE fingerprint=?", w.row)
            return False
        new = translog.append(self._db, w.alert, w.at)
        self._db.execute(
            "INSERT OR REPLACE INTO alerts (fingerprint, labels, annotations, status, starts_at, ends_at, "
            "value, updated_at, generator_url, external, plot_file) VALUES (?,?,?,?,?,?,?,?,?,?,?)", w.row)
        return new

    def unwritten(self) -> int:
        """Transitions and flag changes queued in memory, their write not landed yet."""
        return len(self._unwritten)

    def held(self) -> int:
        """What is queued while the book's writes fail (0 while they land: a transition queued by the commit
        running now, which /healthz may read without the book's lock, is on its way, not held)."""
        return len(self._unwritten) if self._backoff.delay else 0

    def prune(self, before: float) -> int:
        """Forget resolved alerts and transition records older than ``before`` (the retention); the
        firing ones stay, so a restart still restores them and the engine can catch up on them."""
        if self._db is None:
            return 0
        with self._lock:
            try:
                n = self._db.execute("DELETE FROM alerts WHERE status='resolved' AND updated_at<?",
                                     (before,)).rowcount
                return n + translog.prune(self._db, before)
            except STORAGE_ERRORS as exc:
                self.health.failed(self.DB, "prune", exc, self._path)
                return 0

    def firing(self) -> list[Alert]:
        with self._lock:
            return [s.to_alert() for s in self.states.values() if s.status == "firing"]

    def firing_counts(self) -> Counter[tuple[str, str]]:
        """(alertname, severity) -> how many fire: the firing gauge."""
        with self._lock:
            return Counter(self._firing)

    def firing_labels(self) -> list[dict[str, str]]:
        """The labels of every firing alert, not copied: read them, never change them."""
        with self._lock:
            return [s.labels for s in self.states.values() if s.status == "firing"]

    def get(self, fp: str) -> Alert | None:
        with self._lock:
            st = self.states.get(fp)
            return st.to_alert() if st is not None else None

    def pending(self) -> list[Alert]:
        with self._lock:
            return [s.to_alert() for s in self.states.values() if s.status == "pending"]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
