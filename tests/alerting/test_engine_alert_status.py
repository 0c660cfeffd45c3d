"""What the console reads from the engine about one alert: Alertmanager's ``status`` (the silences and
the inhibiting alerts that handle it) and the notifications that carried it, with their outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alerting.clock import SimulatedClock
from alerting.config import parse_config
from tests.alerting.helpers import Harness, alert, receiver


def _config(fake: Any):  # noqa: ANN202
    return parse_config({
        "receivers": [receiver("webhook", fake)],
        "route": {"receiver": "webhook", "group_wait": "0s", "group_interval": "1m", "repeat_interval": "4h",
                  "group_by": ["alertname", "node"]},
        "inhibit_rules": [{"source_matchers": ['severity="P0"'], "target_matchers": ['severity=~"P2|P3"'],
                           "equal": ["node"]}],
        "correlation": {"include_defaults": False}})


def test_status_names_the_silence_and_the_inhibiting_alert(tmp_path: Path, clock: SimulatedClock,
                                                            fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, _config(fakes["webhook"]), clock)
    stalled = alert("TrainingStalled", severity="P0", node="gpu-01")
    noise = alert("ThroughputDrop", severity="P2", node="gpu-01")
    elsewhere = alert("ThroughputDrop", severity="P2", node="gpu-02")
    hot = alert("GPUOverTemperature", severity="P1", node="gpu-03")
    h.engine.submit([stalled, noise, elsewhere, hot])
    h.engine.tick()
    sid = h.engine.views.add_silence(['alertname="GPUOverTemperature"'], duration_s=3600, created_by="alice", comment="fan")
    status = h.engine.views.mute_status([stalled, noise, elsewhere, hot])
    assert status[noise.fingerprint] == {"state": "suppressed", "silencedBy": [], "inhibitedBy": [stalled.fingerprint]}
    assert status[hot.fingerprint] == {"state": "suppressed", "silencedBy": [sid], "inhibitedBy": []}
    for a in (stalled, elsewhere):
        assert status[a.fingerprint] == {"state": "active", "silencedBy": [], "inhibitedBy": []}
    clock.advance(3601)  # the silence ran out
    assert h.engine.views.mute_status([hot])[hot.fingerprint]["silencedBy"] == []
    h.engine.close()


def test_deliveries_list_each_notification_that_carried_the_alert(tmp_path: Path, clock: SimulatedClock,
                                                                   fakes: dict[str, Any]) -> None:
    h = Harness(tmp_path, _config(fakes["webhook"]), clock)
    a, other = alert("GPUXidError", node="gpu-05"), alert("GPUXidError", node="gpu-06")
    h.engine.submit([a, other])
    h.engine.tick()
    assert h.engine.drain(600)
    clock.advance(120)
    h.engine.submit([alert("GPUXidError", node="gpu-05", status="resolved")])
    h.engine.tick()
    assert h.engine.drain(600)
    got = h.engine.views.deliveries(a.fingerprint)
    assert [(d["receiver"], d["status"], d["outcome"]) for d in got] == [
        ("webhook", "firing", "delivered"), ("webhook", "resolved", "delivered")]
    assert got[0]["at"] <= got[1]["at"] and got[0]["attempts"] == 1
    assert [d["status"] for d in h.engine.views.deliveries(other.fingerprint)] == ["firing"]
    h.engine.close()
