"""Storage faults on the alert path, unit level: a fault injector (harness/storagefault.py) in front of
both SQLite connections (disk full, read-only, I/O error on every write, or on one statement), a corrupt database at start, a
lost database, a deleted state dir. The real-filesystem versions (a full and a read-only tmpfs) are in
test_storage_faults_e2e.py; the crash points in test_crash_points.py."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerting.clock import SimulatedClock
from alerting.durable import StorageHealth, classify
from alerting.engine import AlertEngine
from harness.crashpoint import RULES, T0, engine_config
from harness.standin import WebhookStandIn
from harness.storagefault import FULL, Faulty, inject
from monitor.evaluation.rules import load_rules
from monitor.pipeline import Pipeline

READ_ONLY = sqlite3.OperationalError("attempt to write a readonly database")


class Monitor:
    """The daemon's alert path on simulated time: pipeline + engine delivering in line to a stand-in."""

    def __init__(self, state: Path, robot: WebhookStandIn, clock: SimulatedClock) -> None:
        self.state, self.clock, self.robot = state, clock, robot
        state.mkdir(parents=True, exist_ok=True)
        (state.parent / "rules.yaml").write_text(RULES)
        self.health = StorageHealth()
        self.engine = AlertEngine(engine_config(robot.url), state / "alerting.db", clock, health=self.health)
        self.pipe = Pipeline(load_rules(state.parent / "rules.yaml"), clock, db_path=state / "state.db",
                             engine=self.engine, restore_grace_s=0.0, health=self.health)

    def inject(self) -> tuple[Faulty, Faulty]:
        return inject(self.pipe, self.engine)

    def step(self, hot: bool, n: int = 1) -> None:
        for _ in range(n):
            self.clock.advance(5.0)
            series = self.pipe.series("crashpoint_temperature", {"node": "n1", "job": "crashpoint"})
            assert series is not None
            self.pipe.observe(series, self.clock.now(), 1.0 if hot else 0.0)
            self.pipe.tick()
            self.engine.tick()  # simulated time: the engine's timers run when the clock moves

    def pages(self) -> list[str]:
        return [a["status"] for r in self.robot.received for a in r.body["alerts"]]

    def close(self) -> None:
        self.engine.close()
        self.pipe.close()


@pytest.fixture
def robot() -> Iterator[WebhookStandIn]:
    r = WebhookStandIn()
    yield r
    r.close()


@pytest.fixture
def mon(tmp_path: Path, robot: WebhookStandIn) -> Iterator[Monitor]:
    m = Monitor(tmp_path / "state", robot, SimulatedClock(T0))
    yield m
    m.close()


@pytest.mark.parametrize("error", [FULL, READ_ONLY, sqlite3.OperationalError("disk I/O error")],
                         ids=["full", "read_only", "io_error"])
def test_an_alert_that_fired_while_writes_failed_is_paged_and_resolved_once_writes_land(
        mon: Monitor, error: Exception) -> None:
    book, engine = mon.inject()
    book.error = engine.error = error
    mon.step(hot=True, n=3)
    assert mon.pipe.book.firing() and mon.pages() == []  # detected in memory, not paged before it is written
    assert mon.pipe.book.unwritten() == 1
    assert any(r.startswith("state.db: transition failed") for r in mon.health.reasons())
    mon.step(hot=False, n=2)  # it also resolves while the disk refuses
    assert mon.pipe.book.firing() == [] and mon.pages() == []
    book.error = engine.error = None
    mon.step(hot=False, n=10)  # past the longest backoff
    assert mon.pages() == ["firing", "resolved"]
    assert mon.health.reasons() == [] and mon.pipe.book.unwritten() == 0


def test_a_transition_on_its_way_is_not_held_and_one_a_failed_write_keeps_is(mon: Monitor) -> None:
    """/healthz's "held in memory, not yet written" counts what failed writes keep, not a transition queued
    for the commit running now: a webhook's alert read mid-commit made a healthy monitor answer 503."""
    from alerting.model import Alert

    book, _ = mon.inject()
    hook = Alert(labels={"alertname": "Injected", "severity": "P1", "node": "n1", "cluster": "default"},
                 annotations={}, starts_at=T0, status="firing")
    mon.pipe.book.external(hook, mon.clock.now())  # what a commit in progress holds for an instant
    assert mon.pipe.book.unwritten() == 1 and mon.pipe.book.held() == 0
    book.error = FULL
    assert mon.pipe.submit_external([]) == []  # the commit fails: kept in memory, retried
    assert mon.pipe.book.held() == 1 and any(r.startswith("state.db: transition failed") for r in mon.health.reasons())
    book.error = None
    mon.step(hot=False, n=10)  # past the longest backoff
    assert mon.pipe.book.held() == 0 == mon.pipe.book.unwritten() and mon.pages() == ["firing"]


def test_only_the_engine_database_full_queues_nothing_twice_and_loses_nothing(mon: Monitor) -> None:
    _, engine = mon.inject()
    engine.error = FULL
    mon.step(hot=True, n=3)
    assert [a.name for a in mon.pipe.book.firing()] == ["CrashPointHot"] and mon.pages() == []
    # rolled back: the cursor did not move, the book's log still holds the transition for the engine
    assert mon.engine.problems() == ["alerting: 1 alert transition(s) in the log not yet taken"]
    assert mon.engine.outbox.depth() == 0
    engine.error = None
    mon.step(hot=True, n=2)
    assert mon.pages() == ["firing"]
    mon.step(hot=False, n=2)
    assert mon.pages() == ["firing", "resolved"]


def test_a_delivery_whose_outcome_cannot_be_written_is_not_sent_again(mon: Monitor) -> None:
    _, engine = mon.inject()
    engine.error, engine.only = FULL, "state='delivered'"
    mon.step(hot=True, n=20)  # 100 s of ticks with the outcome unwritable
    assert mon.pages() == ["firing"]  # once, not once per retry
    assert any("outcome" in r for r in mon.health.reasons())
    assert mon.engine.delivery_problems() == ["alerting.db: 1 delivery outcome(s) held in memory, not yet written"]
    engine.error = None
    mon.step(hot=True, n=2)
    assert mon.pages() == ["firing"] and mon.engine.outbox.depth() == 0 and mon.engine.delivery_problems() == []


def test_an_attempt_that_cannot_be_recorded_is_not_sent(mon: Monitor) -> None:
    _, engine = mon.inject()
    engine.error, engine.only = FULL, "attempts=attempts+1"
    mon.step(hot=True, n=4)
    assert mon.pages() == [] and mon.engine.outbox.depth() == 1
    engine.error = None
    mon.step(hot=True, n=2)
    assert mon.pages() == ["firing"]


def test_corrupt_databases_are_moved_aside_and_the_monitor_starts(tmp_path: Path, robot: WebhookStandIn) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    good = sqlite3.connect(state / "alerting.db")
    good.execute("CREATE TABLE t (x)")
    good.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    good.commit()
    good.close()
    with open(state / "alerting.db", "r+b") as fh:  # a torn file: header intact, pages garbled
        fh.seek(4096)
        fh.write(b"\xff" * 8192)
    m = Monitor(state, robot, SimulatedClock(T0))
    try:
        aside = sorted(p.name.split(".corrupt-")[0] for p in state.glob("*.corrupt-*")
                       if not p.name.endswith(("-wal", "-shm")))
        assert aside == ["alerting.db", "state.db"]
        assert len(m.health.events()) == 2 and "moved aside" in m.health.events()[0]
        m.step(hot=True, n=2)
        assert m.pages() == ["firing"]
    finally:
        m.close()


def test_silences_survive_a_lost_database(tmp_path: Path, robot: WebhookStandIn) -> None:
    clock = SimulatedClock(T0)
    m = Monitor(tmp_path / "state", robot, clock)
    sid = m.engine.views.add_silence(['alertname="CrashPointHot"'], duration_s=3600, comment="maintenance")
    m.close()
    for p in (tmp_path / "state").glob("alerting.db*"):
        p.unlink()
    m = Monitor(tmp_path / "state", robot, clock)
    try:
        assert [s["id"] for s in m.engine.views.silences()] == [sid]
        m.step(hot=True, n=3)
        assert m.pages() == []  # still silenced
    finally:
        m.close()


def test_a_deleted_state_dir_is_recreated_on_the_next_tick_with_its_silences(mon: Monitor) -> None:
    sid = mon.engine.views.add_silence(['node="n9"'], duration_s=3600)
    mon.step(hot=True, n=2)
    assert mon.pages() == ["firing"]
    shutil.rmtree(mon.state)
    mon.step(hot=True)
    assert (mon.state / "state.db").exists() and (mon.state / "alerting.db").exists()
    assert sorted(e.split(":")[0] for e in mon.health.events()) == ["alerting.db", "state.db"]
    mon.step(hot=False, n=2)
    assert mon.pages() == ["firing", "resolved"]
    again = sqlite3.connect(mon.state / "alerting.db")
    assert [r[0] for r in again.execute("SELECT id FROM silences")] == [sid]
    assert again.execute("SELECT COUNT(*) FROM outbox WHERE state='delivered'").fetchone()[0] == 2
    again.close()


def test_classify_names_the_fault() -> None:
    assert classify(FULL) == "disk_full" and classify(OSError(28, "No space left on device")) == "disk_full"
    assert classify(READ_ONLY) == "read_only" and classify(OSError(30, "Read-only file system")) == "read_only"
    assert classify(sqlite3.OperationalError("disk I/O error")) == "io_error"
    assert classify(sqlite3.OperationalError("unable to open database file")) == "gone"


def test_a_stuck_delivery_worker_is_reported(mon: Monitor) -> None:
    release, inside = threading.Event(), threading.Event()
    notifier = mon.engine.notifiers["hook"]
    real_send = notifier.send

    def hanging(*args: Any, **kw: Any) -> Any:
        inside.set()
        release.wait(10)
        return real_send(*args, **kw)

    notifier.send = hanging  # type: ignore[method-assign]
    mon.engine.start_delivery()
    try:
        mon.step(hot=True, n=2)
        assert inside.wait(5)
        time.sleep(0.3)
        assert mon.engine.delivery_problems(stuck_after_s=0.2) == [
            "delivery worker hook: stuck, no round finished for 0s"]
        release.set()
        deadline = time.monotonic() + 5
        while mon.pages() != ["firing"] and time.monotonic() < deadline:
            time.sleep(0.05)
        # the stand-in records the page before the worker's round ends: wait for the round, not a fixed time
        while mon.engine.delivery_problems(stuck_after_s=0.2) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
        assert mon.pages() == ["firing"] and mon.engine.delivery_problems(stuck_after_s=0.2) == []
    finally:
        release.set()
        mon.engine.stop_delivery()


def test_a_restart_resumes_the_engine_at_its_cursor(tmp_path: Path, robot: WebhookStandIn) -> None:
    clock = SimulatedClock(T0)
    m = Monitor(tmp_path / "state", robot, clock)
    m.step(hot=True, n=2)
    m.close()
    m = Monitor(tmp_path / "state", robot, clock)  # the cursor was committed with the page: nothing to take again
    try:
        assert [a.name for a in m.pipe.book.firing()] == ["CrashPointHot"]
        assert m.engine.problems() == [] and m.engine.catch_up() == 0
        m.step(hot=True, n=2)
        assert m.pages() == ["firing"]
        m.step(hot=False, n=2)
        assert m.pages() == ["firing", "resolved"]
    finally:
        m.close()


def test_an_alerting_db_from_before_the_log_opens_and_catches_up(tmp_path: Path, robot: WebhookStandIn) -> None:
    clock = SimulatedClock(T0)
    m = Monitor(tmp_path / "state", robot, clock)
    m.step(hot=True, n=2)
    m.close()
    old = sqlite3.connect(tmp_path / "state" / "alerting.db")  # as the engine left it before: a copy of each alert
    old.execute("CREATE TABLE alerts (fingerprint TEXT PRIMARY KEY, value TEXT NOT NULL, seen_at REAL NOT NULL)")
    old.execute("INSERT INTO alerts VALUES ('0123456789abcdef', '{}', 0)")
    old.execute("DELETE FROM state WHERE key='cursor'")
    old.commit()
    old.close()
    m = Monitor(tmp_path / "state", robot, clock)
    try:
        tables = {r[0] for r in m.engine.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "alerts" not in tables and "alert_events" in tables
        m.step(hot=True, n=2)  # no place in the book's log: it catches up on what fires, its page already sent
        assert m.pages() == ["firing"] and m.engine.problems() == []
        m.step(hot=False, n=2)
        assert m.pages() == ["firing", "resolved"]
    finally:
        m.close()


def test_a_delivery_worker_does_not_spin_on_a_full_disk(mon: Monitor) -> None:
    _, engine = mon.inject()
    engine.error, engine.only = FULL, "attempts=attempts+1"
    mon.step(hot=True)  # queued in the outbox; its attempt cannot be recorded, so it is not sent
    assert mon.pages() == [] and engine.refused == 1
    mon.engine.start_delivery()
    try:
        time.sleep(1.5)
        assert mon.pages() == [] and 2 <= engine.refused <= 5  # about one claim a second, not hundreds
    finally:
        mon.engine.stop_delivery()
