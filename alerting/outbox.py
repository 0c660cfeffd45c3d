"""Durable outbox: every notification is a row in SQLite before any delivery is tried, so a crash or
restart loses nothing. Delivery is at-least-once, in order within a group (a group's next row waits for
its head), retried with exponential backoff and seeded jitter. The dedup key (receiver, group, status,
fingerprints) stops the same pending notification from being queued twice."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from dataclasses import dataclass

from alerting.config import OutboxConfig
from alerting.model import Notification


@dataclass
class OutboxRow:
    id: int
    receiver: str
    group_key: str
    status: str
    notification: Notification
    attempts: int
    next_attempt_at: float


def dedup_key(n: Notification) -> str:
    text = "\x1f".join([n.receiver, n.group_key, n.status, *sorted(n.fingerprints)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


_COLS = "id, receiver, group_key, status, payload, attempts, next_attempt_at"


def _row(r: tuple) -> OutboxRow:
    return OutboxRow(r[0], r[1], r[2], r[3], Notification.from_json(json.loads(r[4])), r[5], r[6])


class Outbox:
    def __init__(self, conn: sqlite3.Connection, cfg: OutboxConfig) -> None:
        self.conn = conn
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)

    def put(self, n: Notification, now: float) -> bool:
        """Queue a notification; False when an identical one is still pending."""
        key = dedup_key(n)
        if self.conn.execute("SELECT 1 FROM outbox WHERE dedup_key=? AND state='pending'", (key,)).fetchone():
            return False
        self.conn.execute(
            "INSERT INTO outbox(receiver, group_key, status, dedup_key, payload, next_attempt_at, created_at) "
            "VALUES(?,?,?,?,?,?,?)",
            (n.receiver, n.group_key, n.status, key, json.dumps(n.to_json()), now, now))
        return True

    def heads_due(self, now: float, receiver: str | None = None) -> list[OutboxRow]:
        """The oldest pending row of every (receiver, group) whose retry time has come, oldest first;
        of one receiver when given (its delivery worker asks only for its own)."""
        if receiver is None:
            rows = self.conn.execute(
                f"SELECT {_COLS} FROM outbox WHERE id IN (SELECT MIN(id) FROM outbox WHERE state='pending' "
                "GROUP BY receiver, group_key) AND next_attempt_at<=? ORDER BY id", (now,)).fetchall()
        else:
            rows = self.conn.execute(
                f"SELECT {_COLS} FROM outbox WHERE id IN (SELECT MIN(id) FROM outbox WHERE state='pending' "
                "AND receiver=? GROUP BY group_key) AND next_attempt_at<=? ORDER BY id", (receiver, now)).fetchall()
        return [_row(r) for r in rows]

    def group_rows(self, receiver: str, group_key: str) -> list[OutboxRow]:
        rows = self.conn.execute(f"SELECT {_COLS} FROM outbox WHERE state='pending' AND receiver=? AND group_key=? "
                                 "ORDER BY id", (receiver, group_key)).fetchall()
        return [_row(r) for r in rows]

    def claim(self, rows: list[OutboxRow]) -> None:
        """The notification log: an attempt is counted (committed) before its HTTP call starts, so
        nothing is sent that was not recorded; a crash mid-send re-sends that one message at most once."""
        self.conn.executemany("UPDATE outbox SET attempts=attempts+1 WHERE id=?", [(r.id,) for r in rows])

    def delivered(self, rows: list[OutboxRow]) -> None:
        self.conn.executemany("UPDATE outbox SET state='delivered' WHERE id=?", [(r.id,) for r in rows])

    def failed(self, rows: list[OutboxRow], error: str) -> None:
        """Permanent failure: kept in the table with its error, no more attempts."""
        self.conn.executemany("UPDATE outbox SET state='failed', last_error=? WHERE id=?",
                              [(error, r.id) for r in rows])

    def retry(self, rows: list[OutboxRow], now: float, error: str, not_before: float = 0.0) -> float:
        """Schedule another attempt; returns when."""
        attempts = max((r.attempts for r in rows), default=0) + 1
        delay = min(self.cfg.backoff_max_s, self.cfg.backoff_initial_s * 2 ** (attempts - 1))
        delay *= 1.0 + self.rng.uniform(-self.cfg.jitter, self.cfg.jitter)
        when = max(now + delay, not_before)
        self.conn.executemany("UPDATE outbox SET next_attempt_at=?, last_error=? WHERE id=?",
                              [(when, error, r.id) for r in rows])
        return when

    def depth(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM outbox WHERE state='pending'").fetchone()[0]

    def oldest_pending(self) -> float | None:
        """Queue time of the oldest undelivered notification (for /healthz)."""
        return self.conn.execute("SELECT MIN(created_at) FROM outbox WHERE state='pending'").fetchone()[0]

    def prune(self, before: float) -> int:
        """Forget delivered and failed rows queued before ``before`` (retention); pending rows stay."""
        return self.conn.execute("DELETE FROM outbox WHERE state!='pending' AND created_at<?", (before,)).rowcount

