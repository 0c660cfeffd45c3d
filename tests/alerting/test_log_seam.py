"""The transition log as the only runtime contact between its writer (the monitor's alert book) and the
engine (alerting/translog.py, alerting/engine.py): the engine reads a log in a file through a connection
of its own, on its own thread once started, never half of an open write transaction; the evidence written
beside the transitions reaches it as data, the newest snapshot only."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import numpy as np

from alerting import translog
from alerting.clock import SimulatedClock
from alerting.durable import CACHE_KIB, open_sqlite
from alerting.engine import AlertEngine
from alerting.evidence import Evidence, NonFiniteTimes, SeriesWindow
from alerting.translog import TransitionLog
from tests.alerting.helpers import T0, alert, make_config


def _writer(path: Path) -> TransitionLog:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    translog.create(conn)
    return TransitionLog(conn, path)


def _engine(tmp_path: Path) -> AlertEngine:
    return AlertEngine(make_config([{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}]),
                       tmp_path / "alerting.db", SimulatedClock(T0))


def _evidence(at: float, kl: float) -> Evidence:
    window = SeriesWindow("verl_kl_coef", {"node": "gpu-08", "job": "verl"}, np.array([at - 2.0, at]),
                          np.array([0.0, kl]))
    return Evidence(at, (window,), (NonFiniteTimes("verl_reward_mean", {"node": "gpu-08"}, (at - 1.0,)),),
                    {"gpu-08": {"kl_coef": "0.2"}})


def _wait(cond: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_started_engine_reads_on_its_own_thread_and_connection_and_never_sees_an_open_transaction(
        tmp_path: Path) -> None:
    log = _writer(tmp_path / "state.db")
    engine = _engine(tmp_path)
    readers: list[str] = []
    observe, catch_up, reads = engine._observe, engine.catch_up, [0]
    engine._observe = lambda a, now: (readers.append(threading.current_thread().name), observe(a, now))[1]  # type: ignore[method-assign]

    def counted() -> int:
        reads[0] += 1
        return catch_up()

    engine.catch_up = counted  # type: ignore[method-assign]
    try:
        engine.follow(log)
        assert engine.log is not log and engine.log._db() is not log.conn  # no connection (or lock) lent
        engine.start()
        log.conn.execute("BEGIN IMMEDIATE")
        translog.append(log.conn, alert("A"), T0)
        before = reads[0]
        log.notify()
        assert _wait(lambda: reads[0] >= before + 2)  # read twice since: the open transaction is not visible
        assert engine.history == {} and readers == []
        log.conn.execute("COMMIT")
        log.notify()
        assert _wait(lambda: alert("A").fingerprint in engine.history)
        assert set(readers) == {"alerting-timers"}
    finally:
        engine.close()
        log.conn.close()


def test_evidence_written_beside_the_transitions_reaches_the_engine_newest_snapshot_only(tmp_path: Path) -> None:
    log = _writer(tmp_path / "state.db")
    engine = _engine(tmp_path)
    try:
        translog.append_evidence(log.conn, _evidence(T0 - 10, 9.0), T0 - 10)  # before it followed: not read
        engine.follow(log)
        log.conn.execute("BEGIN IMMEDIATE")
        translog.append(log.conn, alert("KLDriftDetected"), T0)
        translog.append_evidence(log.conn, _evidence(T0, 0.0), T0)
        translog.append_evidence(log.conn, _evidence(T0 + 1, 0.1), T0 + 1)
        log.conn.execute("COMMIT")
        assert log.conn.execute("SELECT COUNT(*) FROM alert_evidence").fetchone()[0] == 1  # one snapshot kept
        assert engine.catch_up() == 1
        got = engine.correlator.evidence
        assert got is not None and got.taken_at == T0 + 1
        reading = got.latest("verl_kl_coef", "gpu-08")
        assert reading is not None and reading.value == 0.1 and reading.t == T0 + 1
        assert got.nonfinite_times[0].times == (T0,) and engine.correlator.config_info["gpu-08"]["kl_coef"] == "0.2"
        assert engine.catch_up() == 0  # taken once
        log.conn.execute("INSERT INTO alert_evidence (at, record) VALUES (?, ?)", (T0 + 2, b'{"series": "x"}\n'))
        assert engine.catch_up() == 0 and engine.correlator.evidence is got  # skipped, counted, kept the last
        assert engine.metrics.log_problems.labels("bad_row")._value.get() == 1
    finally:
        engine.close()
        log.conn.close()


def test_a_follower_reopens_its_connection_when_the_writer_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    log = _writer(path)
    reader = log.reader()
    translog.append(log.conn, alert("Old"), T0)
    assert reader.head() == 1
    log.conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    fresh = _writer(path)
    log.conn = fresh.conn  # what the alert book does when its state dir was recreated
    translog.append(log.conn, alert("New"), T0)
    assert reader.head() == 1 and [a.name for _, a in reader.after(0) if a is not None] == ["New"]
    reader.close()
    log.conn.close()


def test_the_writer_and_a_follower_keep_a_small_page_cache(tmp_path: Path) -> None:
    """Each connection to a state database caps SQLite's page cache (the default, 2 MiB a connection, grew
    the monitor by 1.7 MiB over 6 h at 1000 GPUs as state.db grew): the writer's, and a follower's own."""
    conn = open_sqlite(tmp_path / "state.db", translog.SCHEMA)
    log = TransitionLog(conn, tmp_path / "state.db")
    reader = log.reader()
    translog.append(log.conn, alert("One"), T0)
    assert reader.head() == 1
    for c in (conn, reader._db()):
        assert c.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB == -512
    reader.close()
    conn.close()
