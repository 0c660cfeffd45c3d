"""Issue 12, alerting side: delivery off the watch path (per-receiver workers), inhibition linear in
the number of alerts, bounded state (retention, only changed parts written)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

import alerting.inhibit as inhibit_mod
from alerting.clock import SimulatedClock, SystemClock
from alerting.config import InhibitRule, parse_config
from alerting.engine import AlertEngine
from alerting.inhibit import Inhibitor
from alerting.matchers import parse_matcher
from alerting.model import Alert
from harness.standin import WebhookStandIn
from tests.alerting.helpers import T0, alert


def two_receivers(fast: WebhookStandIn, slow: WebhookStandIn, slow_timeout: str = "10s") -> dict:
    return {"receivers": [{"name": "fast", "type": "webhook", "url": fast.url},
                          {"name": "slow", "type": "webhook", "url": slow.url, "timeout": slow_timeout}],
            "route": {"receiver": "fast", "group_wait": "0s", "group_interval": "1s", "repeat_interval": "1h",
                      "routes": [{"receiver": "slow", "continue": True}, {"receiver": "fast"}]},
            "outbox": {"backoff_initial": "0.2s", "backoff_max": "1s"}}


# -- 3. delivery never blocks watching ---------------------------------------------------------------

def test_a_hanging_receiver_delays_only_its_own_messages(tmp_path: Path) -> None:
    fast, slow = WebhookStandIn(), WebhookStandIn(hang_s=3.0)
    slow.fail_next(1, "timeout")  # the first request hangs 3 s and is lost, the retry is accepted
    engine = AlertEngine(parse_config(two_receivers(fast, slow)), tmp_path / "a.db", SystemClock())
    try:
        engine.start_delivery()
        engine.submit([alert("GPUXidError", node="gpu-1")])
        started = time.monotonic()
        engine.tick()
        assert time.monotonic() - started < 1.0  # the tick only queued: no HTTP inside it
        deadline = time.monotonic() + 2.5
        while not fast.received and time.monotonic() < deadline:
            time.sleep(0.02)
            engine.tick()
        assert len(fast.received) == 1
        # under load the slow receiver's worker may reach its robot a moment after the fast one delivered
        assert wait_until(lambda: slow.attempts >= 1, 2.0)
        assert slow.attempts == 1 and not slow.received  # still hanging on its first request (3 s)
        assert engine.oldest_undelivered() is not None
        deadline = time.monotonic() + 10
        while not slow.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(slow.received) == 1  # delivered by its own worker after the hang
        assert wait_until(lambda: engine.oldest_undelivered() is None)
    finally:
        engine.close()
        fast.close()
        slow.close()


def wait_until(pred, timeout: float = 5.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_close_does_not_wait_for_a_hanging_receiver(tmp_path: Path) -> None:
    fast, slow = WebhookStandIn(), WebhookStandIn(hang_s=20.0)
    slow.fail_next(5, "timeout")
    engine = AlertEngine(parse_config(two_receivers(fast, slow, "30s")), tmp_path / "a.db", SystemClock())
    try:
        engine.start_delivery()
        engine.submit([alert("GPUXidError", node="gpu-1")])
        engine.tick()
        assert wait_until(lambda: slow.attempts == 1 and len(fast.received) == 1)
        started = time.monotonic()
        engine.close()
        assert time.monotonic() - started < 3.0
        reopened = AlertEngine(parse_config(two_receivers(fast, slow, "30s")), tmp_path / "a.db", SystemClock())
        assert reopened.outbox.depth() == 1  # the message in flight is still owed (at-least-once)
        reopened.close()
    finally:
        fast.close()
        slow.close()


# -- 4. inhibition linear in the number of alerts ----------------------------------------------------

def test_inhibition_semantics() -> None:
    rule = InhibitRule([parse_matcher('severity="P0"')], [parse_matcher('severity=~"P0|P2"')], ["node"])
    p0a, p2a, p2b = alert("TrainerDown", "P0", "a"), alert("GPUXidError", "P2", "a"), alert("GPUXidError", "P2", "b")
    muted = Inhibitor([rule]).muting([p0a, p2a, p2b])
    assert muted(p2a) and not muted(p2b)
    assert not muted(p0a)  # a source never inhibits itself...
    other = alert("NVLinkErrors", "P0", "a")
    muted = Inhibitor([rule]).muting([p0a, other])
    assert muted(p0a) and muted(other)  # ...but two sources on one node mute each other, as in Alertmanager
    resolved = Alert(labels=dict(p0a.labels), starts_at=T0, status="resolved")
    assert not Inhibitor([rule]).muting([resolved, p2a])(p2a)
    assert not Inhibitor([]).muting([p0a, p2a])(p2a)


def test_inhibition_work_is_linear_in_the_number_of_alerts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = inhibit_mod.all_match

    def counting(matchers, labels):  # noqa: ANN001, ANN202
        calls["n"] += 1
        return real(matchers, labels)

    monkeypatch.setattr(inhibit_mod, "all_match", counting)
    rule = InhibitRule([parse_matcher('severity="P0"')], [parse_matcher('severity="P2"')], ["node"])
    alerts = [alert("TrainerDown" if i % 10 == 0 else "GPUXidError", "P0" if i % 10 == 0 else "P2",
                    f"n{i // 10}", gpu=str(i)) for i in range(2000)]
    muted = Inhibitor([rule]).muting(alerts)
    assert sum(map(muted, alerts)) == 1800
    assert calls["n"] <= 2 * len(alerts)  # pairwise checking needed ~ n^2 = 4 000 000


# -- 7. bounded state --------------------------------------------------------------------------------

SINGLE_RULE = "rules:\n  - {name: Solo, severity: P1, window: 1s, all_of: [GPUXidError], join: [cluster, node]}\n"


def solo_engine(tmp: Path, clock: SimulatedClock, retention_s: float) -> AlertEngine:
    (tmp / "solo.yaml").write_text(SINGLE_RULE)
    cfg = parse_config({"receivers": [{"name": "hook", "type": "webhook", "url": "http://robot.invalid/hook"}],
                        "route": {"receiver": "hook", "group_wait": "0s", "group_interval": "1s",
                                  "group_by": ["alertname"]},
                        "correlation": {"include_defaults": False, "rules_files": ["solo.yaml"]}}, base_dir=tmp)
    ok = httpx.MockTransport(lambda req: httpx.Response(200, json={}))
    return AlertEngine(cfg, tmp / "alerting.db", clock, transport=ok, retention_s=retention_s)


def state_bytes(engine: AlertEngine) -> int:
    q = ("SELECT (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM state) + (SELECT COALESCE(SUM(LENGTH(value)), 0) "
         "FROM incidents) + (SELECT COALESCE(SUM(LENGTH(record)), 0) FROM alert_events) + "
         "(SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM outbox)")
    return engine.conn.execute(q).fetchone()[0]


def incident_cycle(engine: AlertEngine, clock: SimulatedClock, i: int, n: int = 1, every: float = 10.0) -> None:
    """``n`` incidents (nodes i*n ...) form, are notified, resolve and are notified; ``every`` s pass."""
    firing = [alert("GPUXidError", node=f"n{i * n + k}") for k in range(n)]
    engine.submit(firing)
    engine.tick()
    clock.advance(1.0)
    engine.submit([Alert(labels=dict(a.labels), starts_at=T0, ends_at=clock.now(), status="resolved") for a in firing])
    engine.tick()
    clock.advance(every - 1.0)


@pytest.mark.slow
def test_state_stays_flat_over_10000_resolved_incidents(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    engine = solo_engine(tmp_path, clock, retention_s=60.0)  # with pruning every 60 s: <= 3 cycles kept
    sizes = {}
    try:
        for i in range(500):
            incident_cycle(engine, clock, i, n=20, every=60.0)
            if i + 1 in (50, 500):
                sizes[(i + 1) * 20] = state_bytes(engine)
        assert len(engine.correlator.incidents) <= 60 and len(engine.history) <= 60
        assert engine.conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] <= 2 * 3
    finally:
        engine.close()
    assert sizes[10_000] <= sizes[1000] * 1.1  # without pruning: 10x


def test_resolved_incidents_are_pruned_after_the_retention(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    engine = solo_engine(tmp_path, clock, retention_s=100.0)
    try:
        for i in range(30):
            incident_cycle(engine, clock, i)  # 10 s each
        assert 9 <= len(engine.correlator.incidents) <= 17  # retention 100 s + one prune period (60 s)
        assert engine.conn.execute("SELECT COUNT(*) FROM incidents").fetchone()[0] == len(engine.correlator.incidents)
        engine.close()
        engine = solo_engine(tmp_path, clock, retention_s=100.0)  # and a restart restores only those
        assert 9 <= len(engine.correlator.incidents) <= 17  # retention 100 s + one prune period (60 s)
    finally:
        engine.close()


def test_a_save_writes_only_what_changed(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    engine = solo_engine(tmp_path, clock, retention_s=10 * 24 * 3600.0)
    try:
        for i in range(30):
            incident_cycle(engine, clock, i, n=10)
        total = state_bytes(engine)
        assert total > 200_000 and len(engine.correlator.incidents) == 300
        written: list[str] = []
        engine.conn.set_trace_callback(written.append)
        incident_cycle(engine, clock, 10_000)
        engine.conn.set_trace_callback(None)
        assert sum(map(len, written)) < 20_000  # the old snapshot rewrote every incident: > 200 KB
    finally:
        engine.close()
