"""The issue's Done-when scenarios, driven through ``AlertEngine`` on simulated time against the fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alerting.clock import SimulatedClock
from alerting.engine import AlertEngine
from alerting.evidence import Evidence
from alerting.model import Alert
from tests.alerting.helpers import T0, Harness, alert, make_config, receiver

MEMBERS = ["RewardModelOOM", "RolloutWorkerCrash", "RolloutBufferDrop"]


def fan_out(kinds: list[str], fakes: dict[str, Any], **route: Any):  # noqa: ANN201
    """Every alert to every receiver (continue: true), like an ops group per chat tool."""
    routes = [{"matchers": ['alertname=~".+"'], "receiver": k, "continue": True} for k in kinds]
    return make_config([receiver(k, fakes[k]) for k in kinds], routes=routes, **route)


def test_dataflow_collapse_once_per_receiver(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    kinds = ["dingtalk", "wecom", "feishu"]
    h = Harness(tmp_path, fan_out(kinds, fakes), clock)
    h.engine.submit([], Evidence(config={"gpu-08": {"reward_batch_size": "64", "offload_reward_to_cpu": "false"}}))
    member_fps = []
    for i, name in enumerate(MEMBERS):
        clock.set(T0 + 40 * i)  # within the 2 min window
        a = alert(name, gpu_model="A100-80G")
        member_fps.append(a.fingerprint)
        h.engine.submit([a])
        h.engine.tick()
    assert h.engine.drain(3600)
    for k in kinds:
        (msg,) = fakes[k].received
        assert msg.text.splitlines()[0] == "【verl-alert】P0: Dataflow Collapse"
        assert "Root Cause: Reward Model OOM on node gpu-08 (A100-80G)" in msg.text
        assert "Suggestion: Reduce reward_batch_size from 64 to 32, or add --offload_reward_to_cpu" in msg.text
    (inc,) = [r for r in h.records if r["kind"] == "incident"]
    assert inc["labels"]["alertname"] == "DataflowCollapse" and sorted(inc["members"]) == sorted(member_fps)
    notes = [r for r in h.records if r["kind"] == "notification"]
    assert sorted(r["receiver"] for r in notes) == sorted(kinds)
    assert all(r["status"] == "delivered" and set(member_fps) <= set(r["fingerprints"]) for r in notes)
    # members resolving resolve the incident: one RESOLVED message each, still no member on its own
    clock.advance(600)
    h.engine.submit([alert(n, gpu_model="A100-80G", status="resolved") for n in MEMBERS])
    assert h.engine.drain(3600)
    for k in kinds:
        assert [m.text.splitlines()[0] for m in fakes[k].received] == [
            "【verl-alert】P0: Dataflow Collapse", "【verl-alert】RESOLVED P0: Dataflow Collapse"]
    h.engine.close()


def test_lone_member_is_sent_after_the_window(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, fan_out(["dingtalk"], fakes, group_wait="0s"), clock)
    h.engine.submit([alert("RewardModelOOM")])
    h.engine.tick()
    assert fakes["dingtalk"].received == []
    assert h.engine.drain(600)
    (msg,) = fakes["dingtalk"].received
    assert msg.at == T0 + 120 and "Reward Model OOM" in msg.text
    h.engine.close()


def test_storm_of_300_gpu_alerts_respects_robot_limits(tmp_path: Path, clock: SimulatedClock,
                                                       fakes: dict[str, Any]) -> None:
    kinds = ["dingtalk", "wecom"]
    reg = CollectorRegistry()
    cfg = fan_out(kinds, fakes)
    records: list[dict[str, Any]] = []
    engine = AlertEngine(cfg, tmp_path / "db", clock, on_record=records.append, registry=reg)
    fired = []
    for i in range(300):  # 38 nodes x 8 GPUs, all inside one minute
        clock.set(T0 + i * 0.2)
        a = alert("GPUOverTemperature", severity="P1", node=f"gpu-{i // 8:02d}", gpu=str(i % 8))
        fired.append(a.fingerprint)
        engine.submit([a])
        engine.tick()
    assert engine.drain(2 * 3600)
    from tests.alerting.fakes import max_in_window

    for k in kinds:
        fake = fakes[k]
        assert max_in_window(fake) <= 20
        assert fake.attempts == len(fake.received)  # never answered "too fast"
        got = {fp for r in records if r["kind"] == "notification" and r["receiver"] == k
               and r["status"] == "delivered" for fp in r["fingerprints"]}
        assert set(fired) <= got
        assert any(r.get("digest") for r in records if r["receiver"] == k)
    assert reg.get_sample_value("verl_alerting_digests_total", {"receiver": "dingtalk"}) >= 1
    assert reg.get_sample_value("verl_alerting_outbox_depth") == 0
    engine.close()


def _texts(fake: Any) -> list[str]:
    return [r.text for r in fake.received]


@pytest.mark.parametrize("failure", ["down", "errcode:130101", "500"])
def test_outage_delivers_everything_once_in_order(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any],
                                                  failure: str) -> None:
    dt = fakes["dingtalk"]
    h = Harness(tmp_path, fan_out(["dingtalk"], fakes, group_interval="1m"), clock)
    if failure == "down":
        dt.down()
    else:
        dt.fail_next(1000, failure)
    h.engine.submit([alert("TrainerDown", severity="P0"), alert("ThroughputDrop", severity="P2")])
    clock.advance(90)
    h.engine.tick()
    h.engine.submit([alert("TrainerDown", severity="P0", status="resolved")])
    assert not h.engine.drain(600)  # ten minutes of outage: nothing can go out
    assert h.engine.outbox.depth() == 3 and dt.received == []
    if failure == "down":
        dt.up()
    else:
        dt.script.clear()
    assert h.engine.drain(3600)
    texts = _texts(dt)
    firsts = [t.splitlines()[0] for t in texts]
    assert sorted(firsts) == sorted(["【verl-alert】P0: Trainer Down", "【verl-alert】RESOLVED P0: Trainer Down",
                                     "【verl-alert】P2: Throughput Drop"])
    assert firsts.index("【verl-alert】P0: Trainer Down") < firsts.index("【verl-alert】RESOLVED P0: Trainer Down")
    failed = [r for r in h.records if r["kind"] == "notification" and r["status"] == "failed"]
    assert failed and all(r["retry"] for r in failed)
    delivered = [r for r in h.records if r["kind"] == "notification" and r["status"] == "delivered"]
    assert len(delivered) == 3 and max(r["attempts"] for r in delivered) > 1
    h.engine.close()


def test_restart_with_non_empty_outbox(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    wc = fakes["wecom"]
    h = Harness(tmp_path, fan_out(["wecom"], fakes), clock)
    wc.down()
    h.engine.submit([alert("CheckpointStale"), alert("NVLinkErrors", severity="P2")])
    assert not h.engine.drain(120)
    assert h.engine.outbox.depth() == 2
    h.restart()  # the monitor restarts; the outbox and the notification log are on disk
    wc.up()
    h.engine.submit([alert("CheckpointStale"), alert("NVLinkErrors", severity="P2")])  # re-evaluated, same alerts
    assert h.engine.drain(3600)
    assert sorted(t.splitlines()[0] for t in _texts(wc)) == ["【verl-alert】P1: Checkpoint Stale",
                                                             "【verl-alert】P2: NVLink Errors"]
    h.restart()
    h.engine.submit([alert("CheckpointStale")])
    assert h.engine.drain(3600) and len(wc.received) == 2  # nothing twice after another restart
    h.engine.close()


def test_restart_keeps_held_members(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, fan_out(["feishu"], fakes), clock)
    h.engine.submit([], Evidence(config={"gpu-08": {"reward_batch_size": "48"}}))
    h.engine.submit([alert(MEMBERS[0]), alert(MEMBERS[1])])
    h.restart()
    clock.advance(30)
    h.engine.submit([alert(MEMBERS[2])])
    assert h.engine.drain(3600)
    (msg,) = fakes["feishu"].received
    assert "Dataflow Collapse" in msg.text and "from 48 to 24" in msg.text
    h.engine.close()


def test_silence_mutes_then_releases(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, fan_out(["webhook"], fakes), clock)
    sid = h.engine.views.add_silence(['alertname="ThroughputDrop"'], duration_s=600, comment="maintenance")
    h.engine.submit([alert("ThroughputDrop", severity="P2"), alert("TrainerDown", severity="P0")])
    h.engine.drain(300)
    names = [r.body["alerts"][0]["labels"]["alertname"] for r in fakes["webhook"].received]
    assert names == ["TrainerDown"]
    assert h.engine.views.silences()[0]["status"]["state"] == "active"
    assert h.engine.views.expire_silence(sid) and h.engine.views.silences()[0]["status"]["state"] == "expired"
    assert h.engine.drain(3600)
    assert [r.body["alerts"][0]["labels"]["alertname"] for r in fakes["webhook"].received][-1] == "ThroughputDrop"
    states = {a["labels"]["alertname"]: a["state"] for a in h.engine.views.alerts()}
    assert states == {"ThroughputDrop": "active", "TrainerDown": "active"}
    h.engine.close()


def test_permanent_failure_is_surfaced_not_retried(tmp_path: Path, clock: SimulatedClock,
                                                   fakes: dict[str, Any]) -> None:
    cfg = make_config([receiver("dingtalk", fakes["dingtalk"], secret="SECwrong")])
    h = Harness(tmp_path, cfg, clock)
    h.engine.submit([alert("TrainerDown", severity="P0")])
    assert h.engine.drain(3600)
    (rec,) = [r for r in h.records if r["kind"] == "notification"]
    assert rec["status"] == "failed" and not rec["retry"] and "310000" in rec["error"]
    assert "SECwrong" not in str(h.records)
    assert fakes["dingtalk"].attempts == 1
    h.engine.close()


def test_dingtalk_overrun_waits_out_the_ten_minute_throttle(tmp_path: Path, clock: SimulatedClock,
                                                             fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, fan_out(["dingtalk"], fakes, group_wait="0s"), clock)
    fakes["dingtalk"].fail_next(1, "errcode:130101")
    h.engine.submit([alert("TrainerDown", severity="P0")])
    h.engine.tick()
    assert h.engine.drain(3600)
    (msg,) = fakes["dingtalk"].received
    assert msg.at >= T0 + 600 and fakes["dingtalk"].attempts == 2
    h.engine.close()


def test_failing_user_template_falls_back_and_is_counted(tmp_path: Path, clock: SimulatedClock,
                                                         fakes: dict[str, Any],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    tpl = tmp_path / "mine.j2"
    tpl.write_text("{{ alerts[0].__class__.__mro__ }}")
    reg = CollectorRegistry()
    cfg = make_config([receiver("wecom", fakes["wecom"], template=str(tpl))], group_wait="0s")
    engine = AlertEngine(cfg, tmp_path / "db", clock, registry=reg)
    engine.submit([alert("TrainerDown", severity="P0")])
    assert engine.drain(600)
    (msg,) = fakes["wecom"].received
    assert msg.text.startswith("【verl-alert】P0: Trainer Down")
    assert reg.get_sample_value("verl_alerting_template_failures_total", {"receiver": "wecom"}) == 1
    assert reg.get_sample_value("verl_alerting_notifications_total", {"receiver": "wecom", "status": "delivered"}) == 1
    assert fakes["wecom"].key not in caplog.text
    engine.close()


def test_drain_on_wall_clock_sleeps_through_a_retry(tmp_path: Path, fakes: dict[str, Any]) -> None:
    from alerting.clock import SystemClock

    wh = fakes["webhook"]
    wh.fail_next(1, "500")
    cfg = make_config([receiver("webhook", wh)], group_wait="0s")
    cfg.outbox.backoff_initial_s, cfg.outbox.jitter = 0.2, 0.0
    engine = AlertEngine(cfg, tmp_path / "db", SystemClock())
    engine.submit([alert("TrainerDown", severity="P0")])
    assert engine.drain(10)
    # one refusal, then a retry after the backoff; a loaded core may time out one more attempt, but the
    # message is received once
    assert wh.attempts >= 2 and len(wh.received) == 1
    engine.close()


def test_the_engine_runs_its_own_timers_once_started(tmp_path: Path, fakes: dict[str, Any]) -> None:
    """Daemon mode: after ``start`` nobody calls ``tick``; group_wait and group_interval still pass and
    the page and its resolution go out (on wall time, with short intervals)."""
    import time

    from alerting.clock import SystemClock

    wh = fakes["webhook"]
    config = make_config([receiver("webhook", wh)], group_wait="0.2s", group_interval="0.3s")
    engine = AlertEngine(config, tmp_path / "alerting.db", SystemClock())
    engine.start()
    try:
        a = alert("TrainerDown", severity="P0")
        a.starts_at = time.time()
        engine.submit([a])
        deadline = time.monotonic() + 10
        while not wh.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r.body["status"] for r in wh.received] == ["firing"]
        engine.submit([Alert(dict(a.labels), starts_at=a.starts_at, ends_at=time.time(), status="resolved")])
        while len(wh.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r.body["status"] for r in wh.received] == ["firing", "resolved"]
    finally:
        engine.close()
