"""Loopback stand-ins for the rest of a verl deployment and a daemon driven on simulated time,
for tests/monitor (rollout servers, file_sd, host memory, Ray) and benchmarks/deployment_pages.py.

``Exposition``: one HTTP server on 127.0.0.1 (port 0) serving a text body the test changes between
scrapes -- a vLLM or SGLang server built from tests/fixtures/*.prom (exposition rendered from their
own metric definitions), node_exporter's real text, Ray's real node metrics. ``SimulatedDaemon``: the
real daemon (config file, file_sd, rules, alert book), its sources polled and its pipeline ticked on a
``SimulatedClock`` -- so "paged within 3 min" is measured on the data's time, not the test's."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from alerting.clock import SimulatedClock
from monitor.config import load_config
from monitor.daemon import Daemon
from monitor.sources.configured import build_sources
from monitor.sources.scrape_http import ScrapeClient

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"  # samples in the peers' own formats
T0 = 1_796_000_000.0


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def set_value(text: str, name: str, value: float, labels: str = "") -> str:
    """``text`` with every sample of ``name`` (whose label text contains ``labels``) set to ``value``."""
    pattern = re.compile(rf"^({re.escape(name)}(?:\{{[^}}]*\}})?) \S+$", re.M)
    return pattern.sub(lambda m: f"{m.group(1)} {value!r}" if labels in m.group(1) else m.group(0), text)


class Exposition:
    """A /metrics endpoint on loopback whose body is ``self.body`` (set it between scrapes)."""

    def __init__(self, body: str = "") -> None:
        self.body = body
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                data = owner.body.encode()
                self.send_response(200 if self.path.startswith("/metrics") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class VLLMServer(Exposition):
    """vLLM's exposition with the numbers a test moves: requests running/waiting, tokens, KV cache."""

    def __init__(self) -> None:
        super().__init__()
        self.template = fixture("vllm-v1-metrics.prom")
        self.running, self.waiting, self.tokens, self.kv = 0.0, 0.0, 1000.0, 0.2
        self.render()

    def render(self) -> None:
        text = set_value(self.template, "vllm:num_requests_running", self.running)
        text = set_value(text, "vllm:num_requests_waiting", self.waiting)
        text = set_value(text, "vllm:generation_tokens_total", self.tokens)
        text = set_value(text, "vllm:kv_cache_usage_perc", self.kv)
        self.body = set_value(text, "vllm:gpu_cache_usage_perc", self.kv)


def write_sd(path: Path, groups: list[dict[str, Any]]) -> None:
    """Write a file_sd file atomically (as Ray does: temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(groups) if path.suffix in (".yml", ".yaml") else json.dumps(groups))
    tmp.replace(path)


class SimulatedDaemon:
    """The daemon of ``config`` (a dict, written as the monitor's YAML), stepped on simulated time."""

    def __init__(self, tmp_path: Path, config: dict[str, Any], start: float = T0) -> None:
        doc = {"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state.db"), "reward_outliers": False,
               "console": False, **config}
        (tmp_path / "monitor.yaml").write_text(yaml.safe_dump(doc))
        self.clock = SimulatedClock(start)
        self.start = start
        self.daemon = Daemon(load_config(tmp_path / "monitor.yaml"), clock=self.clock)
        self.first_fired: dict[tuple[str, str], float] = {}  # (alertname, fingerprint) -> seconds after T0
        self.alerts: dict[str, Any] = {}  # fingerprint -> the alert when it first fired

    def run(self, seconds: float, step: float = 5.0, before: Callable[[float], None] | None = None) -> None:
        """Advance ``seconds`` in ``step``s: ``before(t)`` moves the fakes, every source polls, the pipeline ticks."""
        async def go() -> None:
            async with ScrapeClient() as client:
                sources = getattr(self, "_sources", None)
                if sources is None:
                    self._sources = sources = build_sources(self.daemon.config, client, self.daemon.metrics.registry,
                                                            False)
                for src in sources:
                    if hasattr(src, "client"):
                        src.client = client
                elapsed = 0.0
                while elapsed < seconds:
                    self.clock.advance(step)
                    elapsed += step
                    if before is not None:
                        before(self.clock.now() - self.start)
                    for src in sources:
                        self.daemon._file_round(src, await src.poll(self.daemon.clock))
                    with self.daemon.lock:
                        self.daemon.pipeline.tick()
                    for a in self.daemon.pipeline.book.firing():
                        key = (a.labels["alertname"], a.fingerprint)
                        if key not in self.first_fired:
                            self.first_fired[key] = self.clock.now() - self.start
                            self.alerts[a.fingerprint] = a
        asyncio.run(go())

    def fired(self, alertname: str) -> list[Any]:
        return [self.alerts[fp] for (name, fp) in self.first_fired if name == alertname]

    def firing(self, alertname: str) -> list[Any]:
        return [a for a in self.daemon.pipeline.book.firing() if a.labels["alertname"] == alertname]

    def close(self) -> None:
        self.daemon.close()
