"""The trainer's HTTP endpoint: ``/metrics`` (Prometheus text), ``/healthz``, ``/api/v1/reward_outliers``.

Standard-library ``ThreadingHTTPServer`` rather than prometheus_client's ``start_http_server`` because
the same port also serves the two JSON routes, and a busy port must surface as a one-line error.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from verl.config.errors import TrainerConfigError


class PortInUseError(TrainerConfigError):
    """The metrics port is taken (or cannot be bound); the message names it and the fix."""


def check_port_free(host: str, port: int) -> None:
    """Fail fast, before minutes of model loading, when the port is already taken."""
    if port == 0:
        return
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            # as the real server does: without it, connections of a SIGKILLed predecessor in TIME_WAIT
            # keep a restart on the same port failing for ~60 s; a live listener still fails the bind.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise _bind_error(exc, host, port) from None


def _bind_error(exc: OSError, host: str, port: int) -> PortInUseError:
    if exc.errno == errno.EADDRINUSE:
        return PortInUseError(f"metrics port {port} is already in use on {host}; "
                              "pick another --metrics-port or stop the process holding it")
    return PortInUseError(f"cannot bind metrics endpoint {host}:{port} ({exc.strerror}); "
                          "check --metrics-host/--metrics-port")


REQUEST_DEADLINE_S = 10.0  # a whole request (line, headers, the GET's answer) within this
MAX_CONNECTIONS = 64


class _BoundedServer(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS connections (beyond: closed at once, no thread), and each one shut down
    REQUEST_DEADLINE_S after it was accepted: the socket timeout alone is per read, so a client
    dripping the request line a byte at a time (a slowloris) would hold its thread for ever. The
    monitor's listeners do the same with a header deadline (monitor/endpoints/httpguard.py; verl imports no
    monitor code). The routes are GET-only and small, so a whole-request deadline is enough here."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        timer = threading.Timer(REQUEST_DEADLINE_S, _cut, (request,))
        timer.daemon = True
        timer.start()
        try:
            threading.Thread(target=self._serve_one, args=(request, client_address, timer), daemon=True).start()
        except RuntimeError:
            timer.cancel()
            self._slots.release()
            self.shutdown_request(request)

    def _serve_one(self, request: Any, client_address: Any, timer: threading.Timer) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            timer.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone or cut is routine
            super().handle_error(request, client_address)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # the handler's blocked read returns and its thread ends


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 health: Callable[[], dict[str, Any]], outliers: Callable[[int], list[dict]],
                 api_token: str | None = None) -> None:
        handler = _make_handler(registry, health, outliers, api_token)
        try:
            self.httpd = _BoundedServer((host, port), handler)
        except OSError as exc:
            raise _bind_error(exc, host, port) from None
        self.httpd.daemon_threads = True
        self.host, self.port = host, self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="verl-metrics-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def _make_handler(registry: CollectorRegistry, health: Callable[[], dict[str, Any]],
                  outliers: Callable[[int], list[dict]], api_token: str | None) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {api_token}".encode() if api_token else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urlparse(self.path)
            # /api/* returns prompt text, so it can require a token; /metrics and /healthz stay open for
            # scrapers (the monitor's API works the same way)
            if url.path.startswith("/api/") and expected is not None and not hmac.compare_digest(
                    self.headers.get("Authorization", "").encode(), expected):
                self._json(401, {"error": "missing or wrong bearer token (Authorization: Bearer ...)"})
                return
            if url.path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif url.path == "/healthz":
                body = health()
                self._json(200 if body.get("status") == "ok" else 503, body)
            elif url.path == "/api/v1/reward_outliers":
                try:
                    k = int(parse_qs(url.query).get("k", ["3"])[0])
                except ValueError:
                    self._json(400, {"error": "k must be an integer, e.g. ?k=3"})
                    return
                self._json(200, {"outliers": outliers(max(1, min(k, 100)))})
            else:
                self._json(404, {"error": f"no route {url.path}; try /metrics, /healthz, /api/v1/reward_outliers"})

        def _json(self, code: int, body: Any) -> None:
            self._send(code, json.dumps(body).encode(), "application/json")

        def _send(self, code: int, data: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are not log news
            pass

    return Handler
