"""Issue 12 end to end: the real ``verl-monitor run`` process against misbehaving loopback peers --
a target dripping one byte a second, one that hangs, one answering garbage, one whose oversized number
later turns valid -- and a robot that hangs 20 s on every request next to a healthy one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import GOOD, metric, wait_for

from harness.ports import free_port
from harness.standin import WebhookStandIn

ROOT = Path(__file__).resolve().parents[2]
OVERSIZED = ('verl_global_step{x="1", y="2"} ' + "1" * 400 + "\n").encode()


class Peers:
    def __init__(self) -> None:
        self.healthy_hits: list[float] = []
        self.oversized_valid = threading.Event()
        self.stopping = threading.Event()
        peers = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def reply(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/healthy":
                    peers.healthy_hits.append(time.monotonic())
                    return self.reply(GOOD.encode())
                if self.path == "/hang":
                    peers.stopping.wait(30)
                    return None
                if self.path == "/garbage":
                    return self.reply(b"\x00\xff\xfe<html>\x89PNG\r\n{{{ not metrics\n")
                if self.path == "/oversized":
                    return self.reply(b"verl_rollout_workers_alive 4\n" if peers.oversized_valid.is_set() else OVERSIZED)
                if self.path == "/drip":
                    self.send_response(200)
                    self.end_headers()
                    for _ in range(30):
                        if peers.stopping.wait(1.0):
                            break
                        try:
                            self.wfile.write(b"v")
                            self.wfile.flush()
                        except OSError:
                            break
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_the_monitor_keeps_watching_while_its_peers_misbehave(tmp_path: Path) -> None:
    peers = Peers()
    robot, hanging = WebhookStandIn(), WebhookStandIn(hang_s=20.0)
    hanging.fail_next(1000, "timeout")
    port = free_port()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"rules": [{
        "alert": "RewardModelCircuitOpen", "severity": "P1", "select": "verl_reward_model_circuit_state",
        "detector": {"type": "threshold", "op": ">=", "value": 2}, "summary": "circuit open"}]}))
    (tmp_path / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "ok", "type": "webhook", "url": robot.url + "?token=SECRET-TOKEN-1"},
                      {"name": "hangs", "type": "webhook", "url": hanging.url + "?key=SECRET-KEY-2", "timeout": "30s"}],
        "route": {"receiver": "ok", "group_wait": "0s", "group_interval": "1s",
                  "routes": [{"receiver": "hangs", "continue": True}, {"receiver": "ok"}]}}))
    targets = [{"name": "healthy", "url": f"{peers.base}/healthy", "node": "gpu-01", "interval": "0.5s",
                "timeout": "0.4s"}]
    targets += [{"name": n, "url": f"{peers.base}/{n}", "node": "gpu-01", "interval": "1s", "timeout": "1s"}
                for n in ("drip", "hang", "garbage", "oversized")]
    cfg = tmp_path / "monitor.yaml"
    cfg.write_text(yaml.safe_dump({"listen": f"127.0.0.1:{port}", "state_db": str(tmp_path / "state" / "s.db"),
                                   "eval_interval": "0.2s", "rules": ["rules.yaml"], "notify_config": "alerting.yaml",
                                   "reward_outliers": False, "targets": targets}))
    log = (tmp_path / "monitor.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config", str(cfg)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _up(url), timeout=30), "daemon did not start"
        # the alert reaches the healthy robot while the other one hangs on its first request
        assert wait_for(lambda: any("RewardModelCircuitOpen" in r.text for r in robot.received), timeout=15)
        assert wait_for(lambda: hanging.attempts >= 1, timeout=5) and not hanging.received
        # the healthy target keeps its 0.5 s schedule meanwhile
        start = time.monotonic()
        time.sleep(4.0)
        scraped = sum(1 for t in peers.healthy_hits if start <= t < start + 4.0)
        assert scraped >= 7, scraped
        assert metric(url, "verl_monitor_target_up", target="healthy") == 1
        for name, reason in (("drip", "timeout"), ("hang", "timeout"), ("garbage", "malformed_line"),
                             ("oversized", "malformed_line")):
            assert metric(url, "verl_monitor_target_up", target=name) == 0, name
            assert (metric(url, "verl_monitor_scrape_errors_total", target=name, reason=reason) or 0) >= 1, name
        assert httpx.get(f"{url}/healthz").status_code == 200
        # the oversized number turns valid: the same target is scraped again and counts as up
        peers.oversized_valid.set()
        assert wait_for(lambda: metric(url, "verl_monitor_target_up", target="oversized") == 1, timeout=5)
        assert wait_for(lambda: (metric(url, "verl_monitor_samples_ingested_total", source="oversized") or 0) >= 1)
        # SIGTERM is honoured promptly, with the hanging robot's request still in flight
        assert hanging.attempts >= 1 and not hanging.received
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert time.monotonic() - stopped < 5.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        peers.close()
        robot.close()
        hanging.close()
    log.seek(0)
    text = log.read()
    assert "Traceback" not in text
    assert "SECRET-TOKEN-1" not in text and "SECRET-KEY-2" not in text


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 503)
    except httpx.HTTPError:
        return False
