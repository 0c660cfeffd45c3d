"""Loopback HTTP fixtures for the daemon tests: fake scrape targets and a daemon runner."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from monitor.config import load_config
from monitor.daemon import Daemon

GOOD = """# HELP verl_reward_model_circuit_state Reward model circuit breaker.
# TYPE verl_reward_model_circuit_state gauge
verl_reward_model_circuit_state 2
# TYPE verl_rollout_buffer_size gauge
verl_rollout_buffer_size{stage="train"} 4823
"""
MALFORMED = 'verl_global_step 12\nthis is { not exposition\nverl_entropy{layer="0" 1.5\nverl_kl_coef 0.1\n'
DRIFTING = "verl_reward_std 0.93\n"
OUTLIERS = {"outliers": [{"prompt": "Q: 2+2? A: fish", "reward": -4.1, "z": 9.0},
                         {"prompt": "Q: capital of France?", "reward": 3.9, "z": 7.5},
                         {"prompt": "\u0000bad", "reward": 3.1, "z": 5.0}]}
NONFINITE = "verl_reward_mean NaN\nverl_reward_std +Inf\nverl_kl_divergence -Inf\nverl_clip_fraction 0.2\n"


class Targets:
    """One threaded server; paths /good /malformed /nonfinite /hang /error (HTTP 500)."""

    def __init__(self, hang_s: float = 3.0) -> None:
        bodies = {"/good": GOOD, "/malformed": MALFORMED, "/nonfinite": NONFINITE, "/drifting": DRIFTING,
                  "/api/v1/reward_outliers?k=3": json.dumps(OUTLIERS)}
        self.bodies = bodies  # the handler serves from this dict: a test may set or change a path's body
        self.hits: dict[str, int] = {}
        stopping = threading.Event()
        self.stopping = stopping
        hits = self.hits

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                hits[self.path] = hits.get(self.path, 0) + 1
                if self.path == "/hang":
                    stopping.wait(hang_s)
                    return
                if self.path == "/error":
                    self.send_response(500)
                    self.end_headers()
                    return
                body = bodies.get(self.path, "").encode()
                self.send_response(200 if self.path in bodies else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


class Peer:
    """A loopback endpoint answering with one handler function (drip, oversize, garbage, ...)."""

    def __init__(self, handle) -> None:  # noqa: ANN001
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RunningDaemon:
    def __init__(self, config_path: Path) -> None:
        self.daemon = Daemon(load_config(config_path))
        ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self.daemon.run(ready)), daemon=True)
        self.thread.start()
        assert ready.wait(10), "daemon did not start"
        assert self.daemon.api is not None
        self.url = f"http://127.0.0.1:{self.daemon.api.port}"

    def stop(self) -> None:
        self.daemon.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()


def wait_for(pred: Callable[[], bool], timeout: float = 10.0, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def metric(url: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=5).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None
