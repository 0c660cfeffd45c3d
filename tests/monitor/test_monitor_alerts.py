"""Alert state machine: pending -> firing -> resolved, `for`, keep_firing_for, SQLite restore."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alerting.clock import SimulatedClock
from monitor.evaluation.rules import load_rules
from monitor.pipeline import Pipeline

RULES = """
rules:
  - alert: Hot
    severity: P1
    for: 60s
    keep_firing_for: 30s
    select: temp
    detector: {type: threshold, op: ">", value: 80}
    summary: "{{ labels.gpu }} at {{ value }}"
"""


def make(tmp_path: Path, clock: SimulatedClock, records: list) -> Pipeline:
    f = tmp_path / "rules.yaml"
    f.write_text(RULES)
    return Pipeline(load_rules(f), clock, db_path=tmp_path / "state.db", on_record=records.append,
                    restore_grace_s=120)


def feed(p: Pipeline, clock: SimulatedClock, t: float, v: float) -> None:
    clock.set(t)
    s = p.series("temp", {"gpu": "1", "node": "n"})
    assert s is not None
    p.observe(s, t, v)
    p.tick()


def test_for_keep_firing_and_resolve(tmp_path: Path) -> None:
    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    for t in range(0, 50, 10):
        feed(p, clock, t, 90)
    assert recs == [] and len(p.book.pending()) == 1
    feed(p, clock, 60, 90)
    assert [r["status"] for r in recs] == ["firing"] and recs[0]["annotations"]["summary"] == "1 at 90.0"
    feed(p, clock, 70, 50)  # cleared here
    feed(p, clock, 90, 50)
    assert len(recs) == 1  # keep_firing_for 30 s
    feed(p, clock, 100, 50)
    assert [r["status"] for r in recs] == ["firing", "resolved"]
    assert recs[1]["endsAt"] == "1970-01-01T00:01:40Z"
    for t in range(110, 180, 10):  # a new episode is a new record with its own startsAt
        feed(p, clock, t, 95)
    assert [r["status"] for r in recs] == ["firing", "resolved", "firing"]
    assert recs[2]["startsAt"] == "1970-01-01T00:01:50Z" and recs[2]["fingerprint"] == recs[0]["fingerprint"]
    p.close()


def test_restart_restores_firing_without_duplicate_records(tmp_path: Path) -> None:
    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    for t in range(0, 70, 10):
        feed(p, clock, t, 90)
    assert [r["status"] for r in recs] == ["firing"]
    p.close()  # the process dies here; nothing else is written
    recs2: list = []
    p2 = make(tmp_path, clock, recs2)
    assert [a.name for a in p2.book.firing()] == ["Hot"]
    for t in range(70, 200, 10):
        feed(p2, clock, t, 90)  # condition continues: still the same alert, no new record
    assert recs2 == []
    assert p2.book.firing()[0].starts_at == 0
    p2.close()
    rows = sqlite3.connect(tmp_path / "state.db").execute("SELECT status FROM alert_events").fetchall()
    assert rows == [("firing",)]


def test_restored_alert_resolves_after_grace_when_condition_gone(tmp_path: Path) -> None:
    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    for t in range(0, 70, 10):
        feed(p, clock, t, 90)
    p.close()
    recs2: list = []
    p2 = make(tmp_path, clock, recs2)
    feed(p2, clock, 100, 50)
    feed(p2, clock, 210, 50)
    assert recs2 == []  # within the 120 s restore grace
    feed(p2, clock, 220, 50)
    assert [r["status"] for r in recs2] == ["resolved"]
    p2.close()


def test_an_alerts_generator_url_answers_from_the_alert_book_after_it_resolved(tmp_path: Path) -> None:
    """One alert store: /api/v1/alerts/<fingerprint> reads the book (firing, then its committed resolve),
    never the alerting engine's tables."""
    from types import SimpleNamespace

    import httpx

    from monitor.endpoints.api import MonitorAPI

    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    daemon = SimpleNamespace(pipeline=p, engine=None,
                             alerts=lambda: [dict(a.to_json(), state="firing") for a in p.book.firing()])
    api = MonitorAPI(daemon, "127.0.0.1", 0, None)  # type: ignore[arg-type]
    api.start()
    try:
        for t in range(0, 70, 10):
            feed(p, clock, t, 90)
        url = f"http://127.0.0.1:{api.port}/api/v1/alerts/{recs[0]['fingerprint']}"
        assert httpx.get(url).json()["data"]["state"] == "firing"
        for t in range(70, 110, 10):
            feed(p, clock, t, 50)
        got = httpx.get(url).json()["data"]
        assert got["state"] == "resolved" and got["endsAt"] == "1970-01-01T00:01:40Z"
        assert httpx.get(url.replace(recs[0]["fingerprint"], "0" * 16)).status_code == 404
    finally:
        api.stop()
        p.close()


def test_the_firing_counts_follow_restores_external_alerts_and_resolves(tmp_path: Path) -> None:
    """The firing gauge's counts are kept as states change, not recounted: every way into and out of
    firing moves them (a firing alert restored, one from Prometheus and its repeat, a resolve of each)."""
    from alerting.model import Alert

    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    for t in range(0, 70, 10):
        feed(p, clock, t, 90)
    assert p.book.firing_counts() == {("Hot", "P1"): 1}
    ext = Alert(labels={"alertname": "Ext", "severity": "P2", "node": "n"}, annotations={}, starts_at=65.0)
    p.submit_external([ext])
    p.submit_external([ext])  # a repeat changes nothing
    assert p.book.firing_counts() == {("Hot", "P1"): 1, ("Ext", "P2"): 1}
    assert metric_value(p, "Ext") == 1.0
    p.submit_external([Alert(labels=dict(ext.labels), annotations={}, starts_at=65.0, ends_at=68.0,
                             status="resolved")])
    assert p.book.firing_counts() == {("Hot", "P1"): 1} and metric_value(p, "Ext") is None
    p.close()
    p2 = make(tmp_path, clock, [])
    assert p2.book.firing_counts() == {("Hot", "P1"): 1}  # restored
    feed(p2, clock, 100, 50)
    feed(p2, clock, 220, 50)  # the restore grace (120 s) is over: it resolves
    assert p2.book.firing_counts() == {} and p2.book.firing() == []
    p2.close()


def metric_value(p: Pipeline, alertname: str) -> float | None:
    for fam in p.metrics.alerts_firing.collect():
        for s in fam.samples:
            if s.labels.get("alertname") == alertname:
                return s.value
    return None
