"""Evidence rows after the first carry only what is new (``alerting.evidence_log``); a follower folding them
holds exactly what a whole snapshot of the same capture would hold, whatever the histories did between."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np

from alerting import translog
from alerting.evidence import Evidence, from_record, to_record
from alerting.translog import TransitionLog
from monitor.book.evidence import EvidenceCapture
from monitor.series.store import SeriesStore, StoreLimits

NAMES = ["verl_reward_mean", "verl_kl_coef", "verl_stage_seconds"]


def _writer(path: Path) -> TransitionLog:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    translog.create(conn)
    return TransitionLog(conn, path)


def _same(got: Evidence | None, want: Evidence) -> None:
    assert got is not None
    assert got.taken_at == want.taken_at and got.config == want.config
    assert got.nonfinite_times == want.nonfinite_times
    assert [(w.name, w.labels) for w in got.series] == [(w.name, w.labels) for w in want.series]
    for g, w in zip(got.series, want.series, strict=True):
        assert np.array_equal(g.t, w.t) and np.array_equal(g.v, w.v), (w.name, w.labels, g.t.size, w.t.size)


def _write(log: TransitionLog, ev: Evidence, at: float) -> None:
    log.conn.execute("BEGIN IMMEDIATE")
    log.append_evidence(log.conn, ev, at)
    log.conn.execute("COMMIT")


def test_a_follower_holds_what_a_whole_snapshot_holds_through_wraps_merges_new_series_and_rollbacks(
        tmp_path: Path) -> None:
    rng = random.Random(7)
    store = SeriesStore(StoreLimits(capacity=2048, max_series=10_000, max_series_per_metric=10_000))
    capture = EvidenceCapture(store, None, NAMES)
    log = _writer(tmp_path / "state.db")
    reader = log.reader()
    place, t, wholes, deltas = 0, 1.7e9, 0, 0
    nodes = {f"gpu-{i}" for i in range(3)}
    for step in range(3000):  # 4.2 h at 5 s: histories wrap (2048) and merge into blocks
        t += 5.0
        if step % 400 == 399:  # a node joins, one leaves (its series stay, the capture asks other nodes)
            nodes = (nodes - {rng.choice(sorted(nodes - {"gpu-0"}))}) | {f"gpu-{step}"}
        for node in nodes:
            for name in NAMES:
                labels = {"node": node, **({"stage": "gen"} if name == "verl_stage_seconds" else {})}
                s = store.get_or_create(name, labels)
                assert s is not None
                if rng.random() < 0.97:  # a missed scrape now and then
                    s.append(t + rng.random() * 0.01, round(rng.gauss(1.0, 0.2), rng.choice((2, 6))))
        if step == 1500:  # a series evicted and created again: a new history under the same labels
            gone = store.get(next(iter(store)).key)
            assert gone is not None
            store._remove(gone, "test")
        if step == 2700:  # a reader came that needs more: the history keeps samples it had dropped from view
            for s in [s for s in store if s.labels["node"] == "gpu-0"][:2]:
                s.reserve(4096)
        if step % 3:
            continue
        ev = capture.capture(t, set(nodes), {"gpu-0": {"kl_coef": str(step)}})
        if step % 97 == 0:  # a write that rolls back: the next one cannot extend it
            log.conn.execute("BEGIN IMMEDIATE")
            log.append_evidence(log.conn, ev, t)
            log.conn.execute("ROLLBACK")
        _write(log, ev, t)
        head = log.conn.execute("SELECT record FROM alert_evidence ORDER BY id DESC LIMIT 1").fetchone()[0]
        if b'"extends"' in head.partition(b"\n")[0]:
            deltas += 1
        else:
            wholes += 1
        if rng.random() < 0.3:  # the follower reads now and then, several rows at once
            got = reader.evidence_after(place)
            assert got is not None
            place = got[0]
            _same(got[1], from_record(to_record(ev)))
    assert deltas > 10 * wholes > 0  # most rows were deltas; whole rows came back (rollbacks, growth)
    fresh = log.reader() if log.path is None else translog.OwnReader(log)  # a follower that starts now
    got = fresh.evidence_after(0)
    assert got is not None and reader.bad_rows == 0 and fresh.bad_rows == 0
    _same(got[1], from_record(to_record(ev)))


def test_a_delta_costs_what_is_new_not_the_history(tmp_path: Path) -> None:
    store = SeriesStore(StoreLimits(capacity=4096))
    capture = EvidenceCapture(store, None, NAMES)
    log = _writer(tmp_path / "state.db")
    t = 1.7e9
    series = [store.get_or_create(n, {"node": "gpu-0"}) for n in NAMES]
    sizes = []
    for step in range(4200):
        t += 5.0
        for s in series:
            assert s is not None
            s.append(t, float(step % 50))
        if step >= 4096:
            _write(log, capture.capture(t, {"gpu-0"}), t)
            sizes.append(log.conn.execute("SELECT LENGTH(record) FROM alert_evidence ORDER BY id DESC").fetchone()[0])
    whole = len(to_record(capture.capture(t, {"gpu-0"})))
    assert whole > 3 * 4096 * 16 and sizes[0] == whole  # the first row is whole: 3 full histories
    assert max(sizes[1:]) < 1000  # each later one: 3 new samples and their keys
    assert log.conn.execute("SELECT COUNT(*) FROM alert_evidence").fetchone()[0] == len(sizes)


def test_a_delta_whose_rows_before_are_gone_is_skipped_and_counted(tmp_path: Path) -> None:
    store = SeriesStore(StoreLimits(capacity=4096))
    capture = EvidenceCapture(store, None, NAMES)
    log = _writer(tmp_path / "state.db")
    s = store.get_or_create("verl_kl_coef", {"node": "gpu-0"})
    assert s is not None
    for step in range(-1000, 0):  # a history: a delta is smaller than the whole row
        s.append(1.7e9 + step, 0.1)
    for step in range(3):
        s.append(1.7e9 + step, 0.1)
        _write(log, capture.capture(1.7e9 + step, {"gpu-0"}), 1.7e9 + step)
    first = log.conn.execute("SELECT MIN(id) FROM alert_evidence").fetchone()[0]
    log.conn.execute("DELETE FROM alert_evidence WHERE id=?", (first,))  # the whole row lost
    reader = log.reader()
    got = reader.evidence_after(0)
    assert got is not None and got[1] is None and reader.bad_rows == 1 and "gone" in reader.bad_row
    s.append(1.7e9 + 9, 0.2)
    _write(log, capture.capture(1.7e9 + 9, {"gpu-0"}), 1.7e9 + 9)  # the writer sees its chain broken: whole
    got = reader.evidence_after(got[0])
    assert got is not None and got[1] is not None and got[1].latest("verl_kl_coef", "gpu-0").value == 0.2  # type: ignore[union-attr]
