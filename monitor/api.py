"""The daemon's HTTP surface: /metrics, /healthz, the JSON API and the Alertmanager webhook receiver.
Standard-library ``http.server`` (threaded): a handful of routes do not justify a web framework."""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from monitor.durations import DurationError, parse_duration
from monitor.httpguard import GuardedHandler, GuardedHTTPServer
from monitor.sources.alertmanager import PayloadError, parse_webhook

log = logging.getLogger("monitor.api")
MAX_BODY = 4 * 1024 * 1024
READ_DEADLINE_S = 10.0  # a request (headers and body) must arrive within this; slow senders are cut off
WEBHOOK_PATH = "/api/v1/alertmanager/webhook"


class BodyTooLarge(Exception):
    pass


_PLOT_RE = re.compile(r"^/api/v1/plots/([A-Za-z0-9_.-]+\.png)$")
_ALERT_RE = re.compile(r"^/api/v1/alerts/([0-9a-f]{16})$")  # an alert's generatorURL


class MonitorAPI:
    """Routes requests to the daemon's pipeline (``daemon.Daemon``)."""

    def __init__(self, daemon: Any, host: str, port: int, token: str | None) -> None:
        self.daemon = daemon
        self.token = token
        api = self

        class Handler(GuardedHandler):
            server_version = "verl-monitor"
            timeout = READ_DEADLINE_S  # socket read deadline: a silent or dripping client cannot pin a thread

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s " + fmt, self.address_string(), *args)

            def do_GET(self) -> None:
                api.handle(self, "GET")

            def do_POST(self) -> None:
                api.handle(self, "POST")

            def do_DELETE(self) -> None:
                api.handle(self, "DELETE")

        # request line and headers within READ_DEADLINE_S, at most 128 connections (monitor.httpguard)
        self.server = GuardedHTTPServer((host, port), Handler, header_deadline_s=READ_DEADLINE_S)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="monitor-api", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() would wait forever for a loop that never ran
            self.server.shutdown()
        self.server.server_close()

    # -- plumbing --------------------------------------------------------------------------------

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str = "application/json") -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, code: int, doc: Any) -> None:
        self._send(h, code, json.dumps(doc).encode())

    @staticmethod
    def _read_exact(h: BaseHTTPRequestHandler, n: int, deadline: float) -> bytes:
        """n bytes or TimeoutError once the request's deadline passes (the socket timeout alone is per
        read: a client dripping a byte every few seconds would hold the thread forever)."""
        parts, left = [], n
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("request body deadline passed")
            h.connection.settimeout(remaining)
            chunk = h.rfile.read1(min(left, 65536))
            if not chunk:
                raise ConnectionError("client closed the connection mid-body")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def _read(self, h: BaseHTTPRequestHandler) -> bytes:
        """The request body, at most MAX_BODY bytes, with a Content-Length or chunked; BodyTooLarge for
        anything over the limit or a length that is not a non-negative integer (a negative one used to
        switch the limit off)."""
        deadline = time.monotonic() + READ_DEADLINE_S
        if "chunked" in h.headers.get("Transfer-Encoding", "").lower():
            parts, size = [], 0
            while True:
                line = h.rfile.readline(64)
                try:
                    n = int(line.split(b";", 1)[0].strip() or b"x", 16)
                except ValueError as exc:
                    raise PayloadError("malformed chunked body (bad chunk size line)") from exc
                if n < 0 or size + n > MAX_BODY:
                    raise BodyTooLarge(f"chunked body exceeds {MAX_BODY} bytes")
                if n == 0:
                    while h.rfile.readline(1024).strip():  # trailers
                        pass
                    return b"".join(parts)
                parts.append(self._read_exact(h, n, deadline))
                size += n
                h.rfile.readline(8)  # the CRLF after each chunk
        raw = h.headers.get("Content-Length")
        if raw is None:
            return b""
        text = raw.strip()
        if not text.isdigit():
            raise BodyTooLarge(f"Content-Length {raw[:40]!r} is not a byte count; send at most {MAX_BODY} bytes")
        n = int(text)
        if n > MAX_BODY:
            raise BodyTooLarge(f"body of {n} bytes exceeds {MAX_BODY}")
        return self._read_exact(h, n, deadline)

    def _body(self, h: BaseHTTPRequestHandler) -> Any:
        raw = self._read(h)
        try:  # deep nesting ends in RecursionError inside json; nested values where strings belong are
            # refused field by field by the payload parsers
            return json.loads(raw.decode("utf-8") or "null")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"body is not UTF-8 (byte {exc.start})") from exc
        except RecursionError as exc:
            raise PayloadError("body is nested too deeply to be a webhook or API payload") from exc
        except ValueError as exc:
            raise PayloadError(f"body is not JSON ({str(exc).splitlines()[0][:120]})") from exc

    def _count(self, path: str, reason: str) -> None:
        """Rejected webhook deliveries count like any other source's bad input."""
        if path == WEBHOOK_PATH:
            self.daemon.metrics.scrape_errors.labels("alertmanager_webhook", reason).inc()

    def _authorized(self, h: BaseHTTPRequestHandler) -> bool:
        if not self.token:
            return True
        got = h.headers.get("Authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {self.token}".encode())

    def _signed_plot(self, h: BaseHTTPRequestHandler) -> bool:
        """A plot link the monitor signed (monitor.plotlinks): people open it from chat without a token."""
        links = getattr(self.daemon.pipeline.annotator, "plot_links", None)
        path, _, query = h.path.partition("?")
        m = _PLOT_RE.match(path)
        if links is None or m is None or h.command != "GET":
            return False
        q = {k: v[0] for k, v in parse_qs(query).items()}
        return bool(links.valid(m.group(1), q.get("exp", ""), q.get("sig", "")))

    # -- routes ----------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        try:
            if path == "/healthz" and method == "GET":
                doc = self.daemon.health()
                return self._json(h, 503 if doc.get("reasons") else 200, doc)
            if path == "/metrics" and method == "GET":
                return self._send(h, 200, generate_latest(self.daemon.metrics.registry), CONTENT_TYPE_LATEST)
            if not path.startswith("/api/"):
                return self._json(h, 404, {"error": f"no route {path}"})
            if not self._authorized(h) and not self._signed_plot(h):
                return self._json(h, 401, {"error": "missing or wrong bearer token (Authorization: Bearer ...)"})
            self._api(h, method, path)
        except PayloadError as exc:
            self._count(path, "bad_payload")
            self._json(h, 400, {"error": str(exc)})
        except BodyTooLarge as exc:
            self._count(path, "body_too_large")
            h.close_connection = True  # the rest of the body is never read
            self._json(h, 413, {"error": str(exc)})
        except (TimeoutError, ConnectionError) as exc:  # read deadline passed or the client went away
            self._count(path, "read_timeout" if isinstance(exc, TimeoutError) else "client_gone")
            h.close_connection = True
            log.info("API %s %s: client too slow or gone (%s)", method, path, type(exc).__name__)
        except Exception as exc:  # one broken request must not take the daemon down
            log.exception("API %s %s failed", method, path)
            self._json(h, 500, {"error": f"{type(exc).__name__}: {exc}"})

    def _api(self, h: BaseHTTPRequestHandler, method: str, path: str) -> None:
        d = self.daemon
        if path == "/api/v1/alerts" and method == "GET":
            return self._json(h, 200, {"status": "success", "data": d.alerts()})
        m = _ALERT_RE.match(path)
        if m and method == "GET":
            fp = m.group(1)
            found = [a for a in d.alerts() if a["fingerprint"] == fp]
            resolved = None if found else d.pipeline.book.resolved_record(fp)  # the alert book: the one alert store
            if resolved is not None:
                found = [dict(resolved.to_json(), state="resolved")]
            if not found and d.engine is not None:  # an incident: built by the alerting engine
                found = [i for i in d.engine.incidents() if i.get("fingerprint") == fp]
            if not found:
                return self._json(h, 404, {"error": f"no alert with fingerprint {m.group(1)}"})
            return self._json(h, 200, {"status": "success", "data": found[0]})
        if path == "/api/v1/rules" and method == "GET":  # how each rule is judged: seconds or steps, warm-ups
            return self._json(h, 200, {"status": "success", "data": [r.to_json() for r in d.pipeline.evaluator.rules]})
        if path == "/api/v1/incidents" and method == "GET":
            return self._json(h, 200, {"status": "success", "data": d.engine.incidents() if d.engine else []})
        if path == WEBHOOK_PATH and method == "POST":
            named = {httpx.URL(t.url).netloc.decode(): t.node for t in d.config.targets if t.node}
            accepted = d.submit_external(parse_webhook(self._body(h), d.config.cluster, named))
            return self._json(h, 200, {"status": "success", "accepted": accepted})
        if path.startswith("/api/v1/silences"):
            return self._silences(h, method, path)
        m = _PLOT_RE.match(path)
        if m and method == "GET":
            f = Path(d.config.plots_dir) / m.group(1)
            if not f.is_file():
                return self._json(h, 404, {"error": f"no plot {m.group(1)}"})
            return self._send(h, 200, f.read_bytes(), "image/png")
        self._json(h, 404, {"error": f"no route {method} {path}"})

    def _silences(self, h: BaseHTTPRequestHandler, method: str, path: str) -> None:
        engine = self.daemon.engine
        if engine is None:
            return self._json(h, 503, {"error": "silences live in the alerting engine: set notify_config in the monitor config"})
        if method == "GET" and path == "/api/v1/silences":
            return self._json(h, 200, {"status": "success", "data": engine.silences()})
        if method == "POST" and path == "/api/v1/silences":
            body = self._body(h)
            if not isinstance(body, dict) or not body.get("matchers"):
                raise PayloadError("silence needs 'matchers' (e.g. [\"alertname=\\\"GPUOverTemperature\\\"\"])")
            try:
                duration = parse_duration(body["duration"], "duration") if "duration" in body else None
                ends = _ts(body.get("endsAt"))
                starts = _ts(body.get("startsAt"))
            except (DurationError, ValueError) as exc:
                raise PayloadError(str(exc)) from exc
            with self.daemon.lock:
                try:
                    sid = engine.add_silence(body["matchers"], duration_s=duration, ends_at=ends,
                                             created_by=str(body.get("createdBy", "api")),
                                             comment=str(body.get("comment", "")), starts_at=starts)
                except ValueError as exc:
                    raise PayloadError(str(exc)) from exc
            return self._json(h, 200, {"status": "success", "silenceID": sid})
        m = re.match(r"^/api/v1/silences/([A-Za-z0-9_-]+)$", path)
        if method == "DELETE" and m:
            with self.daemon.lock:
                ok = engine.expire_silence(m.group(1))
            return self._json(h, 200 if ok else 404, {"status": "success" if ok else "error", "silenceID": m.group(1)})
        self._json(h, 404, {"error": f"no route {method} {path}"})


def _ts(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
