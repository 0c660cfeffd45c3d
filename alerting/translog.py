"""The transition log: the one record of alert state changes, one row per (fingerprint, status,
startsAt), appended by whoever evaluates alerts and read by the alerting engine from a cursor.

The monitor's alert book appends in the same SQLite transaction as its ``alerts`` row (``state.db``),
so a transition is committed exactly once; the engine keeps only its cursor (``alerting.engine``),
committed in ``alerting.db`` together with what it did with the rows up to it. Used on its own, the
engine appends to a log in its own database (``AlertEngine.submit``) and follows it the same way.

Lives in ``alerting`` because alerting may not import the monitor; the table keeps the name the book
gave it before (``alert_events``), so existing ``state.db`` files are already a log."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from alerting.model import Alert, alert_from_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, fingerprint TEXT NOT NULL, status TEXT NOT NULL,
  starts_at REAL NOT NULL, at REAL NOT NULL, record TEXT NOT NULL,
  UNIQUE (fingerprint, status, starts_at));
CREATE TABLE IF NOT EXISTS alert_log_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
READ_BATCH = 1000  # rows taken per read: a long backlog is followed in bounded steps

Connection = Any  # a sqlite3.Connection or a wrapper with its execute (HeldInMemory, a fault injector)


def create(conn: Connection) -> None:
    """The log's tables and its identity, made once by its writer when it opens the database."""
    conn.executescript(SCHEMA)
    if conn.execute("SELECT 1 FROM alert_log_meta WHERE key='id'").fetchone() is not None:
        return  # checked first: an existing log opens on a read-only disk without a write
    # a file from before the log on a read-only disk: no identity, so no saved place is trusted
    with contextlib.suppress(sqlite3.OperationalError):
        conn.execute("INSERT INTO alert_log_meta (key, value) VALUES ('id', ?)", (uuid.uuid4().hex,))


def append(conn: Connection, alert: Alert, at: float, again: bool = False) -> bool:
    """Append one transition inside the caller's transaction; False when it was already recorded (a
    restart re-deriving a transition it had committed): nothing new to follow. ``again``: a repeat is
    recorded anew at the log's end instead (alerts submitted from outside: Alertmanager re-sends firing
    alerts, and a flap may fire again with its old startsAt; each is taken as it comes)."""
    verb = "INSERT OR REPLACE" if again else "INSERT OR IGNORE"
    cur = conn.execute(f"{verb} INTO alert_events (fingerprint, status, starts_at, at, record) "
                       "VALUES (?,?,?,?,?)", (alert.fingerprint, alert.status, alert.starts_at, at,
                                              json.dumps(alert.to_state())))
    return bool(cur.rowcount)


def prune(conn: Connection, before: float, upto: int | None = None) -> int:
    """Forget transitions older than ``before`` (and not past ``upto``, a follower's place), but never
    the newest of an alert that fires: a follower that catches up (``TransitionLog.current``) must
    still see it, and a restart restores it."""
    return int(conn.execute(
        "DELETE FROM alert_events WHERE at<? AND id<=? AND id NOT IN "
        "(SELECT MAX(id) FROM alert_events GROUP BY fingerprint HAVING status='firing')",
        (before, upto if upto is not None else 2**62)).rowcount)


class TransitionLog:
    """Reads one log on ``conn`` (its writer sets a new one when it replaces its connection: a database
    recreated after its directory was deleted). ``lock`` is the writer's: a read never sees half of a
    transaction that the writer has open on the same connection."""

    def __init__(self, conn: Connection, lock: AbstractContextManager[Any] | None = None) -> None:
        self.conn = conn
        self._lock = lock if lock is not None else threading.RLock()

    @classmethod
    def in_memory(cls) -> TransitionLog:
        """A log without a file (replay, tests): the same reads, nothing survives the process."""
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        create(conn)
        return cls(conn)

    def identity(self) -> str:
        """A name for this log that a fresh database does not share: a cursor into a log that was
        replaced (a corrupt ``state.db`` moved aside) is not applied to the new one's row ids."""
        with self._lock:
            row = self.conn.execute("SELECT value FROM alert_log_meta WHERE key='id'").fetchone()
        return str(row[0]) if row is not None else ""

    def after(self, cursor: int, limit: int = READ_BATCH) -> list[tuple[int, Alert]]:
        """Committed transitions past ``cursor``, oldest first."""
        with self._lock:
            rows = self.conn.execute("SELECT id, record FROM alert_events WHERE id>? ORDER BY id LIMIT ?",
                                     (cursor, limit)).fetchall()
        return [(int(i), alert_from_json(json.loads(r))) for i, r in rows]

    def head(self) -> int:
        """The id of the newest transition (0 when none)."""
        with self._lock:
            return int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM alert_events").fetchone()[0])

    def current(self, upto: int | None = None) -> dict[str, Alert]:
        """Each alert as its newest transition up to ``upto`` left it (all when None), oldest first."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT record FROM alert_events WHERE id IN (SELECT MAX(id) FROM alert_events WHERE id<=? "
                "GROUP BY fingerprint) ORDER BY id", (upto if upto is not None else 2**62,)).fetchall()
        alerts = (alert_from_json(json.loads(r[0])) for r in rows)
        return {a.fingerprint: a for a in alerts}

    def count_after(self, cursor: int) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT COUNT(*) FROM alert_events WHERE id>?", (cursor,)).fetchone()[0])


class Cursor:
    """A follower's place in one log, saved with what it did with the rows up to it.

    ``at`` None: no place in this log yet (a fresh follower, or a log that replaced the one the saved
    place was in): it catches up on what fires now, not on the log's history, which would page every
    outage again. ``held``: alerts whose resolve waits for their page (see ``accept``)."""

    def __init__(self, log: TransitionLog, saved: dict[str, Any] | None = None) -> None:
        self.log = log
        self.ident = log.identity()
        saved = saved or {}
        ours = bool(self.ident) and saved.get("log") == self.ident
        self.at: int | None = int(saved["at"]) if ours and saved.get("at") is not None else None
        self.held: set[str] = set(saved.get("held", ())) if ours else set()

    def to_state(self) -> dict[str, Any]:
        return {"log": self.ident, "at": self.at, "held": sorted(self.held)}

    def due(self) -> list[tuple[int, Alert]]:
        """The transitions to take next, oldest first."""
        if self.at is None:
            head = self.log.head()
            firing = [(head, a) for a in self.log.current(head).values() if a.status == "firing"]
            if not firing:
                self.at = head  # nothing to catch up on: the place is safe to take before it is saved
            return firing
        return self.log.after(self.at)

    def behind(self) -> int:
        """Transitions committed in the log and not taken yet (before a place: what fires)."""
        if self.at is None:
            return sum(a.status == "firing" for a in self.log.current().values())
        return self.log.count_after(self.at)

    def accept(self, rows: list[tuple[int, Alert]], page_pending: Callable[[str], bool],
               observe: Callable[[Alert], None]) -> int:
        """Hand ``rows`` to ``observe`` in order, the cursor moving past each; how many were taken.

        A backlog (writes that failed for a while) can hold an alert's firing and its resolve together;
        taken at once, the resolve would replace the firing before its group flushed and the outage
        would never page. So the cursor stops before such a resolve and stays there until the page has
        flushed (``page_pending`` False): FIRING, then RESOLVED, as if the disk had never been full."""
        fired: set[str] = set()
        taken = 0
        for i, alert in rows:
            fp = alert.fingerprint
            if alert.status == "firing":
                fired.add(fp)
            elif fp in fired or (fp in self.held and page_pending(fp)):
                self.held.add(fp)
                return taken
            else:
                self.held.discard(fp)
            observe(alert)
            self.at, taken = max(self.at or 0, i), taken + 1
        if len(rows) >= READ_BATCH:  # its resolve may come in the next batch: it waits the same way
            self.held |= fired
        return taken
