"""Issue 12, monitor side: source loops survive any input, Prometheus scrape semantics (whole-request
deadline, body/sample limits, future samples), a hardened receiver/API, honest /healthz, redacted logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import Peer, RunningDaemon, Targets, metric, wait_for

import monitor.daemon as daemon_mod
import monitor.sources.scrape as scrape_mod
from alerting.logsafe import RedactingFilter, setup_logging
from alerting.notifiers.base import redact
from monitor.config import MonitorConfigError, load_config
from monitor.model import Sample, SourceBatch
from monitor.sources import prom_api
from monitor.sources.prom_text import Target, parse_exposition, scrape
from monitor.sources.scrape_http import ScrapeClient
from monitor.sources.verl_jsonl import JsonlTail

RULES = {"rules": [{"alert": "RewardModelCircuitOpen", "severity": "P1", "select": "verl_reward_model_circuit_state",
                    "detector": {"type": "threshold", "op": ">=", "value": 2}, "summary": "circuit open"}]}


def config(tmp: Path, targets: list[dict], **extra: object) -> Path:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(RULES))
    doc = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.1s",
           "rules": ["rules.yaml"], "targets": targets, "reward_outliers": False, **extra}
    path = tmp / "monitor.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def targets():
    t = Targets()
    yield t
    t.close()


def drip(h: BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/plain")
    h.end_headers()
    try:
        for _ in range(30):
            h.wfile.write(b"#")
            h.wfile.flush()
            time.sleep(0.3)
    except OSError:
        pass


def body(text: bytes, length: bool = True):  # noqa: ANN201
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        if length:
            h.send_header("Content-Length", str(len(text)))
        h.end_headers()
        h.wfile.write(text)
    return handle


CLIENTS = {"h11": ScrapeClient, "httpx": httpx.AsyncClient}  # the daemon's scrapes; TLS targets, the API


def run_scrape(target: Target, client: str = "h11") -> tuple[SourceBatch, float, bool]:
    async def go() -> tuple[SourceBatch, float, bool]:
        async with CLIENTS[client]() as c:
            return await scrape(c, target, time.time())
    return asyncio.run(go())


# -- 1. every source loop survives any input ---------------------------------------------------------

def test_huge_integer_on_a_slow_path_line_costs_only_that_line() -> None:
    text = 'a{x="1", y="2"} ' + "1" * 400 + "\nverl_global_step 3\n"
    batch = parse_exposition(text, 0.0, "t", None, {})
    assert [s.name for s in batch.samples] == ["verl_global_step"]
    assert batch.errors == {"malformed_line": 1}


def test_odd_query_range_json_is_counted_not_raised() -> None:
    docs = iter([
        '{"status": "success", "data": []}',
        '{"status": "success", "data": {"result": [1, {"metric": [], "values": []}, {"metric": {"__name__": "x"},'
        ' "values": [[1, "1"], [' + "9" * 400 + ', "2"], ["a", "b"], [5], [2, "' + "9" * 400 + '"]]}]}}',
        "[" * 5000,
    ])
    transport = httpx.MockTransport(lambda req: httpx.Response(200, text=next(docs)))
    async def run() -> SourceBatch:
        async with httpx.AsyncClient(transport=transport) as client:
            return await prom_api.query_range(client, "http://prom", "x", 0, 9000, 60, 3600)

    batch = asyncio.run(run())
    assert [(s.name, s.t, s.value) for s in batch.samples] == [("x", 1.0, 1.0)]
    assert batch.errors["bad_response"] >= 3 and batch.errors["malformed_value"] == 3


def test_a_round_that_raises_is_counted_marked_down_and_the_loop_goes_on(tmp_path: Path, targets: Targets,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"scrape": 0, "poll": 0}
    real_scrape, real_poll = scrape_mod.scrape, JsonlTail.poll

    async def flaky_scrape(client: httpx.AsyncClient, target: Target, now: float):  # noqa: ANN202
        calls["scrape"] += 1
        if calls["scrape"] <= 2:
            raise OverflowError("int too large to convert to float")
        return await real_scrape(client, target, now)

    def flaky_poll(self: JsonlTail, now: float) -> SourceBatch:
        calls["poll"] += 1
        if calls["poll"] <= 2:
            raise OverflowError("int too large to convert to float")
        return real_poll(self, now)

    monkeypatch.setattr(scrape_mod, "scrape", flaky_scrape)
    monkeypatch.setattr(JsonlTail, "poll", flaky_poll)
    log = tmp_path / "exp.jsonl"
    log.write_text('{"step": 1, "data": {"critic/score/mean": 0.5}}\n')
    d = RunningDaemon(config(tmp_path, [{"name": "good", "url": f"{targets.url}/good", "node": "gpu-01",
                                         "interval": "0.2s"}], jsonl=[{"path": str(log)}]))
    try:
        assert wait_for(lambda: metric(d.url, "verl_monitor_scrape_errors_total", target="good",
                                       reason="overflowerror") == 2)
        assert wait_for(lambda: metric(d.url, "verl_monitor_target_up", target="good") == 1)
        assert wait_for(lambda: (metric(d.url, "verl_monitor_samples_ingested_total", source="good") or 0) >= 2)
        # the rules saw the outage: the target's `up` series went 0 before it came back to 1
        (up,) = [s for s in d.daemon.pipeline.store if s.name == "up" and s.labels.get("target") == "good"]
        values = list(up.window()[1])
        assert 0.0 in values and values[-1] == 1.0
        # the JSONL loop is wrapped the same way
        assert wait_for(lambda: metric(d.url, "verl_monitor_scrape_errors_total", target="jsonl:exp.jsonl",
                                       reason="overflowerror") == 2, timeout=8)
        assert wait_for(lambda: metric(d.url, "verl_monitor_target_up", target="jsonl:exp.jsonl") == 1, timeout=8)
    finally:
        d.stop()


# -- 2. Prometheus scrape semantics ------------------------------------------------------------------

@pytest.mark.parametrize("client", list(CLIENTS))
def test_scrape_timeout_is_a_deadline_for_the_whole_request(client: str) -> None:
    peer = Peer(drip)  # headers at once, then a byte every 0.3 s: no single read ever times out
    try:
        batch, duration, up = run_scrape(Target("drip", peer.url, timeout=1.0, interval=2.0), client)
    finally:
        peer.close()
    assert not up and batch.errors == {"timeout": 1}
    assert duration < 2.5
    assert [(s.name, s.value) for s in batch.samples] == [("up", 0.0)]


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("length", [True, False], ids=["content-length", "streamed"])
def test_body_size_limit_fails_the_scrape(length: bool, client: str) -> None:
    peer = Peer(body(b"verl_global_step 1\n" * 200, length=length))
    try:
        batch, _, up = run_scrape(Target("big", peer.url, body_size_limit=1000), client)
        ok_batch, _, ok_up = run_scrape(Target("big", peer.url, body_size_limit=10_000), client)
    finally:
        peer.close()
    assert not up and batch.errors == {"body_size_limit": 1}
    assert ok_up and not ok_batch.errors


def test_sample_limit_fails_the_scrape() -> None:
    peer = Peer(body(b"a 1\nb 2\nc 3\n"))
    try:
        batch, _, up = run_scrape(Target("many", peer.url, sample_limit=2))
        ok_batch, _, ok_up = run_scrape(Target("many", peer.url, sample_limit=3))
    finally:
        peer.close()
    assert not up and batch.errors == {"sample_limit": 1} and [s.name for s in batch.samples] == ["up"]
    assert ok_up and len(ok_batch.samples) == 4


def test_garbage_body_is_a_failed_scrape() -> None:
    peer = Peer(body(b"\x00\xff\xfe garbage {{{\n<html>nope</html>\n"))
    try:
        batch, _, up = run_scrape(Target("garbage", peer.url))
    finally:
        peer.close()
    assert not up and batch.errors.get("malformed_line", 0) >= 1


def test_future_samples_are_refused_one_by_one_without_poisoning_the_series(tmp_path: Path) -> None:
    d = daemon_mod.Daemon(load_config(config(tmp_path, [])))
    try:
        now = d.clock.now()
        labels = {"node": "gpu-01"}
        d.ingest(SourceBatch("t", [Sample("verl_global_step", labels, 1.0, now + 3600),
                                   Sample("verl_global_step", labels, 2.0, now)]), "t")
        d.ingest(SourceBatch("t", [Sample("verl_global_step", labels, 3.0, now + 1)]), "t")
        (s,) = [s for s in d.pipeline.store if s.name == "verl_global_step"]
        assert list(s.window()[1]) == [2.0, 3.0]
        assert d.metrics.scrape_errors.labels("t", "future_timestamp")._value.get() == 1
    finally:
        d.close()


def test_limits_and_retention_are_validated(tmp_path: Path) -> None:
    ok = load_config(config(tmp_path, [{"url": "http://127.0.0.1:1/metrics", "body_size_limit": "1MiB",
                                        "sample_limit": 500}], retention="2h"))
    assert (ok.targets[0].body_size_limit, ok.targets[0].sample_limit, ok.retention) == (1024**2, 500, 7200.0)
    for bad in ({"body_size_limit": "lots"}, {"body_size_limit": -1}, {"sample_limit": -3},
                {"sample_limit": "x"}):
        with pytest.raises(MonitorConfigError, match=next(iter(bad))):
            load_config(config(tmp_path, [{"url": "http://127.0.0.1:1/metrics", **bad}]))
    with pytest.raises(MonitorConfigError, match="retention"):
        load_config(config(tmp_path, [], retention="0s"))


# -- 4. receiver and API hardening -------------------------------------------------------------------

def raw_request(port: int, head: bytes, payload: bytes = b"", timeout: float = 10.0) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # the server may answer 413 and close before it has read an oversize payload
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head + payload)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            data += chunk
    if not data:
        return 0, b""
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def post(port: int, payload: bytes, headers: str | None = None) -> tuple[int, bytes]:
    hdrs = headers if headers is not None else f"Content-Length: {len(payload)}\r\n"
    head = (f"POST /api/v1/alertmanager/webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{hdrs}Connection: close\r\n\r\n").encode()
    return raw_request(port, head, payload)


@pytest.fixture
def api_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import monitor.endpoints.api

    monkeypatch.setattr(monitor.endpoints.api, "READ_DEADLINE_S", 1.0)
    d = RunningDaemon(config(tmp_path, []))
    yield d
    d.stop()


def test_malformed_webhook_bodies_get_400_with_one_line(api_daemon: RunningDaemon) -> None:
    port = api_daemon.daemon.api.port
    bad = {
        "invalid utf-8": b'{"alerts": ["\xff\xfe"]}',
        "not json": b"{alerts",
        "list for object": json.dumps({"alerts": [{"labels": {"alertname": "X"}, "annotations": ["a"]}]}).encode(),
        "object for label": json.dumps({"alerts": [{"labels": {"alertname": "X", "node": {"a": 1}}}]}).encode(),
        "number for time": json.dumps({"alerts": [{"labels": {"alertname": "X"}, "startsAt": 12}]}).encode(),
        "alerts not a list": json.dumps({"alerts": {"a": 1}}).encode(),
        "deep nesting": b'{"alerts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    }
    for what, payload in bad.items():
        status, answer = post(port, payload)
        assert status == 400, what
        doc = json.loads(answer)
        assert "\n" not in doc["error"] and "Traceback" not in doc["error"], what
    ok = {"alerts": [{"labels": {"alertname": "GPUXidError", "node": "gpu-1"}, "status": "firing"}]}
    assert post(port, json.dumps(ok).encode())[0] == 200
    assert metric(api_daemon.url, "verl_monitor_scrape_errors_total", target="alertmanager_webhook",
                  reason="bad_payload") == len(bad)


def test_oversize_and_bogus_lengths_get_413(api_daemon: RunningDaemon) -> None:
    port = api_daemon.daemon.api.port
    assert post(port, b"", "Content-Length: -1\r\n")[0] == 413
    assert post(port, b"", "Content-Length: abc\r\n")[0] == 413
    assert post(port, b"", f"Content-Length: {5 * 1024 * 1024}\r\n")[0] == 413
    assert post(port, b"500000\r\n" + b"x" * 1000, "Transfer-Encoding: chunked\r\n")[0] == 413
    many = b"".join(b"100000\r\n" + b"[" * 0x100000 + b"\r\n" for _ in range(5))
    assert post(port, many, "Transfer-Encoding: chunked\r\n")[0] == 413
    small = json.dumps({"alerts": []}).encode()
    chunked = f"{len(small):x}\r\n".encode() + small + b"\r\n0\r\n\r\n"
    status, answer = post(port, chunked, "Transfer-Encoding: chunked\r\n")
    assert status == 200 and json.loads(answer)["accepted"] == 0


def test_a_slow_client_is_cut_off_at_the_read_deadline(api_daemon: RunningDaemon) -> None:
    port = api_daemon.daemon.api.port
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /api/v1/alertmanager/webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        for _ in range(20):  # drip: each byte well inside the socket timeout, the whole far past the deadline
            try:
                sock.sendall(b" ")
            except OSError:
                break
            time.sleep(0.2)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    break
            except BlockingIOError:
                pass
            except OSError:
                break
            finally:
                sock.setblocking(True)
    assert time.monotonic() - started < 3.5
    assert httpx.get(f"{api_daemon.url}/healthz").status_code == 200  # and the API still answers


# -- 8. honest health --------------------------------------------------------------------------------

def test_healthz_is_503_when_a_source_loop_stops_completing(tmp_path: Path, targets: Targets,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    stuck = threading.Event()
    real = scrape_mod.scrape

    async def maybe_hang(client: httpx.AsyncClient, target: Target, now: float):  # noqa: ANN202
        if stuck.is_set():
            await asyncio.sleep(3600)
        return await real(client, target, now)

    monkeypatch.setattr(scrape_mod, "scrape", maybe_hang)
    d = RunningDaemon(config(tmp_path, [{"name": "trainer", "url": f"{targets.url}/good", "interval": "0.2s",
                                         "timeout": "0.2s"}]))
    try:
        assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 200)
        stuck.set()
        assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 503, timeout=5)
        doc = httpx.get(f"{d.url}/healthz").json()
        assert doc["status"] == "degraded" and any(r.startswith("target trainer:") for r in doc["reasons"])
    finally:
        d.stop()


def test_healthz_degrades_when_a_notification_is_stuck(tmp_path: Path) -> None:
    d = daemon_mod.Daemon(load_config(config(tmp_path, [])))

    class Engine:
        oldest = None

        def oldest_undelivered(self) -> float | None:
            return self.oldest

        def problems(self) -> list[str]:
            return []

        def close(self) -> None:
            pass

    d.engine = engine = Engine()
    try:
        assert d.health()["reasons"] == []
        engine.oldest = d.clock.now() - 200
        assert d.health()["reasons"] == []
        engine.oldest = d.clock.now() - 301
        (reason,) = d.health()["reasons"]
        assert reason.startswith("outbox: oldest undelivered notification")
    finally:
        d.close()


# -- 6. secrets never logged -------------------------------------------------------------------------

def test_redact_hides_credentials_in_urls() -> None:
    urls = ["https://oapi.dingtalk.com/robot/send?access_token=TOK1&timestamp=1700000000000&sign=SIG%2B1",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY1", "https://x/hook?token=TOK2&secret=SEC1",
            "http://admin:PASS1@prometheus:9090/api/v1/query", "POST https://h/p?api_key=KEY2 failed"]
    text = redact(" ".join(urls))
    for secret in ("TOK1", "1700000000000", "SIG", "KEY1", "TOK2", "SEC1", "PASS1", "admin", "KEY2"):
        assert secret not in text
    assert "access_token=***" in text and "http://***@prometheus:9090" in text
    assert redact("monkey=banana step=3") == "monkey=banana step=3"


def test_log_lines_are_redacted_and_httpx_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    setup_logging(logging.INFO)
    assert logging.getLogger("httpx").level == logging.WARNING
    assert logging.getLogger("httpcore").level == logging.WARNING
    transport = httpx.MockTransport(lambda req: httpx.Response(200, json={"errcode": 0}))
    with caplog.at_level(logging.INFO), httpx.Client(transport=transport) as client:
        client.post("https://oapi.dingtalk.com/robot/send?access_token=LEAKED")
    assert "LEAKED" not in caplog.text
    record = logging.LogRecord("monitor", logging.WARNING, __file__, 1, "posting to %s", ("https://h/?key=K3Y",), None)
    assert RedactingFilter().filter(record) and record.getMessage() == "posting to https://h/?key=***"
