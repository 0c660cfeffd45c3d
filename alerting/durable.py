"""Storage that fails loudly and recovers: shared by the monitor's alert book and the alerting engine.

- ``open_sqlite`` opens (WAL) and checks a state database; a file that is not a database, or fails
  SQLite's ``quick_check``, is moved aside as ``<name>.corrupt-<unix time>`` (kept for inspection, with
  its -wal/-shm) and a fresh one is created, so the monitor comes back without a person.
- ``StorageHealth`` is where every failed write is reported: counted per (db, op), logged at most once a
  minute per (db, op), and kept as a /healthz reason until a write to that database lands again.
- ``committed`` runs the crash-point hook after each commit of the alert path: with
  ``VERL_CRASH_AFTER_COMMIT=N`` in the environment the process dies (``os._exit``, as abrupt as kill -9)
  right after its N-th commit; ``tests/monitor/test_crash_points.py`` kills the monitor at every boundary.
- State files are never reached through a symbolic link (issue 36): ``refuse_link`` refuses a path that
  is one (a state_db or lock linked to a file elsewhere would have it overwritten), and ``write_replace``
  writes a temporary file opened ``O_CREAT|O_EXCL|O_NOFOLLOW`` (a planted link or hard link at the
  temporary name is removed, never written through) before renaming it over the target.
- ``reappear`` notices a state file deleted under a running process (its open connection still writes
  into the unlinked inode) and copies the live database back to the path with SQLite's backup API.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("verl.storage")
LOG_EVERY_S = 60.0
CRASH_ENV = "VERL_CRASH_AFTER_COMMIT"
STORAGE_ERRORS = (sqlite3.Error, OSError)


class StorageUnavailable(Exception):
    """A state write did not land; nothing was applied, the caller retries later."""


def classify(exc: BaseException, path: str | Path | None = None) -> str:
    """A short reason for logs and /healthz: disk_full, read_only, io_error, gone, locked or error.
    SQLite reports a write refused by a read-only or full filesystem as a plain "disk I/O error";
    given the database's ``path``, its filesystem is asked which it is."""
    kind = _classify(exc)
    if kind == "io_error" and path is not None:
        probe = Path(str(path) + ".probe")  # one tiny write tells EROFS / ENOSPC apart from a bad disk
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(probe)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, b"x")
                os.fsync(fd)
            finally:
                os.close(fd)
            probe.unlink()
        except OSError as err:
            with contextlib.suppress(OSError):
                probe.unlink()
            return {28: "disk_full", 30: "read_only", 2: "gone"}.get(err.errno or 0, kind)
    return kind


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if "full" in text or getattr(exc, "errno", None) == 28:
        return "disk_full"
    if "readonly" in text or "read-only" in text or getattr(exc, "errno", None) == 30:
        return "read_only"
    if "unable to open" in text or isinstance(exc, FileNotFoundError):
        return "gone"
    if "locked" in text or "busy" in text:
        return "locked"
    if "i/o" in text or getattr(exc, "errno", None) == 5:
        return "io_error"
    return "error"


class StorageHealth:
    """Failed state writes, as the daemon's /healthz and metrics see them. ``error_counts()`` is read by
    whoever exports them (the monitor's ``verl_monitor_storage_errors_total{db,op}``); nothing is called back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}  # (db, op) -> failed writes since start
        self._failing: dict[str, str] = {}  # db -> reason of the newest failure, until a write lands
        self._logged: dict[tuple[str, str], float] = {}
        self.notes: dict[str, tuple[float, str]] = {}  # db -> (monotonic, event): moved aside, recreated
        self.moved_aside: set[str] = set()  # databases found corrupt at start and replaced by fresh ones

    def failed(self, db: str, op: str, exc: BaseException, path: str | Path | None = None) -> None:
        reason = classify(exc, path)
        with self._lock:
            self._errors[(db, op)] = self._errors.get((db, op), 0) + 1
            self._failing[db] = f"{db}: {op} failed ({reason}: {str(exc)[:120]})"
            mono = time.monotonic()
            if mono - self._logged.get((db, op), -LOG_EVERY_S) >= LOG_EVERY_S:
                self._logged[(db, op)] = mono
                log.error("%s: %s failed (%s: %s); kept in memory and retried with backoff, counted in "
                          "verl_monitor_storage_errors_total, logged at most once a minute", db, op, reason, exc)

    def ok(self, db: str) -> None:
        if db in self._failing:
            with self._lock:
                if self._failing.pop(db, None) is not None:
                    log.warning("%s: writes land again; what was held in memory is written now", db)

    def note(self, db: str, text: str) -> None:
        log.error("%s: %s", db, text)
        self.notes[db] = (time.monotonic(), text)

    def error_counts(self) -> dict[tuple[str, str], int]:
        """(db, op) -> failed writes since start: a monotone count, exported as a counter."""
        with self._lock:
            return dict(self._errors)

    def reasons(self) -> list[str]:
        """Databases whose writes are failing now (/healthz answers 503 while there are any)."""
        with self._lock:
            return [self._failing[k] for k in sorted(self._failing)]

    def events(self, within_s: float = 3600.0) -> list[str]:
        """Storage events of the last hour (moved aside, recreated): shown by /healthz, not failures."""
        mono = time.monotonic()
        return [f"{db}: {text}" for db, (at, text) in sorted(self.notes.items()) if mono - at < within_s]


class Backoff:
    """When the next retry of a failed write may run: 0.5 s doubling to 30 s, reset on success."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic, initial: float = 0.5,
                 cap: float = 30.0) -> None:
        self.monotonic = monotonic  # the injected clock's, so simulated time drives retries in tests
        self.initial, self.cap = initial, cap
        self.delay = 0.0
        self.not_before = float("-inf")

    def due(self) -> bool:
        return self.monotonic() >= self.not_before

    def failed(self) -> None:
        self.delay = min(self.cap, self.delay * 2 if self.delay else self.initial)
        self.not_before = self.monotonic() + self.delay

    def landed(self) -> None:
        self.delay, self.not_before = 0.0, float("-inf")


_commits = 0
_crash_after = int(os.environ.get(CRASH_ENV) or 0)


def committed() -> None:
    """Called after every commit on the alert path (the crash-point test's boundaries)."""
    global _commits
    _commits += 1
    if _crash_after and _commits >= _crash_after:
        os._exit(137)


def commit_count() -> int:
    return _commits


def refuse_link(path: str | Path, what: str = "state file") -> None:
    """OSError(ELOOP) naming ``path`` when it is a symbolic link: state is written only where configured."""
    if os.path.islink(path):
        raise OSError(errno.ELOOP, f"{what} {path} is a symbolic link; refusing to follow it (it would write "
                                   "a file elsewhere): give a real path", str(path))


def write_replace(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole, without following a link at either name (raises OSError)."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a stale temporary, or a link planted there: removed, not written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _connect(path: Path) -> sqlite3.Connection:
    # autocommit mode; writers use explicit transactions. check_same_thread is off because the API
    # thread, the evaluation loop and delivery workers share a connection behind their owner's lock.
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def open_sqlite(path: str | Path, schema: str, health: StorageHealth | None = None) -> sqlite3.Connection:
    """Open ``path`` with ``schema``; a corrupt file is moved aside and replaced by a fresh database.
    Raises sqlite3.Error/OSError only when the path cannot be written at all (a configuration error)."""
    p = Path(path)
    if str(p) == ":memory:":
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.executescript(schema)
        return conn
    p.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        refuse_link(str(p) + suffix, "state database")
    conn: sqlite3.Connection | None = None
    try:
        conn = _connect(p)
        if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("quick_check failed")
        conn.executescript(schema)
        return conn
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.OperationalError):
            raise  # read-only, full, locked, cannot open: not corruption, the operator must fix the path
        aside = p.with_name(f"{p.name}.corrupt-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(p) + suffix)
            if src.exists():
                os.replace(src, Path(str(aside) + suffix))
        text = f"corrupt database ({exc}) moved aside to {aside.name}; starting with a fresh one"
        if health is not None:
            health.moved_aside.add(p.name)
            health.note(p.name, text)
        else:
            log.error("%s: %s", p.name, text)
        conn = _connect(p)
        conn.executescript(schema)
        return conn


def reappear(conn: sqlite3.Connection, path: str | Path, health: StorageHealth | None = None
             ) -> sqlite3.Connection | None:
    """When ``path`` (or its directory) was deleted under the open ``conn``: recreate it with everything
    ``conn`` still holds and return the new connection (the caller swaps it in); None when all is well."""
    p = Path(path)
    if str(p) == ":memory:" or p.exists():
        return None
    p.parent.mkdir(parents=True, exist_ok=True)
    fresh = _connect(p)
    conn.backup(fresh)
    conn.close()
    text = f"state file {p} was deleted under the running monitor; recreated from memory"
    if health is not None:
        health.note(p.name, text)
    else:
        log.error(text)
    return fresh
