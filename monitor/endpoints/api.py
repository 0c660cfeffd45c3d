"""The daemon's HTTP surface: /metrics, /healthz, the JSON API and the Alertmanager webhook receiver.

The routes below are plain synchronous logic over an ``Exchange`` (the request as read, the answer as
written); ``endpoint`` is the thin ASGI adapter: it reads the body under the size limit and the read
deadline on the server's event loop, then runs the route in a worker thread (routes take the daemon's
lock). The server is uvicorn with the guards of ``monitor.endpoints.httpguard``; the console (``monitor.web``)
shares its port and token."""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alerting.matchers import all_match, parse_matcher
from monitor.durations import DurationError, parse_duration
from monitor.endpoints.httpguard import OVERSIZE, GuardedServer
from monitor.sources.alertmanager import PayloadError, parse_webhook

log = logging.getLogger("monitor.api")
MAX_BODY = 4 * 1024 * 1024
READ_DEADLINE_S = 10.0  # a request (headers and body) must arrive within this; slow senders are cut off
WEBHOOK_PATH = "/api/v1/alertmanager/webhook"
_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class RequestTooLarge(Exception):
    pass


_PLOT_RE = re.compile(r"^/api/v1/plots/([A-Za-z0-9_.-]+\.png)$")
_ALERT_RE = re.compile(r"^/api/v1/alerts/([0-9a-f]{16})$")  # an alert's generatorURL


@dataclass
class Exchange:
    """One request as the routes see it (``path`` with its query, as sent) and the answer they write."""

    command: str
    path: str
    headers: Headers
    raw: bytes = b""
    error: Exception | None = None      # what reading the body ran into, raised when a route reads it
    session: bool = False               # a console session cookie (GET only; monitor.web)
    status: int | None = None
    body: bytes = b""
    ctype: str = "application/json"
    close_connection: bool = False


class MonitorAPI:
    """Routes requests to the daemon's pipeline (``daemon.Daemon``)."""

    def __init__(self, daemon: Any, host: str, port: int, token: str | None,
                 app: Callable[[MonitorAPI], Any] | None = None) -> None:
        """``app(api)``: the ASGI app to serve (``monitor.endpoints.listener`` passes the console's, which ends in
        ``endpoint``); without one, the JSON API alone. Bound at once: OSError when the port is taken."""
        self.daemon = daemon
        self.token = token
        asgi = app(self) if app is not None else Starlette(routes=[Route("/{rest:path}", self.endpoint, methods=METHODS)])
        # request line and headers within READ_DEADLINE_S, 128 connections, API clients shed before
        # /healthz, /metrics and the webhook (monitor.endpoints.httpguard)
        self.server = GuardedServer(asgi, host, port, header_deadline_s=READ_DEADLINE_S, max_body=MAX_BODY,
                                    always_served=("/healthz", "/metrics", WEBHOOK_PATH))

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    # -- plumbing --------------------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        """The ASGI side: read the body (bounded), run the route in a thread, answer what it wrote."""
        scope = request.scope
        target = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        h = Exchange(request.method, target, request.headers, session=getattr(request.state, "session", False))
        if request.method in _BODY_METHODS and scope["path"].startswith("/api/") and self._authorized(h):
            try:
                h.raw = await self._receive(request)
            except (RequestTooLarge, TimeoutError, ConnectionError) as exc:
                h.error = exc
        await run_in_threadpool(self.handle, h, request.method)
        if h.status is None:  # the client was too slow or went away: nothing to say, close
            return Response(b"", 408, headers={"connection": "close"})
        headers = {"connection": "close"} if h.close_connection else None
        return Response(h.body, h.status, headers=headers, media_type=h.ctype)

    @staticmethod
    async def _receive(request: Request) -> bytes:
        """The body, at most MAX_BODY bytes (Content-Length or chunked), within READ_DEADLINE_S (a
        per-read timeout alone lets a client dripping a byte every few seconds hold on for ever)."""
        length = request.headers.get("content-length")
        if length is not None and int(length) > MAX_BODY:  # h11 has refused non-digits (413 there)
            raise RequestTooLarge(f"body of {int(length)} bytes exceeds {MAX_BODY}")
        parts, size = [], 0
        with anyio.fail_after(READ_DEADLINE_S):
            while True:
                msg = await request.receive()
                if msg["type"] == "http.disconnect":
                    raise ConnectionError("client closed the connection mid-body")
                if request.scope.get(OVERSIZE):
                    raise RequestTooLarge(f"chunked body exceeds {MAX_BODY} bytes")
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size > MAX_BODY:
                    raise RequestTooLarge(f"chunked body exceeds {MAX_BODY} bytes")
                parts.append(chunk)
                if not msg.get("more_body", False):
                    return b"".join(parts)

    @staticmethod
    def _send(h: Exchange, code: int, body: bytes, ctype: str = "application/json") -> None:
        h.status, h.body, h.ctype = code, body, ctype

    def _json(self, h: Exchange, code: int, doc: Any) -> None:
        self._send(h, code, json.dumps(doc).encode())

    def _read(self, h: Exchange) -> bytes:
        """The request body as ``endpoint`` read it; RequestTooLarge, TimeoutError or ConnectionError when
        reading it failed (over MAX_BODY, a length that is not a byte count, the read deadline)."""
        if h.error is not None:
            raise h.error
        return h.raw

    def _body(self, h: Exchange) -> Any:
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

    def _authorized(self, h: Exchange) -> bool:
        if not self.token or (h.session and h.command == "GET"):
            return True
        got = h.headers.get("Authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {self.token}".encode())

    def _signed_plot(self, h: Exchange) -> bool:
        """A plot link the monitor signed (monitor.book.plotlinks): people open it from chat without a token."""
        links = getattr(self.daemon.pipeline.annotator, "plot_links", None)
        path, _, query = h.path.partition("?")
        m = _PLOT_RE.match(path)
        if links is None or m is None or h.command != "GET":
            return False
        q = {k: v[0] for k, v in parse_qs(query).items()}
        return bool(links.valid(m.group(1), q.get("exp", ""), q.get("sig", "")))

    # -- routes ----------------------------------------------------------------------------------

    def handle(self, h: Exchange, method: str) -> None:
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
        except RequestTooLarge as exc:
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

    def _api(self, h: Exchange, method: str, path: str) -> None:
        d = self.daemon
        if path == "/api/v1/alerts" and method == "GET":
            return self._json(h, 200, {"status": "success", "data": _alert_filter(h.path)(d.alerts())})
        m = _ALERT_RE.match(path)
        if m and method == "GET":
            fp = m.group(1)
            found = [a for a in d.alerts() if a["fingerprint"] == fp]
            resolved = None if found else d.pipeline.book.resolved_record(fp)  # the alert book: the one alert store
            if resolved is not None:
                found = [dict(resolved.to_json(), state="resolved")]
            if not found and d.engine is not None:  # an incident: built by the alerting engine
                found = [i for i in d.engine.views.incidents() if i.get("fingerprint") == fp]
            if not found:
                return self._json(h, 404, {"error": f"no alert with fingerprint {m.group(1)}"})
            return self._json(h, 200, {"status": "success", "data": found[0]})
        if path == "/api/v1/rules" and method == "GET":  # how each rule is judged: seconds or steps, warm-ups
            return self._json(h, 200, {"status": "success", "data": [r.to_json() for r in d.pipeline.evaluator.rules]})
        if path == "/api/v1/incidents" and method == "GET":
            return self._json(h, 200, {"status": "success", "data": d.engine.views.incidents() if d.engine else []})
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

    def _silences(self, h: Exchange, method: str, path: str) -> None:
        engine = self.daemon.engine
        if engine is None:
            return self._json(h, 503, {"error": "silences live in the alerting engine: set notify_config in the monitor config"})
        if method == "GET" and path == "/api/v1/silences":
            return self._json(h, 200, {"status": "success", "data": engine.views.silences()})
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
                    sid = engine.views.add_silence(body["matchers"], duration_s=duration, ends_at=ends,
                                             created_by=str(body.get("createdBy", "api")),
                                             comment=str(body.get("comment", "")), starts_at=starts)
                except ValueError as exc:
                    raise PayloadError(str(exc)) from exc
            return self._json(h, 200, {"status": "success", "silenceID": sid})
        m = re.match(r"^/api/v1/silences/([A-Za-z0-9_-]+)$", path)
        if method == "DELETE" and m:
            with self.daemon.lock:
                ok = engine.views.expire_silence(m.group(1))
            return self._json(h, 200 if ok else 404, {"status": "success" if ok else "error", "silenceID": m.group(1)})
        self._json(h, 404, {"error": f"no route {method} {path}"})


def alert_states(firing: list[Any], pending: list[Any], engine: Any) -> list[dict[str, Any]]:
    """Firing and pending alerts; ``state`` says which, ``status`` is Alertmanager's API v2 object
    (``state`` active/suppressed, ``silencedBy``, ``inhibitedBy``) so a silenced alert reads as handled."""
    handled = engine.views.mute_status(firing + pending) if engine is not None else {}
    return [dict(a.to_json(), state=state, status=handled.get(a.fingerprint) or
                 {"state": "active", "silencedBy": [], "inhibitedBy": []})
            for state, alerts in (("firing", firing), ("pending", pending)) for a in alerts]


def _alert_filter(target: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Alertmanager's ``GET /api/v2/alerts`` filters: ``active``, ``silenced``, ``inhibited`` (true or
    false, default true: all shown) and ``filter`` (label matchers, repeatable)."""
    q = parse_qs(target.partition("?")[2])
    shown = {k: q.get(k, ["true"])[-1].lower() != "false" for k in ("active", "silenced", "inhibited")}
    try:
        matchers = [parse_matcher(m) for m in q.get("filter", [])]
    except ValueError as exc:
        raise PayloadError(f"filter: {exc}") from None

    def keep(a: dict[str, Any]) -> bool:
        st = a.get("status") or {}
        kind = "silenced" if st.get("silencedBy") else "inhibited" if st.get("inhibitedBy") else "active"
        return shown[kind] and all_match(matchers, a.get("labels", {}))
    return lambda alerts: [a for a in alerts if keep(a)]


def _ts(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
