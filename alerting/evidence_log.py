"""Evidence as rows of the transition log: a whole snapshot, then deltas that extend it.

While a diagnosable alert fires the monitor measures its evidence again every few seconds. Written whole,
each row held every kept sample of every series a procedure reads on every firing node: ~0.7 MB a node
once the histories are full (11 series x 4096 samples x 16 B), encoded and committed on the monitor's
evaluation thread every 5 s, and read and decoded again by the engine. Between two captures a history only gains its
newest samples and drops its oldest, so a row after the first names, for each series, the row before's
window it extends, the samples newer than what that window holds, and how many samples the window keeps
(``keep``): the follower's window is ``(before + newer)[-keep:]``, exactly what a whole snapshot would hold.

A window extends the one before only when both come from the same history (``SeriesWindow.lineage``: the
store's series id, not re-created since) and the window before holds every sample the new one keeps;
otherwise, and for a window seen for the first time, it is written whole inside the delta. A whole row
is written again once the deltas since the last one outgrow it (so a follower that starts reads at most
twice a snapshot), and whenever the writer cannot see the row it wrote last (a rolled-back transaction,
a recreated file): a delta is never written against a row a follower could miss.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from alerting.evidence import Evidence, SeriesWindow, from_parts, labels_of, to_record, with_head

Connection = Any  # a sqlite3.Connection or a wrapper with its execute (as in alerting.translog)


@dataclass
class _Held:
    """What the row written last holds of one series: where its window stands in that row, the history it
    came from, its newest sample time and how many samples it keeps."""

    index: int
    lineage: tuple[int, int]
    last_t: float
    keep: int


class EvidenceWriter:
    """Writes evidence rows for one log (the writer's side; ``fold`` is the follower's)."""

    def __init__(self) -> None:
        self._row: tuple[Connection, int, float] | None = None  # (connection, id, at) of the row written last
        self._chain = (0, 0)  # (id of the whole row, rows written from it on, it included)
        self._held: dict[int, _Held] = {}  # by the history a window came from (``SeriesWindow.lineage``)
        self._whole_bytes = 0  # the last whole row's size
        self._delta_bytes = 0  # the deltas' since

    def append(self, conn: Connection, evidence: Evidence, at: float) -> None:
        """Write ``evidence`` inside the caller's transaction: a delta on the row written last when it is
        still there, else a whole row in place of every earlier one."""
        if self._extends(conn):
            record, held = _delta(evidence, self._held, self._row[1])  # type: ignore[index]
            if self._delta_bytes + len(record) <= self._whole_bytes:
                cur = conn.execute("INSERT INTO alert_evidence (at, record) VALUES (?, ?)", (at, record))
                self._row, self._held = (conn, int(cur.lastrowid), at), held
                self._chain = (self._chain[0], self._chain[1] + 1)
                self._delta_bytes += len(record)
                return
        record = to_record(evidence)
        cur = conn.execute("INSERT INTO alert_evidence (at, record) VALUES (?, ?)", (at, record))
        conn.execute("DELETE FROM alert_evidence WHERE id<?", (cur.lastrowid,))
        self._row, self._held = (conn, int(cur.lastrowid), at), _whole_index(evidence)
        self._chain = (int(cur.lastrowid), 1)
        self._whole_bytes, self._delta_bytes = len(record), 0

    def _extends(self, conn: Connection) -> bool:
        """The rows from the whole one to the one written last are in this connection's database, as
        written (none rolled back, lost or deleted by hand): a follower can fold them."""
        if self._row is None or self._row[0] is not conn:
            return False
        found = conn.execute("SELECT COUNT(*), MAX(at) FROM alert_evidence WHERE id BETWEEN ? AND ?",
                             (self._chain[0], self._row[1])).fetchone()
        return int(found[0]) == self._chain[1] and found[1] is not None and float(found[1]) == self._row[2]


def _whole_index(ev: Evidence) -> dict[int, _Held]:
    held = {}
    for i, w in enumerate(ev.series):
        lineage = w.lineage()
        if lineage is not None and np.size(w.t):
            held[lineage[0]] = _Held(i, lineage, float(w.t[-1]), int(np.size(w.t)))
    return held


def _delta(ev: Evidence, before: dict[int, _Held], extends: int) -> tuple[bytes, dict[int, _Held]]:
    """``ev`` as a row extending the row ``extends`` that ``before`` describes, and what it will hold.
    Layout: a JSON head (the windows written whole: position, name, labels), a newline, then per window
    three int64 columns (the window it extends, -1 for a whole one; its new samples; the samples it keeps)
    and the samples, float64, window by window (times, then values): ~6 000 windows at 1000 GPUs, so the
    columns are not JSON."""
    count = len(ev.series)
    extended: list[int] = []  # the columns, as lists: one numpy array built at the end, not 6 000 writes
    new: list[int] = []
    keeps: list[int] = []
    whole: list[list[Any]] = []
    arrays: list[np.ndarray] = []
    held: dict[int, _Held] = {}
    for i, w in enumerate(ev.series):
        lineage = w.lineage()
        old = before.get(lineage[0]) if lineage is not None else None
        if lineage is not None and old is not None:
            t, v = w.after(old.last_t)
            if lineage[1] <= old.keep + t.size:  # the window before holds all the new one keeps
                extended.append(old.index)
                new.append(t.size)
                keeps.append(lineage[1])
                arrays += (t, v)
                held[lineage[0]] = _Held(i, lineage, float(t[-1]) if t.size else old.last_t, lineage[1])
                continue
        t, v = w.t, w.v
        whole.append([i, w.name, w.labels])
        extended.append(-1)
        new.append(np.size(t))
        keeps.append(np.size(t))
        arrays += (t, v)
        if lineage is not None and np.size(t):
            held[lineage[0]] = _Held(i, lineage, float(t[-1]), int(np.size(t)))
    head = {"taken_at": ev.taken_at, "config": ev.config, "extends": extends, "windows": count, "whole": whole,
            "nonfinite": [[n.name, n.labels, list(n.times)] for n in ev.nonfinite_times]}
    cols = np.array([extended, new, keeps], dtype="<i8")
    samples = np.concatenate(arrays).astype("<f8", copy=False) if arrays else np.empty(0, "<f8")
    body = cols.tobytes() + samples.tobytes()
    return json.dumps(head).encode() + b"\n" + body, held


def _apply(before: Evidence, doc: dict[str, Any], body: bytes) -> Evidence:
    """The evidence a delta row (its head ``doc`` and ``body``) holds on top of ``before``, the row it
    extends; ValueError when it does not fit it."""
    count = int(doc["windows"])
    if count < 0 or len(body) < 24 * count or len(body) % 8:
        raise ValueError(f"{len(body)} bytes for {count} windows")
    cols = np.frombuffer(body, dtype="<i8", count=3 * count).reshape(3, count)
    samples = np.frombuffer(body, dtype="<f8", offset=24 * count)
    whole = {int(i): (str(name), labels_of(labels)) for i, name, labels in doc["whole"]}
    if int(cols[1].sum()) * 2 != samples.size or cols.min(initial=0) < -1 or cols[0].max(initial=-1) >= len(before.series):
        raise ValueError(f"a delta of {count} windows that the row before cannot hold")
    series, at = [], 0
    for i, (index, n, keep) in enumerate(cols.T.tolist()):
        new_t, new_v = samples[at:at + n], samples[at + n:at + 2 * n]
        at += 2 * n
        if index < 0:
            name, labels = whole[i]
            series.append(SeriesWindow(name, labels, new_t.copy(), new_v.copy()))
            continue
        old = before.series[index]
        t = np.concatenate([old.t, new_t])[-keep:] if keep else old.t[:0]
        v = np.concatenate([old.v, new_v])[-keep:] if keep else old.v[:0]
        series.append(SeriesWindow(old.name, old.labels, t, v))
    return with_head(doc, tuple(series))


def fold(rows: Iterable[tuple[int, Any]], base: tuple[int, Evidence] | None = None) -> Evidence | None:
    """The evidence as of the last of ``rows`` (id, record; oldest first), starting from ``base`` (the
    evidence as of one earlier row) or from a whole row among them; None when the chain is broken (a
    delta on a row not read). Raises what ``from_record`` raises for a row that does not parse."""
    place, ev = base if base is not None else (0, None)
    for row_id, record in rows:
        if not isinstance(record, bytes):
            raise TypeError(f"a {type(record).__name__}, not an evidence row")
        head, _, body = record.partition(b"\n")
        doc = json.loads(head)
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an evidence row's head")
        if "extends" not in doc:
            ev = from_parts(doc, body)
        elif ev is not None and int(doc["extends"]) == place:
            ev = _apply(ev, doc, body)
        else:
            ev = None
        place = row_id
    return ev
