"""Issue 36: the Prometheus-API source against a hostile or broken Prometheus. A 500, garbage or a hang
marks the source down by name (/healthz said 200 and "up"); an answer over the body limit is refused
while streaming; a Prometheus dripping its answer is cut by the request's total deadline."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from alerting.clock import SimulatedClock
from monitor.model import SourceBatch
from monitor.sources.base import Round
from monitor.sources.prom_api import PromAPIConfig, PromQuerySource, query_range
from tests.monitor.monitor_http import RunningDaemon, wait_for
from tests.monitor.test_monitor_blind import config

GOOD = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "verl_kl_divergence", "instance": "gpu-01:8000"}, "values": [[100, "0.02"]]}]}}


class Prometheus:
    """A loopback stand-in whose ``mode`` says how it answers: good, error, garbage, hang, drip, huge."""

    def __init__(self) -> None:
        self.mode = "good"
        self.stop = threading.Event()
        owner = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        mode = self.mode
        if mode == "hang":
            self.stop.wait(30)
            return
        if mode == "error":
            h.send_response(500)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if mode in ("good", "garbage"):
            body = json.dumps(GOOD).encode() if mode == "good" else b"<html>not json"
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        h.send_header("Transfer-Encoding", "chunked")  # no Content-Length: only streaming can tell
        h.end_headers()
        body = json.dumps(GOOD).encode()
        try:
            if mode == "drip":  # a byte every 0.1 s: each read well inside any per-read timeout
                for i in range(len(body)):
                    if self.stop.wait(0.1):
                        return
                    h.wfile.write(b"1\r\n" + body[i:i + 1] + b"\r\n")
                    h.wfile.flush()
            else:  # huge: 1 MiB pieces of padding, for ever (until the client hangs up)
                piece = b" " * (1 << 20)
                h.wfile.write(f"{len(body) - 1:x}\r\n".encode() + body[:-1] + b"\r\n")
                for _ in range(64):
                    h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom():
    p = Prometheus()
    yield p
    p.close()


def _query(prom: Prometheus, **kw: float) -> SourceBatch:
    async def run() -> SourceBatch:
        async with httpx.AsyncClient() as client:
            return await query_range(client, prom.url, "verl_kl_divergence", 0, 600, 15, 3600, **kw)
    return asyncio.run(run())


def _round(prom: Prometheus) -> Round:
    async def run() -> Round:
        src = PromQuerySource(PromAPIConfig(url=prom.url, queries=["verl_kl_divergence"], timeout=1.0))
        try:
            return await src.poll(SimulatedClock(1000.0))
        finally:
            await src.close()
    return asyncio.run(run())


@pytest.mark.parametrize("mode,reason", [("error", "http_500"), ("garbage", "bad_response"), ("hang", "timeout")])
def test_a_failing_prometheus_marks_the_source_down_by_reason(prom: Prometheus, mode: str, reason: str) -> None:
    assert _round(prom).up is True and _round(prom).problem is None
    prom.mode = mode
    got = _round(prom)
    assert got.up is False and got.problem and reason in got.problem and prom.url in got.problem


def test_an_answer_over_the_body_limit_is_refused_while_streaming(prom: Prometheus) -> None:
    prom.mode = "huge"  # 64 MiB without a Content-Length
    batch = _query(prom, body_limit=2 << 20)
    assert batch.errors == {"body_too_large": 1} and not batch.samples
    prom.mode = "good"
    assert _query(prom, body_limit=2 << 20).samples


def test_a_dripping_answer_is_cut_by_the_total_deadline(prom: Prometheus) -> None:
    prom.mode = "drip"  # ~20 s for the whole answer, 0.1 s between bytes
    batch = _query(prom, timeout=1.0)
    assert batch.errors == {"timeout": 1} and not batch.samples


@pytest.mark.slow
def test_healthz_names_a_failing_prometheus_and_recovers(tmp_path: Path, prom: Prometheus) -> None:
    cfg = config(tmp_path, [], prometheus={"url": prom.url, "queries": ["verl_kl_divergence"],
                                           "interval": "0.3s", "timeout": "1s", "step": "0.2s",
                                           "chunk": "60s"})
    d = RunningDaemon(cfg)
    health: Callable[[], dict] = lambda: httpx.get(f"{d.url}/healthz", timeout=3).json()  # noqa: E731
    try:
        assert wait_for(lambda: health()["status"] == "ok")
        prom.mode = "error"
        assert wait_for(lambda: any(r.startswith("prometheus: down") and "http_500" in r
                                    for r in health()["reasons"]))
        assert "prometheus" in health()["sources_down"]
        prom.mode = "good"
        assert wait_for(lambda: health()["status"] == "ok")
    finally:
        d.stop()
    assert time.monotonic()  # the daemon stopped cleanly (RunningDaemon.stop asserts the thread ended)
