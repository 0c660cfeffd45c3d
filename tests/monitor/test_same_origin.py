"""Without a bearer token (the default) a web page the user has open cannot write to the monitor: a
cross-origin or cross-site write is refused, the API takes only JSON, and a foreign ``Host`` (DNS
rebinding: the page's own name pointed at 127.0.0.1) is refused, console form included."""

from __future__ import annotations

import json
import logging
import re
import socket
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import RunningDaemon

SILENCE = '{"matchers": ["alertname=~\\".*\\""], "duration": "1h", "comment": "x"}'


@pytest.fixture
def open_daemon(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    (tmp_path / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"}],
        "route": {"receiver": "hook"}}))
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state" / "state.db"), "eval_interval": "0.5s",
           "targets": [], "cluster": "test", "notify_config": "alerting.yaml",
           "external_url": "http://mon.example.org:9105"}
    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump(cfg))
    caplog.set_level(logging.INFO, logger="monitor.listener")
    d = RunningDaemon(tmp_path / "monitor.yaml")
    yield d
    d.stop()


def _silences(d: RunningDaemon) -> list:
    return httpx.get(f"{d.url}/api/v1/silences").json()["data"]


def _alerts(d: RunningDaemon) -> list:
    return httpx.get(f"{d.url}/api/v1/alerts").json()["data"]


def test_cross_origin_and_non_json_writes_are_refused(open_daemon: RunningDaemon) -> None:
    url = f"{open_daemon.url}/api/v1/silences"
    plain = {"content-type": "text/plain;charset=UTF-8"}
    assert httpx.post(url, content=SILENCE, headers={**plain, "origin": "http://evil.example"}).status_code == 403
    assert httpx.post(url, content=SILENCE, headers={**plain, "sec-fetch-site": "cross-site"}).status_code == 403
    assert httpx.post(url, content=SILENCE, headers={**plain, "origin": "null"}).status_code == 403
    assert httpx.post(url, content=SILENCE, headers=plain).status_code == 415  # no Origin: an old browser
    json_ct = {"content-type": "application/json", "origin": "http://evil.example"}
    assert httpx.post(url, content=SILENCE, headers=json_ct).status_code == 403
    hook = {"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "Injected", "severity": "P1"},
                                        "startsAt": "2026-01-01T00:00:00Z"}]}
    r = httpx.post(f"{open_daemon.url}/api/v1/alertmanager/webhook", content=json.dumps(hook),
                   headers={"content-type": "text/plain", "sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    assert _silences(open_daemon) == [] and _alerts(open_daemon) == []
    # what a script or the console's own page sends is taken
    assert httpx.post(url, content=SILENCE, headers={"content-type": "application/json"}).status_code == 200
    same = {"content-type": "application/json", "origin": open_daemon.url, "sec-fetch-site": "same-origin"}
    assert httpx.post(url, content=SILENCE, headers=same).status_code == 200
    assert len(_silences(open_daemon)) == 2


def _raw(port: int, request: str) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request.encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data.decode("latin-1")


def test_a_foreign_host_is_refused_console_form_included(open_daemon: RunningDaemon,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    port = open_daemon.daemon.api.port
    evil = f"rebind.evil.example:{port}"
    status, page = _raw(port, f"GET /silences/new HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n")
    assert status == 421 and "external_url" in page
    form = "csrf=abc&matchers=alertname%3D~%22.%2A%22&duration=1h&comment=x&creator=x"
    status, _ = _raw(port, f"POST /silences HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}\r\n"
                           f"Cookie: verl_monitor_csrf=abc\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                           f"Content-Length: {len(form)}\r\nConnection: close\r\n\r\n{form}")
    assert status == 421
    status, _ = _raw(port, f"POST /api/v1/silences HTTP/1.1\r\nHost: {evil}\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(SILENCE)}\r\nConnection: close\r\n\r\n{SILENCE}")
    assert status == 421 and _silences(open_daemon) == []
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"mon.example.org:{port}", "gpu-head"):
        status, _ = _raw(port, f"GET /silences/new HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        assert status == 200, host
    assert _raw(port, "GET /api/v1/alerts HTTP/1.0\r\n\r\n")[0] == 200  # no Host at all: not a browser
    # scrapers use whatever name their config has: /healthz and /metrics answer any Host
    assert _raw(port, f"GET /metrics HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n")[0] == 200
    assert _raw(port, f"GET /healthz HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n")[0] == 200
    said = " ".join(r.getMessage() for r in caplog.get_records("setup") if r.name == "monitor.listener")
    assert re.search(r"no bearer_token: the API and console .* open", said)
