"""Silences (Alertmanager semantics): matchers plus a time range; a silenced alert is muted at flush
time and notified normally once the silence ends. Stored in the state database so ``verl-alert silence``
can add or expire them while the monitor runs, and -- as Alertmanager keeps its silences in a snapshot
file -- also in a plain JSON snapshot next to it (``silences.json``), rewritten after every change that
committed, so they survive a lost or corrupt database: at start, snapshot silences missing from the
table are put back."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerting.matchers import Matcher, all_match, parse_matcher
from alerting.model import Alert, rfc3339

log = logging.getLogger("verl.alerting")


@dataclass
class Silence:
    id: str
    matchers: list[Matcher]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str

    def state(self, now: float) -> str:
        if now < self.starts_at:
            return "pending"
        return "active" if now < self.ends_at else "expired"

    def to_json(self, now: float) -> dict[str, Any]:
        return {"id": self.id, "matchers": [m.to_json() for m in self.matchers],
                "startsAt": rfc3339(self.starts_at), "endsAt": rfc3339(self.ends_at),
                "createdBy": self.created_by, "comment": self.comment, "status": {"state": self.state(now)}}


class SilenceIndex:
    """Silences by one of their equality matchers (``alertname="X"``), so that matching an alert costs
    its label count plus the few silences sharing a label with it, not the number of silences (8000
    silences were 82 % of a core when every tick re-read and re-parsed them all). Silences without an
    equality matcher are scanned."""

    def __init__(self, silences: list[Silence]) -> None:
        self.by_label: dict[tuple[str, str], list[Silence]] = {}
        self.scan: list[Silence] = []
        for s in silences:
            eq = [m for m in s.matchers if m.op == "=" and m.value]
            if eq:  # the rarest-looking key: alertname is shared by many alerts, node/gpu less so
                m = min(eq, key=lambda m: m.name == "alertname")
                self.by_label.setdefault((m.name, m.value), []).append(s)
            else:
                self.scan.append(s)

    def mutes(self, labels: dict[str, str], now: float) -> bool:
        for key in labels.items():
            for s in self.by_label.get(key, ()):
                if s.starts_at <= now < s.ends_at and all_match(s.matchers, labels):
                    return True
        return any(s.starts_at <= now < s.ends_at and all_match(s.matchers, labels) for s in self.scan)


_ROW = "id, matchers, starts_at, ends_at, created_by, comment, created_at"


class SilenceStore:
    def __init__(self, conn: sqlite3.Connection, snapshot: str | Path | None = None) -> None:
        self.conn = conn
        self._index: SilenceIndex | None = None
        self._index_key: tuple[int, int] | None = None
        self._generation = 0  # bumped by this store's own writes (data_version only sees other connections')
        self.snapshot = Path(snapshot) if snapshot is not None else None
        self._saved: str | None = None  # the snapshot's text as last written by this store
        if self.snapshot is not None:
            self._load_snapshot()

    def _load_snapshot(self) -> None:
        assert self.snapshot is not None
        try:
            rows = json.loads(self.snapshot.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("silence snapshot %s unreadable (%s); using the database's silences", self.snapshot, exc)
            return
        back = self.conn.executemany(f"INSERT OR IGNORE INTO silences({_ROW}) VALUES(?,?,?,?,?,?,?)",
                                     [tuple(r) for r in rows]).rowcount
        if back > 0:
            log.warning("restored %d silence(s) from %s that the database had lost", back, self.snapshot)

    def save_snapshot(self) -> None:
        """Rewrite the snapshot from the table (write a temporary file, then rename: never half a file).
        Raises OSError (the caller reports it as a storage error)."""
        if self.snapshot is None:
            return
        rows = self.conn.execute(f"SELECT {_ROW} FROM silences ORDER BY created_at, id").fetchall()
        text = json.dumps([list(r) for r in rows])
        if text == self._saved and self.snapshot.exists():
            return  # unchanged (the engine asks once a minute)
        tmp = self.snapshot.with_name(self.snapshot.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.snapshot)
        self._saved = text

    def add(self, matchers: list[str], starts_at: float, ends_at: float, created_by: str = "verl-alert",
            comment: str = "") -> str:
        """Raises ValueError naming the bad matcher or time range."""
        if not matchers:
            raise ValueError("a silence needs at least one matcher, e.g. alertname=\"GPUOverTemperature\"")
        parsed = [parse_matcher(m) for m in matchers]
        if ends_at <= starts_at:
            raise ValueError("silence end must be after its start; give a positive duration")
        sid = uuid.uuid4().hex
        self.conn.execute("INSERT INTO silences VALUES(?,?,?,?,?,?,?)",
                          (sid, json.dumps([str(m) for m in parsed]), starts_at, ends_at, created_by, comment,
                           starts_at))
        self._generation += 1
        return sid

    def expire(self, sid: str, now: float) -> bool:
        cur = self.conn.execute("UPDATE silences SET ends_at=? WHERE id=? AND ends_at>?", (now, sid, now))
        self._generation += 1
        return cur.rowcount > 0

    def all(self) -> list[Silence]:
        rows = self.conn.execute("SELECT id, matchers, starts_at, ends_at, created_by, comment FROM silences "
                                 "ORDER BY created_at, id").fetchall()
        return [Silence(r[0], [parse_matcher(m) for m in json.loads(r[1])], r[2], r[3], r[4], r[5]) for r in rows]

    def index(self, now: float) -> SilenceIndex:
        """The not-yet-expired silences, indexed; rebuilt only when the table changed (a write by this
        store, or a commit by another connection such as ``verl-alert silence``: SQLite's data_version)."""
        key = (self.conn.execute("PRAGMA data_version").fetchone()[0], self._generation)
        if self._index is None or key != self._index_key:
            rows = self.conn.execute("SELECT id, matchers, starts_at, ends_at, created_by, comment FROM silences "
                                     "WHERE ends_at>? ORDER BY created_at, id", (now,)).fetchall()
            self._index = SilenceIndex([Silence(r[0], [parse_matcher(m) for m in json.loads(r[1])], r[2], r[3],
                                                r[4], r[5]) for r in rows])
            self._index_key = key
        return self._index

    def muting(self, now: float) -> Callable[[Alert], bool]:
        """The one silence matcher: answers per alert (flush time) from the index."""
        index = self.index(now)
        return lambda alert: index.mutes(alert.labels, now)
