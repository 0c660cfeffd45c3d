"""Silences (Alertmanager semantics): matchers plus a time range; a silenced alert is muted at flush
time and notified normally once the silence ends. Stored in the state database so ``verl-alert silence``
can add or expire them while the monitor runs, and -- as Alertmanager keeps its silences in a snapshot
file -- also in a plain JSON snapshot next to it (``silences.json``), rewritten after every change that
committed, so they survive a lost or corrupt database: at start, snapshot silences missing from the
table are put back.

Input is validated here, in the model, whichever door it came through (the monitor's API, ``verl-alert
silence``, the snapshot): as Alertmanager's ``silence.validateSilence``, times must be finite and the end
after the start; beyond Alertmanager, a silence lasts at most ``MAX_SILENCE_S`` (366 days: a mute of "a
billion hours" is an outage of the alerting nobody would notice) and starts within that much of now, so
every stored time has an RFC 3339 form. Rows stored before that check (``Infinity``, ``1e308``) are
skipped when read, each named once in the log, so listing never fails. Regex matchers are
RE2 (``alerting/matchers.py``).

Cost is independent of the number of silences: matching goes through ``SilenceIndex`` and each label
set's matching silences are remembered until the table changes (a tick re-checks only their times); a
row is parsed (its regexes compiled) once, reused until it changes, and rendered for a listing once.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerting.durable import write_replace
from alerting.matchers import Matcher, all_match, parse_matcher
from alerting.model import Alert, rfc3339

log = logging.getLogger("verl.alerting")

MAX_SILENCE_S = 366 * 86400.0   # the longest silence accepted (and how far ahead one may start)
MAX_MATCHERS = 64
MAX_TEXT = 4096                 # characters of createdBy / comment
MATCH_CACHE = 65536             # label sets whose matching silences are remembered


def validate_times(starts_at: float, ends_at: float, now: float) -> None:
    """ValueError naming what is wrong with a silence's time range."""
    for name, t in (("start", starts_at), ("end", ends_at)):
        if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
            raise ValueError(f"silence {name} {t!r} is not a finite time; give an RFC 3339 time or a duration")
    if ends_at <= starts_at:
        raise ValueError("silence end must be after its start; give a positive duration")
    if ends_at - starts_at > MAX_SILENCE_S:
        raise ValueError(f"silence lasts {(ends_at - starts_at) / 86400:.3g} days; at most "
                         f"{MAX_SILENCE_S / 86400:.0f} days (renew it when it ends)")
    if abs(starts_at - now) > MAX_SILENCE_S:
        raise ValueError(f"silence start is more than {MAX_SILENCE_S / 86400:.0f} days away from now")


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
        static = self.__dict__.get("_static")
        if static is None:  # rendered once per parsed row: a listing renders only the state per call
            static = self.__dict__["_static"] = {
                "id": self.id, "matchers": [m.to_json() for m in self.matchers], "startsAt": rfc3339(self.starts_at),
                "endsAt": rfc3339(self.ends_at), "createdBy": self.created_by, "comment": self.comment}
        return {**static, "status": {"state": self.state(now)}}


class SilenceIndex:
    """Silences by one of their equality matchers (``alertname="X"``), so that matching an alert costs
    its label count plus the few silences sharing a label with it, not the number of silences (8000
    silences were 82 % of a core when every tick re-read and re-parsed them all). Silences without an
    equality matcher are scanned."""

    def __init__(self, silences: list[Silence]) -> None:
        self.by_label: dict[tuple[str, str], list[Silence]] = {}
        self.scan: list[Silence] = []
        self._matching: dict[tuple[tuple[str, str], ...], tuple[Silence, ...]] = {}
        for s in silences:
            eq = [m for m in s.matchers if m.op == "=" and m.value]
            if eq:  # the rarest-looking key: alertname is shared by many alerts, node/gpu less so
                m = min(eq, key=lambda m: m.name == "alertname")
                self.by_label.setdefault((m.name, m.value), []).append(s)
            else:
                self.scan.append(s)

    def matching(self, labels: dict[str, str]) -> tuple[Silence, ...]:
        """The silences whose matchers match ``labels``, whatever their times: computed once per label
        set while the index lives (an alert's labels change rarely; silence times are checked per call)."""
        key = tuple(sorted(labels.items()))
        hit = self._matching.get(key)
        if hit is None:
            if len(self._matching) >= MATCH_CACHE:
                self._matching.clear()
            found = [s for k in labels.items() for s in self.by_label.get(k, ()) if all_match(s.matchers, labels)]
            found += [s for s in self.scan if all_match(s.matchers, labels)]
            hit = self._matching[key] = tuple(found)
        return hit

    def mutes(self, labels: dict[str, str], now: float) -> bool:
        return any(s.starts_at <= now < s.ends_at for s in self.matching(labels))


_ROW = "id, matchers, starts_at, ends_at, created_by, comment, created_at"


class SilenceStore:
    def __init__(self, conn: sqlite3.Connection, snapshot: str | Path | None = None) -> None:
        self.conn = conn
        self._index: SilenceIndex | None = None
        self._index_key: tuple[int, int] | None = None
        self._generation = 0  # bumped by this store's own writes (data_version only sees other connections')
        self._listing: tuple[tuple[int, int], list[Silence]] | None = None
        self._bad: set[str] = set()  # invalid stored rows already named in the log
        self._parsed: dict[str, tuple[tuple, Silence]] = {}  # id -> (row, its Silence): reused while unchanged
        self.snapshot = Path(snapshot) if snapshot is not None else None
        self._saved: str | None = None  # the snapshot's text as last written by this store
        if self.snapshot is not None:
            self._load_snapshot()

    def _load_snapshot(self) -> None:
        assert self.snapshot is not None
        try:
            if self.snapshot.exists() and not self.snapshot.is_file():  # a FIFO would block the start
                raise OSError(f"{self.snapshot} is not a regular file")
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
        write_replace(self.snapshot, text.encode())
        self._saved = text

    def add(self, matchers: list[str], starts_at: float, ends_at: float, created_by: str = "verl-alert",
            comment: str = "", now: float | None = None) -> str:
        """Raises ValueError naming the bad matcher, time range or field. ``now``: the clock's time
        (default: the start)."""
        if not matchers:
            raise ValueError("a silence needs at least one matcher, e.g. alertname=\"GPUOverTemperature\"")
        if len(matchers) > MAX_MATCHERS:
            raise ValueError(f"a silence has at most {MAX_MATCHERS} matchers, not {len(matchers)}")
        parsed = [parse_matcher(m) for m in matchers]
        validate_times(starts_at, ends_at, starts_at if now is None else now)
        if len(created_by) > MAX_TEXT or len(comment) > MAX_TEXT:
            raise ValueError(f"silence createdBy and comment are at most {MAX_TEXT} characters")
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

    def _key(self) -> tuple[int, int]:
        """Changes whenever the table did: a write by this store, or a commit by another connection
        such as ``verl-alert silence`` (SQLite's data_version)."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0], self._generation

    def _rows(self, where: str = "", args: tuple = ()) -> list[Silence]:
        rows = self.conn.execute(f"SELECT id, matchers, starts_at, ends_at, created_by, comment FROM silences {where} "
                                 "ORDER BY created_at, id", args).fetchall()
        out = []
        for r in rows:
            known = self._parsed.get(r[0])
            if known is not None and known[0] == r:  # parsed before and unchanged: RE2 compiles once per row
                out.append(known[1])
                continue
            try:
                s = Silence(r[0], [parse_matcher(m) for m in json.loads(r[1])], float(r[2]), float(r[3]),
                            str(r[4]), str(r[5]))
                rfc3339(s.starts_at), rfc3339(s.ends_at)  # noqa: B018 - finite and representable, or refused
            except (ValueError, TypeError, OverflowError, OSError) as exc:
                if r[0] not in self._bad:
                    self._bad.add(r[0])
                    log.error("silence %s ignored: stored before validation and invalid (%s); expire it with "
                              "`verl-alert silence expire %s`", r[0], str(exc)[:200], r[0])
                continue
            self._parsed[r[0]] = (r, s)
            out.append(s)
        if not where:  # the whole table was read: forget rows that are gone
            present = {r[0] for r in rows}
            for sid in [sid for sid in self._parsed if sid not in present]:
                del self._parsed[sid]
        return out

    def all(self) -> list[Silence]:
        """Every valid stored silence (parsed once per change of the table)."""
        key = self._key()
        if self._listing is None or self._listing[0] != key:
            self._listing = (key, self._rows())
        return list(self._listing[1])

    def index(self, now: float) -> SilenceIndex:
        """The not-yet-expired silences, indexed; rebuilt only when the table changed."""
        key = self._key()
        if self._index is None or key != self._index_key:
            self._index = SilenceIndex(self._rows("WHERE ends_at>?", (now,)))
            for sid in [sid for sid, (_, s) in self._parsed.items() if s.ends_at <= now]:
                del self._parsed[sid]  # expired: the index no longer needs it (a listing parses it again)
            self._index_key = key
        return self._index

    def muting(self, now: float) -> Callable[[Alert], bool]:
        """The one silence matcher: answers per alert (flush time) from the index."""
        index = self.index(now)
        return lambda alert: index.mutes(alert.labels, now)
