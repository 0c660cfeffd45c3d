"""The unit-level storage fault injector (tests and benchmarks/durability.py): a sqlite3 connection
whose write statements raise ``error`` while it is set -- only those containing ``only`` when given
-- while reads go through, as on a full or read-only disk. ``inject`` puts one in front of a
pipeline's alert book and an alerting engine. The real faults (a full tmpfs, an ext4 that turns
read-only) are in tests/monitor/test_storage_faults_e2e.py."""

from __future__ import annotations

import sqlite3
from typing import Any

FULL = sqlite3.OperationalError("database or disk is full")


class Faulty:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.inner = conn
        self.error: Exception | None = None
        self.only: str | None = None
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self, sql: str) -> None:
        if self.error is None or sql.lstrip().upper().startswith(("SELECT", "PRAGMA", "ROLLBACK")):
            return
        if self.only is None or self.only in sql:
            self.refused += 1
            raise self.error

    def execute(self, sql: str, params: Any = ()) -> Any:
        self._check(sql)
        return self.inner.execute(sql, params)

    def executemany(self, sql: str, seq: Any) -> Any:
        self._check(sql)
        return self.inner.executemany(sql, seq)


def inject(pipeline: Any, engine: Any) -> tuple[Faulty, Faulty]:
    """Fault injectors in front of ``pipeline``'s alert book and ``engine``'s database."""
    book, eng = Faulty(pipeline.book._db), Faulty(engine.conn)
    pipeline.book._db = book
    engine.conn = engine.outbox.conn = engine.silences_store.conn = eng
    return book, eng
