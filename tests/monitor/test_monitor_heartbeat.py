"""Who watches the watcher, monitor side: the dead man's switch ping (only while the evaluation loop
lives, its token never logged), the replica and heartbeat config, and ``--peer``."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.config import MonitorConfigError, load_config
from monitor.ha import HA_RULES, PEER_JOB, add_peer, set_aside_state
from monitor.heartbeat import HeartbeatConfig, HeartbeatPinger, LivenessMetrics

URL = "https://hc-ping.example/5f3a-secret-uuid?token=s3cret"


def pinger(status: int, alive: bool = True) -> tuple[HeartbeatPinger, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status)

    return HeartbeatPinger(HeartbeatConfig(URL, 1.0, "POST"), lambda: alive, httpx.MockTransport(handle)), seen


def ping(p: HeartbeatPinger) -> bool:
    async def once() -> bool:
        async with httpx.AsyncClient(transport=p.transport) as client:
            return await p.ping_once(client)
    return asyncio.run(once())


def test_pings_the_switch_while_the_loop_lives() -> None:
    p, seen = pinger(200)
    assert ping(p) and ping(p)
    assert [r.method for r in seen] == ["POST", "POST"] and str(seen[0].url) == URL
    assert p.sent == 2


def test_a_stuck_loop_sends_no_ping_so_the_switch_pages() -> None:
    p, seen = pinger(200, alive=False)
    assert not ping(p)
    assert seen == []


def test_a_failing_switch_is_logged_once_without_its_token(caplog: pytest.LogCaptureFixture) -> None:
    p, _ = pinger(503)
    with caplog.at_level(logging.WARNING, logger="monitor.heartbeat"):
        assert not ping(p) and not ping(p)
    assert p.failed == 2 and len(caplog.records) == 1
    assert "hc-ping.example" in caplog.text and "secret" not in caplog.text and "s3cret" not in caplog.text


def test_liveness_metrics_name_the_replica() -> None:
    reg = CollectorRegistry()
    LivenessMetrics(reg, "b", "llama").beat(1234.5)
    text = generate_latest(reg).decode()
    assert 'verl_monitor_info{cluster="llama",replica="b"} 1.0' in text
    assert 'verl_monitor_heartbeat_timestamp_seconds{replica="b"} 1234.5' in text


def test_heartbeat_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "m.yaml"
    cfg.write_text("replica: a\nheartbeat: {url_env: HB_URL, interval: 30s, method: post}\n")
    monkeypatch.setenv("HB_URL", URL)
    got = load_config(cfg)
    assert got.replica == "a" and got.heartbeat == HeartbeatConfig(URL, 30.0, "POST", 10.0)
    assert "s3cret" not in repr(got)
    monkeypatch.delenv("HB_URL")
    with pytest.raises(MonitorConfigError, match=r"heartbeat.url_env: environment variable HB_URL is unset"):
        load_config(cfg)
    cfg.write_text("heartbeat: {url: 'ftp://x'}\n")
    with pytest.raises(MonitorConfigError, match=r"heartbeat.url: must start with http"):
        load_config(cfg)


def test_peer_adds_the_other_replica_and_the_ha_rules(tmp_path: Path) -> None:
    cfg = tmp_path / "m.yaml"
    cfg.write_text("targets: [{name: trainer, url: 'http://127.0.0.1:8000/metrics'}]\n")
    got = load_config(cfg)
    got.rules = add_peer(got.targets, got.rules, "http://127.0.0.1:9106/metrics")
    peer = got.targets[-1]
    assert (peer.job, peer.url) == (PEER_JOB, "http://127.0.0.1:9106/metrics")
    assert got.rules[-1] == HA_RULES and got.rules[0].name == "default.yaml"
    with pytest.raises(MonitorConfigError, match="given twice"):
        got.rules = add_peer(got.targets, got.rules, "http://127.0.0.1:9106/metrics")


def test_empty_replica_flag_is_one_line_exit_2(tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "monitor.cli", "run", "--replica", " ", "--state-db",
                          str(tmp_path / "s.db")], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "--replica" in got.stderr and "Traceback" not in got.stderr


def test_a_restarted_replica_sets_its_previous_state_aside(tmp_path: Path) -> None:
    """Its old outbox and firing alerts would be re-posted after the peer resolved them (a second page)."""
    db = tmp_path / "state.db"
    for name in ("state.db", "state.db-wal", "alerting.db", "silences.json", "plots"):
        (tmp_path / name).write_text(name)
    moved = set_aside_state(db)
    assert {p.name for p in moved} == {"state.db", "state.db-wal", "alerting.db", "silences.json"}
    assert not db.exists() and (tmp_path / "alerting.db.previous").read_text() == "alerting.db"
    assert (tmp_path / "plots").exists()  # plot links in sent messages keep working
