"""Does the monitor keep watching while its peers misbehave? (issue 12)

    python benchmarks/blind.py [--json] [--duration 30] [--hang 20] [--alerts 5000]

1. Scrape rate of a healthy 1 s target while a chat robot hangs ``--hang`` seconds on every request
   (receiver timeout above the hang, so each attempt really waits it out), against the same daemon
   with a healthy robot. Eight firing alerts in eight groups keep the robot busy the whole run.
   ``ratio`` = scrapes with the hanging robot / scrapes with the healthy one (target: >= 0.95).
2. Routing of one Alertmanager webhook carrying ``--alerts`` alerts (one P0 per 10 nodes, inhibition
   of P2 by P0 on the same node, group_wait 0): ``post_s`` until the receiver answered, ``routed_s``
   until the last notification sat in the outbox, polled every 50 ms (target: <= 2 s).

The daemon runs in-process on wall time, its targets and robots on loopback. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

from harness.standin import WebhookStandIn  # noqa: E402
from monitor.config import load_config  # noqa: E402
from monitor.daemon import Daemon  # noqa: E402

BODY = "".join(f'verl_reward_model_circuit_state{{gpu="{i}"}} 2\n' for i in range(8)).encode()
RULES = {"rules": [{"alert": "RewardModelCircuitOpen", "severity": "P1", "select": "verl_reward_model_circuit_state",
                    "detector": {"type": "threshold", "op": ">=", "value": 2}, "summary": "circuit open"}]}


class Target:
    """A healthy exposition endpoint that records when it was scraped."""

    def __init__(self) -> None:
        hits = self.hits = []

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(time.monotonic())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                self.wfile.write(BODY)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class InProcess:
    def __init__(self, config: Path) -> None:
        self.daemon = Daemon(load_config(config))
        ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self.daemon.run(ready)), daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise SystemExit("error: daemon did not start")
        self.url = f"http://127.0.0.1:{self.daemon.api.port}"

    def stop(self) -> float:
        t0 = time.monotonic()
        self.daemon.stop()
        self.thread.join(30)
        return time.monotonic() - t0


def write(tmp: Path, name: str, doc: dict[str, Any]) -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(doc))
    return p


def scrape_rate(tmp: Path, duration: float, hang_s: float, hanging: bool) -> dict[str, Any]:
    target = Target()
    robot, bad = WebhookStandIn(), WebhookStandIn(hang_s=hang_s)
    if hanging:
        bad.fail_next(10_000, "timeout")
    write(tmp, "rules.yaml", RULES)
    write(tmp, "alerting.yaml", {
        "receivers": [{"name": "ok", "type": "webhook", "url": robot.url},
                      {"name": "bad", "type": "webhook", "url": bad.url, "timeout": f"{hang_s + 5:g}s"}],
        "route": {"receiver": "ok", "group_by": ["alertname", "gpu"], "group_wait": "0s", "group_interval": "1s",
                  "repeat_interval": "2s", "routes": [{"receiver": "bad", "continue": True}, {"receiver": "ok"}]},
        "outbox": {"backoff_initial": "0.5s", "backoff_max": "2s"}})
    cfg = write(tmp, "monitor.yaml", {
        "listen": "127.0.0.1:0", "state_db": str(tmp / f"state-{hanging}" / "state.db"), "eval_interval": "0.5s",
        "rules": ["rules.yaml"], "notify_config": "alerting.yaml", "reward_outliers": False,
        "targets": [{"name": "healthy", "url": target.url, "node": "gpu-01", "interval": "1s", "timeout": "1s"}]})
    d = InProcess(cfg)
    try:
        time.sleep(2.0)  # first scrape after its phase offset, alerts firing
        start = time.monotonic()
        time.sleep(duration)
        end = time.monotonic()
        scrapes = sum(1 for t in target.hits if start <= t < end)
        delivered, attempts_bad = len(robot.received), bad.attempts
    finally:
        stop_s = d.stop()
        target.close()
        robot.close()
        bad.close()
    return {"scrapes": scrapes, "expected": round(duration), "delivered_healthy_robot": delivered,
            "hanging_robot_attempts": attempts_bad, "stop_s": round(stop_s, 2)}


def webhook_routing(tmp: Path, n: int) -> dict[str, Any]:
    robot = WebhookStandIn()
    write(tmp, "rules.yaml", RULES)
    write(tmp, "alerting.yaml", {
        "receivers": [{"name": "ok", "type": "webhook", "url": robot.url}],
        "route": {"receiver": "ok", "group_wait": "0s", "group_interval": "1m"},
        "inhibit_rules": [{"source_matchers": ['severity="P0"'], "target_matchers": ['severity="P2"'],
                           "equal": ["node"]}]})
    cfg = write(tmp, "monitor.yaml", {
        "listen": "127.0.0.1:0", "state_db": str(tmp / "route" / "state.db"), "eval_interval": "0.2s",
        "rules": ["rules.yaml"], "notify_config": "alerting.yaml", "reward_outliers": False, "targets": []})
    names = ["GPUOverTemperature", "NVLinkErrors", "GPUXidError", "CheckpointStale", "RewardModelTimeout"]
    alerts = []
    for i in range(n):
        node = f"gpu-{i // 10:04d}"
        if i % 10 == 0:
            labels = {"alertname": "TrainerDown", "severity": "P0"}
        else:
            labels = {"alertname": names[i % len(names)], "severity": "P2", "gpu": str(i % 10)}
        alerts.append({"status": "firing", "labels": {**labels, "node": node, "instance": f"{node}:9400"},
                       "annotations": {"summary": "x" * 120}, "startsAt": "2026-12-01T07:00:00Z",
                       "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph"})
    body = json.dumps({"version": "4", "status": "firing", "receiver": "verl-monitor", "groupLabels": {},
                       "commonLabels": {}, "alerts": alerts}).encode()
    d = InProcess(cfg)
    db = tmp / "route" / "alerting.db"
    try:
        t0 = time.time()
        r = httpx.post(f"{d.url}/api/v1/alertmanager/webhook", content=body,
                       headers={"Content-Type": "application/json"}, timeout=600)
        post_s = time.time() - t0
        count, changed_at, stable_since = 0, time.time(), time.monotonic()
        while time.monotonic() - stable_since < 1.0 and time.time() - t0 < 600:
            with sqlite3.connect(db) as conn:
                cur = conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
            if cur != count:  # polled every 50 ms: routed_s is exact to that
                count, changed_at, stable_since = cur, time.time(), time.monotonic()
            time.sleep(0.05)
    finally:
        stop_s = d.stop()
        robot.close()
    return {"alerts": n, "body_bytes": len(body), "http_status": r.status_code, "accepted": r.json().get("accepted"),
            "post_s": round(post_s, 3), "notifications": count,
            "routed_s": round(max(changed_at - t0, post_s), 3), "stop_s": round(stop_s, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="only the final JSON line")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of scraping per phase")
    ap.add_argument("--hang", type=float, default=20.0, help="seconds the bad robot hangs per request")
    ap.add_argument("--alerts", type=int, default=5000, help="alerts in the one webhook")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        healthy = scrape_rate(base, args.duration, args.hang, hanging=False)
        hanging = scrape_rate(base, args.duration, args.hang, hanging=True)
        routing = webhook_routing(base, args.alerts)
    ratio = hanging["scrapes"] / healthy["scrapes"] if healthy["scrapes"] else 0.0
    out = {"benchmark": "blind", "duration_s": args.duration, "hang_s": args.hang,
           "scrape_healthy_robot": healthy, "scrape_hanging_robot": hanging, "ratio": round(ratio, 3),
           "ratio_ok": ratio >= 0.95, "webhook": routing, "routing_ok": routing["routed_s"] <= 2.0}
    if not args.json:
        print(f"scrapes of a 1 s target in {args.duration:g}s: {healthy['scrapes']} with a healthy robot, "
              f"{hanging['scrapes']} while a robot hangs {args.hang:g}s per request (ratio {ratio:.3f})")
        print(f"webhook of {args.alerts} alerts: answered in {routing['post_s']}s, "
              f"{routing['notifications']} notifications queued after {routing['routed_s']}s")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
