"""Silences (Alertmanager semantics): matchers plus a time range; a silenced alert is muted at flush
time and notified normally once the silence ends. Stored in the state database so ``verl-alert silence``
can add or expire them while the monitor runs."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alerting.matchers import Matcher, all_match, parse_matcher
from alerting.model import Alert, rfc3339


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


class SilenceStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

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
        return sid

    def expire(self, sid: str, now: float) -> bool:
        cur = self.conn.execute("UPDATE silences SET ends_at=? WHERE id=? AND ends_at>?", (now, sid, now))
        return cur.rowcount > 0

    def all(self) -> list[Silence]:
        rows = self.conn.execute("SELECT id, matchers, starts_at, ends_at, created_by, comment FROM silences "
                                 "ORDER BY created_at, id").fetchall()
        return [Silence(r[0], [parse_matcher(m) for m in json.loads(r[1])], r[2], r[3], r[4], r[5]) for r in rows]

    def muting(self, now: float) -> Callable[[Alert], bool]:
        """The one silence matcher: reads the active silences once, then answers per alert (flush time)."""
        active = [s for s in self.all() if s.state(now) == "active"]
        return lambda alert: any(all_match(s.matchers, alert.labels) for s in active)
