"""SQLite (WAL) file holding the alerting state: the outbox, silences, a JSON snapshot of the
in-memory stages (held alerts, groups, notification log, rate-limit windows) and the engine's cursor
into the transition log it follows; incidents have a row each, so a change to one incident rewrites
only that row. The file also holds the engine's own transition log (``alerting.translog``), used when
alerts are submitted to the engine directly; in the monitor the engine follows the alert book's log
in ``state.db`` instead, and keeps no copy of alert state here."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from alerting import translog
from alerting.correlate import Correlator, incident_row
from alerting.dispatch import Dispatcher
from alerting.durable import StorageHealth, open_sqlite
from alerting.model import Alert
from alerting.stages import DedupStage

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    status TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(state, receiver, group_key, id);
CREATE INDEX IF NOT EXISTS outbox_dedup ON outbox(dedup_key, state);
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    matchers TEXT NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    comment TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS incidents (fingerprint TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


# Files from before the transition log kept a copy of every alert's state in ``alerts``; the alerts
# are now read from the log, so the copy is dropped on open.
_GONE = "DROP TABLE IF EXISTS alerts;"


def open_db(path: str | Path, health: StorageHealth | None = None) -> sqlite3.Connection:
    """Open (WAL) or create the state database; a corrupt file is moved aside (``alerting.durable``)."""
    conn = open_sqlite(path, SCHEMA + _GONE, health)
    translog.create(conn)
    return conn


def load_state(conn: sqlite3.Connection, key: str) -> dict[str, Any]:
    row = conn.execute("SELECT value FROM state WHERE key=?", (key,)).fetchone()
    return json.loads(row[0]) if row else {}


def save_state(conn: sqlite3.Connection, key: str, value: dict[str, Any]) -> None:
    conn.execute("INSERT INTO state(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                 (key, json.dumps(value, sort_keys=True)))


class EngineState:
    """Saves the engine's stages into the ``state`` and ``incidents`` tables, rewriting only
    what changed since the last save (what each row holds is remembered), and loads them back."""

    def __init__(self) -> None:
        self.written: dict[str, str] = {}
        self.written_incidents: dict[str, str] = {}
        self.incident_sigs: dict[str, tuple[Any, ...]] = {}
        self.legacy_limiters: dict[str, Any] = {}  # older files kept the budgets inside the "engine" row

    def save(self, conn: sqlite3.Connection, correlator: Correlator, dispatcher: Dispatcher,
             dedup: DedupStage) -> None:
        router = {**dispatcher.to_state(), "nflog": dedup.to_state()}
        snapshot = {"correlator": correlator.to_state(with_incidents=False), "router": router}
        text = json.dumps(snapshot, sort_keys=True)
        if self.written.get("engine") != text:
            save_state(conn, "engine", snapshot)
            self.written["engine"] = text
        incidents = correlator.all_incidents()
        upserts = []
        for fp, inc in incidents.items():
            # An incident changes by resolving or by gaining members (they are never removed): this
            # signature spares re-serialising thousands of unchanged incidents on every save.
            sig = (id(inc.alert), inc.alert.status, inc.alert.ends_at, len(inc.members))
            if self.incident_sigs.get(fp) == sig:
                continue
            self.incident_sigs[fp] = sig
            row = json.dumps(incident_row(inc), sort_keys=True)
            if self.written_incidents.get(fp) != row:
                upserts.append((fp, row))
                self.written_incidents[fp] = row
        gone = [fp for fp in self.written_incidents if fp not in incidents]
        for fp in gone:
            del self.written_incidents[fp]
            self.incident_sigs.pop(fp, None)
        if upserts:
            conn.executemany("INSERT INTO incidents(fingerprint, value) VALUES(?,?) ON CONFLICT(fingerprint) "
                             "DO UPDATE SET value=excluded.value", upserts)
        if gone:
            conn.executemany("DELETE FROM incidents WHERE fingerprint=?", [(fp,) for fp in gone])

    def save_row(self, conn: sqlite3.Connection, key: str, value: dict[str, Any]) -> None:
        """One ``state`` row, written only when it changed (the rate-limit budgets, the log cursor)."""
        text = json.dumps(value, sort_keys=True)
        if self.written.get(key) != text:
            save_state(conn, key, value)
            self.written[key] = text

    def restore(self, conn: sqlite3.Connection, correlator: Correlator, dispatcher: Dispatcher,
                dedup: DedupStage, history: dict[str, Alert]) -> None:
        """Load the stages as last committed; ``history``: the alerts they refer to (fingerprint -> alert)."""
        state = load_state(conn, "engine")
        corr = dict(state.get("correlator", {}))
        incidents = dict(corr.get("incidents", {}))  # snapshots before the incidents table held them inline
        for fp, value in conn.execute("SELECT fingerprint, value FROM incidents"):
            incidents[fp] = json.loads(value)
            self.written_incidents[fp] = value
        corr["incidents"] = incidents
        correlator.load_state(corr, history.get)

        def resolve(fp: str) -> Alert | None:
            inc = correlator.incident(fp)
            return inc.alert if inc else history.get(fp)
        dispatcher.load_state(state.get("router", {}), resolve)
        dedup.load_state(state.get("router", {}).get("nflog", {}))
        self.legacy_limiters = state.get("limiters", {})

    def limiters(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """The robots' saved budgets (older files kept them inside the ``engine`` row)."""
        return load_state(conn, "limiters") or self.legacy_limiters
