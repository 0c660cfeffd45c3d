"""Storage that fails loudly and recovers: shared by the monitor's alert book and the alerting engine.

- ``open_sqlite`` opens (WAL) and checks a state database; a file that is not a database, or fails
  SQLite's ``quick_check``, is moved aside as ``<name>.corrupt-<unix time>`` (kept for inspection, with
  its -wal/-shm) and a fresh one is created, so the monitor comes back without a person.
- ``StorageHealth`` is where every failed write is reported: counted per (db, op), logged at most once a
  minute per (db, op), and kept as a /healthz reason until a write to that database lands again.
- ``committed`` runs the crash-point hook after each commit of the alert path: with
  ``VERL_CRASH_AFTER_COMMIT=N`` in the environment the process dies (``os._exit``, as abrupt as kill -9)
  right after its N-th commit; ``tests/monitor/test_crash_points.py`` kills the monitor at every boundary.
- State files are never reached through a symbolic link: ``refuse_link`` refuses a path that
  is one (a state_db or lock linked to a file elsewhere would have it overwritten), and ``write_replace``
  writes a temporary file opened ``O_CREAT|O_EXCL|O_NOFOLLOW`` (a planted link or hard link at the
  temporary name is removed, never written through) before renaming it over the target.
- ``reappear`` notices a state file deleted under a running process (its open connection still writes
  into the unlinked inode), or replaced by another file (a disk repaired and mounted again), and copies
  the live database back to the path with SQLite's backup API.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("verl.storage")
LOG_EVERY_S = 60.0
CRASH_ENV = "VERL_CRASH_AFTER_COMMIT"
STORAGE_ERRORS = (sqlite3.Error, OSError)
CACHE_KIB = 512  # page cache of each connection to a state database (``_connect``)


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

    def failing(self, db: str | None = None) -> bool:
        """Whether writes to ``db`` (default: to any database) are failing now."""
        with self._lock:
            return db in self._failing if db is not None else bool(self._failing)

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


@contextlib.contextmanager
def transaction(conn: Any, health: StorageHealth, name: str, op: str, path: str | Path | None = None,
                on_failure: Callable[[], None] = lambda: None) -> Iterator[None]:
    """One write transaction on ``conn``; commit, then act: when the write fails (disk full, read-only,
    I/O error) it is rolled back, ``on_failure`` runs (the caller drops what it changed in memory; not
    when BEGIN itself failed, which changed nothing) and StorageUnavailable is raised."""
    entered = False
    try:
        conn.execute("BEGIN IMMEDIATE")
        before = conn.total_changes
        try:
            entered = True
            yield
            wrote = conn.total_changes != before
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
    except STORAGE_ERRORS as exc:
        health.failed(name, op, exc, path)
        if entered:
            on_failure()
        raise StorageUnavailable(f"{name}: {op}: {exc}") from exc
    if wrote:  # a quiet tick's empty transaction is no crash point
        committed()
    health.ok(name)


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


class StateConnection(sqlite3.Connection):
    """A state database's connection, knowing which file it opened (``identity``: device and inode)."""

    identity: tuple[int, int] | None = None


def _identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _connect(path: Path) -> sqlite3.Connection:
    # autocommit mode; writers use explicit transactions. check_same_thread is off because the API
    # thread, the evaluation loop and delivery workers share a connection behind their owner's lock.
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=10.0,
                           factory=StateConnection)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # SQLite's default page cache (2 MiB a connection) fills as the file grows: at 1000 GPUs it was 1.7 MiB
    # of the monitor's growth from 25 min to 6 h (sqlite3_memory_used 0.47 -> 2.16 MiB, state.db 6 MB). A
    # transaction touches a few pages and a follower reads the log's tail; the rest come from the OS's cache
    conn.execute(f"PRAGMA cache_size={-CACHE_KIB}")
    conn.identity = _identity(path)
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


class HeldInMemory:
    """A state database held in memory while its filesystem is read-only: the open file is
    copied here and closed, so the disk holds no file of ours and can be unmounted, fsck'd and mounted
    again without stopping the monitor. Reads answer from the copy; every write fails as on the
    read-only disk (nothing counts as written, the callers keep their held writes and retry), until
    ``reappear`` finds the directory writable and puts the copy back on disk."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.inner = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.backup(self.inner)
        conn.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    @staticmethod
    def _check(sql: str) -> None:
        if not sql.lstrip().upper().startswith(("SELECT", "PRAGMA DATA_VERSION", "ROLLBACK")):
            raise sqlite3.OperationalError("attempt to write a readonly database")

    def execute(self, sql: str, params: object = ()) -> sqlite3.Cursor:
        self._check(sql)
        return self.inner.execute(sql, params)  # type: ignore[arg-type]

    def executemany(self, sql: str, seq: object) -> sqlite3.Cursor:
        self._check(sql)
        return self.inner.executemany(sql, seq)  # type: ignore[arg-type]


def _read_only_fs(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _writable(directory: Path) -> bool:
    """Whether a file can be created in ``directory`` now (a real write, not the mount flags alone)."""
    if _read_only_fs(directory):
        return False
    probe = directory / ".verl-write-probe"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError:
        return False
    return True


def reappear(conn: sqlite3.Connection | HeldInMemory, path: str | Path, health: StorageHealth | None = None
             ) -> sqlite3.Connection | HeldInMemory | None:
    """Called before writes (each tick): the connection to use from now on, or None when all is well.

    - writes (to this or a sibling database) are failing and the directory refuses even a new empty file (an ext4 error remounted it
      read-only; ext4's ``emergency_ro`` does not show in the mount flags): the database is copied into
      memory and the file closed (``HeldInMemory``), so the disk can be repaired under the running monitor;
    - held in memory and the directory takes writes again (repaired and mounted, or unmounted): the copy
      is written back to ``path`` and a connection to it returned -- the held writes land on their
      next retry, the page goes out without a restart;
    - ``path`` (or its directory) deleted under the open file, or replaced by another file (a disk
      mounted again over it): opened again with everything ``conn`` still holds."""
    p = Path(path)
    if str(p) == ":memory:":
        return None
    if isinstance(conn, HeldInMemory):
        if not (p.parent.is_dir() and _writable(p.parent)):
            return None
        fresh = _reopen(conn.inner, p, _identity(p))
        _note(health, p, f"state dir {p.parent} takes writes again; the database held in memory is back on disk")
        return fresh
    found = _identity(p)
    if found is not None and health is not None and health.failing() and not _writable(p.parent):
        held = HeldInMemory(conn)
        _note(health, p, f"state dir {p.parent} is on a read-only filesystem: the database is held in memory "
                         "and the disk released (repair it: umount, fsck, mount; the monitor keeps running and "
                         "writes what it held once the directory takes writes)")
        return held
    opened = getattr(conn, "identity", None)
    if found is not None and (opened is None or found == opened):
        return None
    fresh = _reopen(conn, p, found)
    _note(health, p, f"state file {p} was deleted under the running monitor; recreated from memory" if found is None
          else f"state file {p} was replaced under the running monitor (a repaired or remounted disk); reopened, "
               "held writes retried")
    return fresh


def _reopen(conn: sqlite3.Connection, p: Path, found: tuple[int, int] | None) -> sqlite3.Connection:
    """A connection to ``p`` holding what ``conn`` holds (``conn`` is closed)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(p, "state database")
    fresh = _connect(p)
    try:
        conn.backup(fresh)
    except sqlite3.Error:
        if found is None:
            fresh.close()
            raise
        # the old file is unreadable too: the file found at the path (what the repair kept) stands
    conn.close()
    return fresh


def _note(health: StorageHealth | None, p: Path, text: str) -> None:
    if health is not None:
        health.note(p.name, text)
    else:
        log.error(text)
