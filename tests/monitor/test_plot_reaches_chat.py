"""Issue 34: an alert's plot reaches WeCom as an image through the whole path (monitor rule with
``plot: true`` -> annotate -> alert book -> engine -> outbox -> WeCom notifier), with and without a
bearer token on the monitor's API. The notification travels through the outbox as JSON, so the PNG
path the alert carries (``Alert.plot_file``) must survive that round trip."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from monitor_http import RunningDaemon, Targets, wait_for

from alerting.model import Alert, Notification
from harness.standin import WeComStandIn
from tests.alerting.helpers import T0


def test_a_notification_keeps_its_plot_through_the_outbox_json(tmp_path: Path) -> None:
    a = Alert({"alertname": "GPUMemoryLeak", "severity": "P1"}, {"summary": "leak"}, starts_at=T0,
              value=3.5, plot_file=str(tmp_path / "p.png"))
    back = Notification.from_json(Notification("wecom", "g", {}, "firing", [a], [a.fingerprint], T0).to_json())
    assert back.alerts[0].plot_file == a.plot_file and back.alerts[0].value == 3.5


@pytest.mark.slow
@pytest.mark.parametrize("token", [None, "s3cret"], ids=["no-token", "bearer-token"])
def test_the_alert_plot_reaches_wecom_as_an_image(tmp_path: Path, token: str | None) -> None:
    robot, targets = WeComStandIn(), Targets()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"rules": [{
        "alert": "RewardStdHigh", "severity": "P2", "select": "verl_reward_std", "plot": True,
        "detector": {"type": "threshold", "op": ">", "value": 0.8}, "summary": "std high"}]}))
    (tmp_path / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "wecom", "type": "wecom", "url": robot.url}],
        "route": {"receiver": "wecom", "group_wait": "1s", "group_interval": "1s"}}))
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state" / "state.db"), "eval_interval": "0.1s",
           "rules": ["rules.yaml"], "notify_config": "alerting.yaml", "reward_outliers": False,
           "targets": [{"name": "trainer", "url": f"{targets.url}/drifting", "node": "gpu-04", "interval": "0.2s"}]}
    if token:
        cfg["bearer_token"] = token
    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump(cfg))
    d = RunningDaemon(tmp_path / "monitor.yaml")
    try:
        assert wait_for(lambda: any(r.body.get("msgtype") == "image" for r in robot.received), timeout=40), \
            [r.body.get("msgtype") for r in robot.received]
    finally:
        d.stop()
        robot.close()
        targets.close()
    kinds = [r.body["msgtype"] for r in robot.received]
    assert kinds[:2] == ["markdown", "image"] and "std high" in robot.received[0].text
    (rendered,) = Path(d.daemon.config.plots_dir).glob("RewardStdHigh-*.png")
    assert base64.b64decode(robot.received[1].body["image"]["base64"]) == rendered.read_bytes()
