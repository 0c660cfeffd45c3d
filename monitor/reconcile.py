"""One truth at restart: the alert book (the monitor's state.db) is the record of what fires; the
alerting engine (alerting.db) commits separately, so a crash between the two commits leaves the engine
one transition behind. At start the engine's view is rebuilt from the book's: a firing alert the engine
never heard of is handed over (it pages once), an alert the engine still holds firing but the book
resolved is handed over resolved (its resolve is delivered, it never re-pages). Idempotent: when both
agree, nothing is handed over."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from alerting.model import Alert


class Book(Protocol):
    recreated: bool

    def firing(self) -> list[Alert]: ...
    def resolved_record(self, fp: str) -> Alert | None: ...


def reconcile(book: Book, engine_firing: list[Alert], now: float) -> list[Alert]:
    """The transitions the engine missed, in the order to submit them."""
    ours = {a.fingerprint: a for a in book.firing()}
    theirs = {a.fingerprint: a for a in engine_firing}
    # startsAt travels through RFC 3339 (microseconds) in the engine's table: equal within a millisecond
    out = [a for fp, a in ours.items() if fp not in theirs or abs(theirs[fp].starts_at - a.starts_at) > 1e-3]
    for fp, a in theirs.items():
        if fp in ours:
            continue
        done = book.resolved_record(fp)
        if done is None and book.recreated:
            continue  # the book's database was lost: it re-learns what fires; resolving blind would mislead
        out.append(done or dataclasses.replace(a, status="resolved", ends_at=now))
    return out
