"""The transition log and a follower's cursor (alerting/translog.py): reads in order from a place, a
backlogged resolve waits for its firing's page, a place saved for another log is not applied, pruning
keeps what a follower catching up must see."""

from __future__ import annotations

from pathlib import Path

from alerting import translog
from alerting.clock import SimulatedClock
from alerting.engine import AlertEngine
from alerting.model import Alert
from alerting.translog import Cursor, TransitionLog
from tests.alerting.helpers import T0, alert, make_config


def write(log: TransitionLog, *alerts: Alert, at: float = T0) -> None:
    for a in alerts:
        translog.append(log.conn, a, at)


def test_a_follower_reads_in_order_from_its_place_and_a_repeat_is_not_logged_twice() -> None:
    log = TransitionLog.in_memory()
    write(log, alert("A"), alert("B"))
    cur = Cursor(log, {"log": log.identity(), "at": 0})
    seen: list[str] = []
    assert cur.accept(cur.due(), lambda fp: False, lambda a: seen.append(a.name)) == 2
    assert seen == ["A", "B"] and cur.due() == [] and cur.behind() == 0
    assert translog.append(log.conn, alert("A"), T0) is False  # a restart re-deriving a committed firing
    write(log, alert("A", status="resolved"))
    assert [(a.name, a.status) for _, a in cur.due()] == [("A", "resolved")] and cur.behind() == 1


def test_a_resolve_read_with_its_firing_waits_until_the_page_flushed() -> None:
    log = TransitionLog.in_memory()
    write(log, alert("A"), alert("A", status="resolved"), alert("B"))
    cur = Cursor(log, {"log": log.identity(), "at": 0})
    seen: list[str] = []
    pending = {alert("A").fingerprint}
    assert cur.accept(cur.due(), pending.__contains__, lambda a: seen.append(a.status)) == 1
    assert seen == ["firing"] and cur.held == {alert("A").fingerprint}
    assert cur.accept(cur.due(), pending.__contains__, lambda a: seen.append(a.status)) == 0  # still unpaged
    saved = cur.to_state()
    again = Cursor(log, saved)  # the hold survives a restart with the place it is saved with
    pending.clear()  # the firing's group flushed
    assert again.accept(again.due(), pending.__contains__, lambda a: seen.append(a.status)) == 2
    assert seen == ["firing", "resolved", "firing"] and again.held == set()


def test_a_place_in_another_log_is_not_applied_and_the_follower_catches_up_on_what_fires() -> None:
    log = TransitionLog.in_memory()
    write(log, alert("Old"), alert("Old", status="resolved"), alert("Now"))
    cur = Cursor(log, {"log": "a-log-that-was-moved-aside", "at": 1, "held": ["x"]})
    assert cur.at is None and cur.held == set()
    assert cur.behind() == 1
    rows = cur.due()
    assert [(a.name, a.status) for _, a in rows] == [("Now", "firing")]  # not the history: Old never pages
    assert cur.accept(rows, lambda fp: False, lambda a: None) == 1 and cur.at == log.head()
    empty = TransitionLog.in_memory()
    fresh = Cursor(empty, {})
    assert fresh.due() == [] and fresh.at == 0  # nothing to catch up on: its place is the log's end


def test_pruning_keeps_a_firing_alerts_newest_row_and_nothing_past_the_place() -> None:
    log = TransitionLog.in_memory()
    write(log, alert("Long"), alert("Done"), alert("Done", status="resolved"), at=T0)
    write(log, alert("Late"), at=T0 + 100)
    assert translog.prune(log.conn, T0 + 50, upto=2) == 1  # Done's firing; its resolve is past the place
    assert translog.prune(log.conn, T0 + 50) == 1  # now the resolve; Long still fires
    assert sorted(log.current()) == sorted(a.fingerprint for a in (alert("Long"), alert("Late")))


def _engine(tmp_path: Path, clock: SimulatedClock) -> AlertEngine:
    """An engine whose one receiver is a webhook nobody listens on: what it pages is read from its outbox."""
    return AlertEngine(make_config([{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}]),
                       tmp_path / "alerting.db", clock)


def test_a_backlog_longer_than_one_read_is_taken_in_one_take(tmp_path: Path) -> None:
    log = TransitionLog.in_memory()
    engine = _engine(tmp_path, SimulatedClock(T0))
    try:
        engine.follow(log)
        write(log, *(alert("A", node=f"n{i}") for i in range(translog.READ_BATCH * 2 + 5)))
        assert engine.catch_up() == translog.READ_BATCH * 2 + 5 and engine.problems() == []
        assert len(engine.views.alerts()) == translog.READ_BATCH * 2 + 5
    finally:
        engine.close()


def _state_db(path: Path) -> TransitionLog:
    import sqlite3

    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    translog.create(conn)
    return TransitionLog(conn)


def _paged(engine: AlertEngine, clock: SimulatedClock) -> set[str]:
    clock.advance(31.0)  # past group_wait: each group flushes into the outbox
    engine.tick()
    return {a.name for r in engine.outbox.heads_due(clock.now() + 1e9) for a in r.notification.alerts}


def test_a_state_db_restored_from_an_older_copy_is_noticed_at_start_and_new_alerts_page(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    log = _state_db(tmp_path / "state.db")
    write(log, alert("Old"), alert("Old", status="resolved"), alert("Still"))
    old = tmp_path / "state-old.db"
    log.conn.execute("VACUUM INTO ?", (str(old),))  # the backup an operator restores later
    write(log, *(alert(f"Mid{i}") for i in range(3)), *(alert(f"Mid{i}", status="resolved") for i in range(3)))
    config = make_config([{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}])
    engine = AlertEngine(config, tmp_path / "alerting.db", clock)
    engine.follow(log)
    engine.catch_up()
    assert engine.cursor.at == 9 and _paged(engine, clock) == {"Still"}
    sent = engine.outbox.heads_due(clock.now() + 1e9)
    engine.outbox.claim(sent)
    engine.outbox.delivered(sent)
    engine.close()
    log.conn.close()
    restored = _state_db(old)  # same log identity, ids 1-3: the cursor (9) is past its head
    engine = AlertEngine(config, tmp_path / "alerting.db", clock)
    try:
        engine.follow(restored)
        assert engine.cursor.at is None and engine.cursor.rewinds == 1  # noticed before the first tick
        assert any(e.startswith("transition log: rewound") for e in engine.health.events())
        write(restored, alert("New"))  # row 4: below the old place, never read without the check
        engine.catch_up()
        assert "New" in {a["labels"]["alertname"] for a in engine.views.alerts()}
        assert _paged(engine, clock) == {"New"}  # Still fires, taken again, but was paged already
    finally:
        engine.close()


def test_a_log_pruned_and_its_ids_reset_while_running_is_noticed_and_nothing_is_lost(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    log = _state_db(tmp_path / "state.db")
    engine = _engine(tmp_path, clock)
    try:
        engine.follow(log)
        write(log, alert("A"), alert("A", status="resolved"), alert("B"), alert("B", status="resolved"))
        engine.catch_up()
        assert engine.cursor.at == 4
        log.conn.execute("DELETE FROM alert_events")
        log.conn.execute("DELETE FROM sqlite_sequence")
        write(log, *(alert(f"N{i}") for i in range(5)))  # ids 1-5: past the place again, row 4 another
        engine.catch_up()
        assert engine.cursor.rewinds == 1
        assert {f"N{i}" for i in range(5)} <= {a["labels"]["alertname"] for a in engine.views.alerts()}
        assert _paged(engine, clock) >= {f"N{i}" for i in range(5)}
    finally:
        engine.close()


def test_a_row_that_does_not_parse_is_skipped_and_counted_and_the_rows_beside_it_are_taken(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    log = _state_db(tmp_path / "state.db")
    engine = _engine(tmp_path, clock)
    try:
        engine.follow(log)
        assert engine.catch_up() == 0 and engine.cursor.at == 0
        write(log, alert("Before"))
        log.conn.execute("INSERT INTO alert_events (fingerprint, status, starts_at, at, record) "
                         "VALUES ('x', 'firing', 1, 1, '{not json')")
        log.conn.execute("INSERT INTO alert_events (fingerprint, status, starts_at, at, record) "
                         "VALUES ('y', 'firing', 1, 1, 'null')")
        write(log, alert("After"))
        assert engine.catch_up() == 4 and engine.cursor.at == 4
        assert {a["labels"]["alertname"] for a in engine.views.alerts()} == {"Before", "After"}
        assert engine.catch_up() == 0  # passed over, not read again every tick
        assert log.bad_rows == 2
        assert engine.metrics.log_problems.labels("bad_row")._value.get() == 2
        assert any(e.startswith("transition log: row 3 does not parse") for e in engine.health.events())
        assert _paged(engine, clock) == {"Before", "After"}
        engine.close()
        engine = _engine(tmp_path, clock)
        engine.follow(log)  # a restart restores from the log with the bad rows in it
        assert {a["labels"]["alertname"] for a in engine.views.alerts()} >= {"Before", "After"}
    finally:
        engine.close()


def test_an_engine_behind_the_log_is_stuck_only_when_its_writes_fail_or_it_stopped_reading() -> None:
    """/healthz's "not yet taken": a row committed a moment ago and not read yet is the hand-over (the
    monitor once answered 503 for an alert on its way, seen under an API flood), not a problem."""
    from alerting.loghealth import STUCK_AFTER_S, TransitionLogHealth

    said: list[str] = []
    health = TransitionLogHealth(None, None)
    assert health.lag(0, 100.0, writes_failing=False) == []
    assert health.lag(3, 100.0, writes_failing=False) == []  # never read yet: the grace starts at the first look
    health.read(100.0)
    assert health.lag(3, 100.0 + STUCK_AFTER_S - 1, writes_failing=False) == []
    said += health.lag(3, 100.0 + STUCK_AFTER_S, writes_failing=False)  # no read for that long: stuck
    health.read(100.0 + STUCK_AFTER_S + 1)
    assert health.lag(3, 100.0 + STUCK_AFTER_S + 1, writes_failing=False) == []  # reading again
    said += health.lag(1, 100.0 + STUCK_AFTER_S + 1, writes_failing=True)  # its writes fail: at once
    assert said == ["alerting: 3 alert transition(s) in the log not yet taken",
                    "alerting: 1 alert transition(s) in the log not yet taken"]
