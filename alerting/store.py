"""SQLite (WAL) file holding the alerting state: the outbox, silences and a JSON snapshot of the
in-memory stages (held alerts, groups, notification log, rate-limit windows); incidents have a row each,
so a change to one incident rewrites only that row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from alerting.durable import StorageHealth, open_sqlite

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
CREATE TABLE IF NOT EXISTS alerts (fingerprint TEXT PRIMARY KEY, value TEXT NOT NULL, seen_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS incidents (fingerprint TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def open_db(path: str | Path, health: StorageHealth | None = None) -> sqlite3.Connection:
    """Open (WAL) or create the state database; a corrupt file is moved aside (``alerting.durable``)."""
    return open_sqlite(path, SCHEMA, health)


def load_state(conn: sqlite3.Connection, key: str) -> dict[str, Any]:
    row = conn.execute("SELECT value FROM state WHERE key=?", (key,)).fetchone()
    return json.loads(row[0]) if row else {}


def save_state(conn: sqlite3.Connection, key: str, value: dict[str, Any]) -> None:
    conn.execute("INSERT INTO state(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                 (key, json.dumps(value, sort_keys=True)))
