"""The transition log: the one record of alert state changes, one row per (fingerprint, status,
startsAt), appended by whoever evaluates alerts and read by the alerting engine from a cursor; beside
them, the newest evidence snapshot (``alerting.evidence``) those transitions are diagnosed with.

The monitor's alert book appends in the same SQLite transaction as its ``alerts`` row (``state.db``),
so a transition is committed exactly once, and its evidence with it; the engine keeps only its cursor
(``alerting.engine``), committed in ``alerting.db`` together with what it did with the rows up to it.
Used on its own, the engine appends to a log in its own database (``AlertEngine.submit``) and follows it
the same way.

This is the whole runtime contact between the monitor and alerting, in Alertmanager's shape (its
dispatcher subscribes to the alert provider; nothing calls the dispatcher): the engine ``subscribe``s
once, the writer ``notify``s after its commits, and the engine reads on its own thread through its own
connection (``reader``), so no lock, connection or transaction is shared across the seam.

Lives in ``alerting`` because alerting may not import the monitor; the table keeps the name the book
gave it before (``alert_events``), so existing ``state.db`` files are already a log."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alerting import evidence_log
from alerting.durable import CACHE_KIB
from alerting.evidence import Evidence
from alerting.evidence_log import EvidenceWriter
from alerting.model import Alert, alert_from_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, fingerprint TEXT NOT NULL, status TEXT NOT NULL,
  starts_at REAL NOT NULL, at REAL NOT NULL, record TEXT NOT NULL,
  UNIQUE (fingerprint, status, starts_at));
CREATE TABLE IF NOT EXISTS alert_log_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
EVIDENCE_SCHEMA = """CREATE TABLE IF NOT EXISTS alert_evidence (id INTEGER PRIMARY KEY AUTOINCREMENT,
  at REAL NOT NULL, record BLOB NOT NULL);"""
READ_BATCH = 1000  # rows taken per read: a long backlog is followed in bounded steps

Connection = Any  # a sqlite3.Connection or a wrapper with its execute (HeldInMemory, a fault injector)
Row = tuple[int, Alert | None]  # None: a row that does not parse, skipped (counted) and passed over


def create(conn: Connection) -> None:
    """The log's tables and its identity, made once by its writer when it opens the database."""
    conn.executescript(SCHEMA)
    # added later: a file from before it on a read-only disk opens without it (no evidence until writable)
    with contextlib.suppress(sqlite3.OperationalError):
        conn.executescript(EVIDENCE_SCHEMA)
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


def append_evidence(conn: Connection, evidence: Evidence, at: float) -> None:
    """Write ``evidence`` whole inside the caller's transaction, in place of every row before: a follower
    diagnoses with the newest measurements only. A writer of evidence every few seconds uses
    ``TransitionLog.append_evidence``, whose rows after the first carry only what is new."""
    EvidenceWriter().append(conn, evidence, at)


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
    recreated after its directory was deleted, or held in memory while its disk is read-only). ``path``:
    the file, so that a follower reads it on a connection of its own (``reader``)."""

    def __init__(self, conn: Connection, path: str | Path | None = None) -> None:
        self.conn = conn
        self.path = Path(path) if path is not None else None
        self._lock = threading.RLock()  # one read at a time on this object's connection
        self.bad_rows = 0  # rows that did not parse, each counted once
        self.bad_row = ""  # the newest of them, in words
        self._bad_ids: set[int] = set()
        self._subscribers: list[Callable[[], None]] = []
        self._evidence_writer = EvidenceWriter()  # the writer's side: what its rows already hold
        self._folded: tuple[int, Evidence] | None = None  # a follower's side: the evidence as of a row read

    def append_evidence(self, conn: Connection, evidence: Evidence, at: float) -> None:
        """Write ``evidence`` inside the caller's transaction on ``conn`` (this log's connection, or the
        one its writer holds the transaction on): the rows after a whole one carry only what is new."""
        self._evidence_writer.append(conn, evidence, at)

    def _db(self) -> Connection:
        return self.conn

    def subscribe(self, wake: Callable[[], None]) -> None:
        """``wake`` is called after the writer commits (``notify``): a follower on a thread of its own
        only sets an event there; one on simulated time reads at once."""
        self._subscribers.append(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        if wake in self._subscribers:
            self._subscribers.remove(wake)

    def notify(self) -> None:
        for wake in list(self._subscribers):
            wake()

    def reader(self) -> TransitionLog:
        """This log for a follower: on a file, a connection of its own (WAL: it reads what is committed
        while the writer writes; no lock is shared); without one, this object."""
        return OwnReader(self) if self.path is not None else self

    def close(self) -> None:
        """A reader closes its own connection; the writer closes the one it owns itself."""

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
            row = self._db().execute("SELECT value FROM alert_log_meta WHERE key='id'").fetchone()
        return str(row[0]) if row is not None else ""

    def after(self, cursor: int, limit: int = READ_BATCH) -> list[Row]:
        """Committed transitions past ``cursor``, oldest first; a row that does not parse is (id, None)."""
        with self._lock:
            rows = self._db().execute("SELECT id, record FROM alert_events WHERE id>? ORDER BY id LIMIT ?",
                                     (cursor, limit)).fetchall()
        return [(int(i), self._parse(int(i), r)) for i, r in rows]

    def _parse(self, row_id: int, record: Any) -> Alert | None:
        """One row's alert; None (counted in ``bad_rows``, the newest named in ``bad_row``) when it does not
        parse: a row edited by hand or a damaged page must not stop every later transition."""
        try:
            doc = json.loads(record)
            return alert_from_json(doc) if isinstance(doc, dict) else _not_an_alert(doc)
        except (ValueError, TypeError, RecursionError, AttributeError) as exc:
            if row_id not in self._bad_ids and len(self._bad_ids) < 100_000:
                self._bad_ids.add(row_id)
                self.bad_rows += 1
                self.bad_row = f"row {row_id} does not parse ({str(exc)[:80]}); skipped"
            return None

    def _alerts(self, records: Iterable[tuple[int, Any]]) -> list[Alert]:
        return [a for a in (self._parse(int(i), r) for i, r in records) if a is not None]

    def head(self) -> int:
        """The id of the newest transition (0 when none)."""
        with self._lock:
            return int(self._db().execute("SELECT COALESCE(MAX(id), 0) FROM alert_events").fetchone()[0])

    def allocated(self) -> int:
        """The highest id this log ever gave a row: never lower than a follower's place while the log is
        the one it read (rows pruned below it keep it: AUTOINCREMENT); lower after the file was restored
        from an older copy or its id sequence was reset."""
        with self._lock:
            seq = self._db().execute("SELECT seq FROM sqlite_sequence WHERE name='alert_events'").fetchone()
            return max(int(seq[0]) if seq else 0, self.head())

    def key_at(self, row_id: int) -> str | None:
        """The transition row ``row_id`` holds (fingerprint, status, startsAt), None when there is none."""
        with self._lock:
            row = self._db().execute("SELECT fingerprint, status, starts_at FROM alert_events WHERE id=?",
                                    (row_id,)).fetchone()
        return None if row is None else f"{row[0]}|{row[1]}|{float(row[2])!r}"

    def current(self, upto: int | None = None) -> dict[str, Alert]:
        """Each alert as its newest transition up to ``upto`` left it (all when None), oldest first."""
        with self._lock:
            rows = self._db().execute(
                "SELECT id, record FROM alert_events WHERE id IN (SELECT MAX(id) FROM alert_events WHERE id<=? "
                "GROUP BY fingerprint) ORDER BY id", (upto if upto is not None else 2**62,)).fetchall()
        return {a.fingerprint: a for a in self._alerts(rows)}

    def evidence_head(self) -> int:
        with self._lock, contextlib.suppress(sqlite3.OperationalError):  # no table yet: none written
            return int(self._db().execute("SELECT COALESCE(MAX(id), 0) FROM alert_evidence").fetchone()[0])
        return 0

    def evidence_after(self, place: int) -> tuple[int, Evidence | None] | None:
        """The newest evidence written past ``place`` (its row id; None for a row that does not parse or a
        delta whose rows before are gone, counted like a bad transition), or None when there is none. Read
        from the evidence as of the row read last when the rows since extend it, else from the whole row."""
        with self._lock, contextlib.suppress(sqlite3.OperationalError):  # no table yet: none written
            top = int(self._db().execute("SELECT COALESCE(MAX(id), 0) FROM alert_evidence").fetchone()[0])
            if top <= place:
                return None
            base = self._folded if self._folded is not None and self._folded[0] <= top else None
            ev, why = self._fold(base, top)
            if ev is None and base is not None:  # the rows since are not a chain on it: from the whole row
                ev, why = self._fold(None, top)
            self._folded = (top, ev) if ev is not None else None
            if ev is None:
                self.bad_rows += 1
                self.bad_row = f"evidence row {top} {why}; skipped"
            return top, ev
        return None

    def _fold(self, base: tuple[int, Evidence] | None, top: int) -> tuple[Evidence | None, str]:
        rows = self._db().execute("SELECT id, record FROM alert_evidence WHERE id>? AND id<=? ORDER BY id",
                                  (base[0] if base is not None else 0, top)).fetchall()
        try:
            ev = evidence_log.fold(((int(i), r) for i, r in rows), base)
        except (ValueError, TypeError, KeyError, RecursionError, AttributeError, IndexError) as exc:
            return None, f"does not parse ({str(exc)[:80]})"
        return ev, "extends a row that is gone"

    def count_after(self, cursor: int) -> int:
        with self._lock:
            return int(self._db().execute("SELECT COUNT(*) FROM alert_events WHERE id>?", (cursor,)).fetchone()[0])


class OwnReader(TransitionLog):
    """A follower's view of a log in a file: its own read-only use of its own connection, opened again
    when the writer replaces its connection (a recreated file). While the writer holds the database in
    memory (its disk read-only, ``alerting.durable.HeldInMemory``) the held copy answers: it takes no
    writes, so no transaction is half-seen, and no handle of ours keeps the disk from being unmounted."""

    def __init__(self, writer: TransitionLog) -> None:
        super().__init__(writer.conn, writer.path)
        self.writer = writer
        self._seen: Connection | None = None
        self._own: sqlite3.Connection | None = None

    def subscribe(self, wake: Callable[[], None]) -> None:
        self.writer.subscribe(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        self.writer.unsubscribe(wake)

    def notify(self) -> None:
        self.writer.notify()

    def reader(self) -> TransitionLog:
        return self

    def _db(self) -> Connection:
        current = self.writer.conn
        if current is not self._seen:
            self.close()
            if isinstance(current, sqlite3.Connection) and self.path is not None:
                # mode=rw: never creates the file; the writer made it (a deleted one is its to recreate)
                self._own = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=rw", uri=True, timeout=10.0,
                                            isolation_level=None, check_same_thread=False)
                self._own.execute(f"PRAGMA cache_size={-CACHE_KIB}")  # it reads the log's tail (durable.py)
            # else held in memory (HeldInMemory): its copy answers, as it refuses every write
            self._seen = current
        return self._own if self._own is not None else current

    def close(self) -> None:
        self._folded = None  # row ids of another file (or of the held copy) are not this one's
        own, self._own, self._seen = self._own, None, None
        if own is not None:
            own.close()


def _not_an_alert(doc: Any) -> Alert:
    raise ValueError(f"a JSON {type(doc).__name__}, not an alert object")


class Cursor:
    """A follower's place in one log, saved with what it did with the rows up to it.

    ``at`` None: no place in this log yet (a fresh follower, or a log that replaced the one the saved
    place was in): it catches up on what fires now, not on the log's history, which would page every
    outage again. ``held``: alerts whose resolve waits for their page (see ``accept``).

    The place is checked against the log before each read (``verify``): a place past the highest id the
    log ever gave (``state.db`` restored from an older copy, or its rows deleted and the id sequence
    reset), or a row at the place that is not the one taken there (``mark``: the same, then new rows
    written over the old ids), means the ids no longer say what was taken. New transitions would sit
    below the place, never read: the place is dropped and the follower catches up on what fires now,
    as for a new log (what already paged is not paged again: the follower's own notification log)."""

    def __init__(self, log: TransitionLog, saved: dict[str, Any] | None = None,
                 on_problem: Callable[[str], None] | None = None) -> None:
        self.log = log
        self.ident = log.identity()
        self.on_problem = on_problem or (lambda text: None)
        saved = saved or {}
        ours = bool(self.ident) and saved.get("log") == self.ident
        self.at: int | None = int(saved["at"]) if ours and saved.get("at") is not None else None
        self.held: set[str] = set(saved.get("held", ())) if ours else set()
        self.mark: str | None = saved.get("mark") if ours else None  # the key of the row at ``at``
        self._marked_at = self.at if self.mark is not None else None
        self.rewinds = 0

    def _remark(self) -> None:
        """Remember what the row at the place holds, as soon as the place moves."""
        if self.at is not None and self._marked_at != self.at:
            self.mark, self._marked_at = self.log.key_at(self.at), self.at

    def to_state(self) -> dict[str, Any]:
        self._remark()
        return {"log": self.ident, "at": self.at, "held": sorted(self.held), "mark": self.mark}

    def verify(self) -> None:
        """Drop the place when the log no longer holds it (see the class); named through ``on_problem``."""
        if self.at is None:
            return
        top = self.log.allocated()
        if self.at > top:
            why = f"the saved place (row {self.at}) is past the highest row the log ever held ({top})"
        elif self._marked_at != self.at:  # moved since the last look: what its row holds now is the mark
            self._remark()
            return
        elif self.mark is not None and self.log.key_at(self.at) not in (None, self.mark):
            why = f"row {self.at} holds another transition than the one taken there"
        else:
            return
        self.rewinds += 1
        self.at, self.mark, self._marked_at, self.held = None, None, None, set()
        self.on_problem(f"rewound: {why} (state.db restored from an older copy, or its rows "
                        "deleted and the id sequence reset); re-reading it from its head: what fires now is "
                        "taken again, nothing already paged is paged twice")

    def due(self) -> list[Row]:
        """The transitions to take next, oldest first."""
        self.verify()
        if self.at is None:
            head = self.log.head()
            firing = [(head, a) for a in self.log.current(head).values() if a.status == "firing"]
            if not firing:
                self.at = head  # nothing to catch up on: the place is safe to take before it is saved
                self._remark()
            return list(firing)
        return self.log.after(self.at)

    def behind(self) -> int:
        """Transitions committed in the log and not taken yet (before a place: what fires)."""
        self.verify()
        if self.at is None:
            return sum(a.status == "firing" for a in self.log.current().values())
        return self.log.count_after(self.at)

    def accept(self, rows: list[Row], page_pending: Callable[[str], bool],
               observe: Callable[[Alert], None]) -> int:
        """Hand ``rows`` to ``observe`` in order, the cursor moving past each; how many were taken (a row
        that does not parse is passed over, counted by the log).

        A backlog (writes that failed for a while) can hold an alert's firing and its resolve together;
        taken at once, the resolve would replace the firing before its group flushed and the outage
        would never page. So the cursor stops before such a resolve and stays there until the page has
        flushed (``page_pending`` False): FIRING, then RESOLVED, as if the disk had never been full."""
        try:
            return self._accept(rows, page_pending, observe)
        finally:
            self._remark()

    def _accept(self, rows: list[Row], page_pending: Callable[[str], bool],
                observe: Callable[[Alert], None]) -> int:
        fired: set[str] = set()
        taken = 0
        for i, alert in rows:
            if alert is None:
                self.at, taken = max(self.at or 0, i), taken + 1
                continue
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
