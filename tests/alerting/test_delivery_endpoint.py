"""``verl-alert serve``: Alertmanager's webhook in, our rendered message out to the named robot, over real
HTTP on loopback (the WeCom stand-in); failures answered so that Alertmanager retries them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from alerting.config import parse_config
from alerting.delivery_endpoint import DeliveryEndpoint, DeliveryServer
from harness.standin import WeComStandIn

ROOT = Path(__file__).resolve().parents[2]


def payload(status: str = "firing") -> dict:
    """What Alertmanager posts for a group of one incident the monitor sent it (annotations carry the diagnosis)."""
    alert = {
        "status": status,
        "labels": {"alertname": "DataflowCollapse", "severity": "P0", "cluster": "llama", "node": "gpu-08"},
        "annotations": {"summary": "rollout buffer emptied", "root_cause": "reward model OOM on gpu-08",
                        "suggestion": "lower reward_batch_size", "plot": "http://127.0.0.1:9105/plots/x.png"},
        "startsAt": "2026-12-05T10:00:00Z",
        "endsAt": "2026-12-05T10:05:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://127.0.0.1:9105/api/v1/alerts/abc", "fingerprint": "abc",
    }
    return {"version": "4", "groupKey": '{}:{alertname="DataflowCollapse"}', "status": status,
            "receiver": "chat", "groupLabels": {"alertname": "DataflowCollapse"}, "commonLabels": alert["labels"],
            "commonAnnotations": alert["annotations"], "externalURL": "http://127.0.0.1:9093", "alerts": [alert]}


@pytest.fixture()
def stack() -> Iterator[tuple[WeComStandIn, str, DeliveryServer]]:
    robot = WeComStandIn()
    cfg = parse_config({"monitor_url": "http://127.0.0.1:9105",
                        "receivers": [{"name": "ops-wecom", "type": "wecom", "url": robot.url}],
                        "route": {"receiver": "ops-wecom"}})
    server = DeliveryServer(DeliveryEndpoint(cfg), port=0).start()
    try:
        yield robot, f"http://127.0.0.1:{server.port}", server
    finally:
        server.stop()
        robot.close()


def test_one_webhook_is_one_rendered_message_and_its_resolve_one_more(stack) -> None:
    robot, base, _ = stack
    assert httpx.post(f"{base}/hook/ops-wecom", json=payload()).status_code == 200
    assert len(robot.received) == 1
    text = robot.received[0].text
    assert "P0: Dataflow Collapse" in text
    assert "Root Cause: reward model OOM on gpu-08" in text and "Suggestion: lower reward_batch_size" in text
    assert "Console: http://127.0.0.1:9105/alerts/" in text
    assert httpx.post(f"{base}/hook/ops-wecom", json=payload("resolved")).status_code == 200
    assert len(robot.received) == 2 and "RESOLVED" in robot.received[1].text


def test_a_failing_robot_answers_503_so_alertmanager_retries_and_is_counted(stack) -> None:
    robot, base, _ = stack
    robot.fail_next(1, "500")
    got = httpx.post(f"{base}/hook/ops-wecom", json=payload())
    assert got.status_code == 503 and "wecom-key" not in got.text
    assert robot.received == []
    assert httpx.post(f"{base}/hook/ops-wecom", json=payload()).status_code == 200  # Alertmanager's retry
    metrics = httpx.get(f"{base}/metrics").text
    assert 'verl_alerting_notifications_total{receiver="ops-wecom",status="failed"} 1.0' in metrics
    assert 'verl_alerting_notifications_total{receiver="ops-wecom",status="delivered"} 1.0' in metrics


def test_unknown_receiver_and_bad_payload_are_refused_not_retried(stack) -> None:
    robot, base, _ = stack
    got = httpx.post(f"{base}/hook/nobody", json=payload())
    assert got.status_code == 404 and "ops-wecom" in got.text
    assert httpx.post(f"{base}/hook/ops-wecom", json={"alerts": [{"labels": {}}]}).status_code == 400
    assert httpx.post(f"{base}/hook/ops-wecom", content=b"{not json").status_code == 400
    assert robot.received == []


def test_serve_with_a_taken_port_is_one_line_and_exit_2() -> None:
    with DeliveryServer(DeliveryEndpoint(parse_config({
            "receivers": [{"name": "r", "type": "webhook", "url": "http://127.0.0.1:9/x"}],
            "route": {"receiver": "r"}})), port=0) as taken:
        got = subprocess.run([sys.executable, "-m", "alerting.cli", "serve", "--config",
                              str(ROOT / "alerting/examples/ha-delivery.yaml"), "--listen", f"127.0.0.1:{taken.port}"],
                             capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got.stderr
    assert got.stderr.count("\n") == 1 and "--listen" in got.stderr and "Traceback" not in got.stderr
