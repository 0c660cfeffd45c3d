"""``verl-alert serve``: the stateless delivery endpoint beside each Alertmanager peer of an HA pair.

Two monitors post the same alerts to both peers of an Alertmanager cluster; the cluster's gossiped
notification log makes exactly one peer flush each group, to its own endpoint here, which renders our
message (root cause, suggestion, plot link, console link: they travel as annotations) and sends it to the
robot named in the path::

    POST /hook/<receiver>   Alertmanager's webhook payload (version 4) -> the receiver of --config
    GET  /metrics           verl_alerting_notifications_total{receiver,status} (delivered / failed)
    GET  /healthz           200

No state lives here: dedup is Alertmanager's notification log, retries are Alertmanager's (a robot that
fails answers 503 here, so the peer retries; a permanent refusal answers 400, which it does not retry).
The standard library's ``ThreadingHTTPServer`` is enough for one POST route a few times a minute; the
monitor's uvicorn listener is in the monitor package, which alerting must not import.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from alerting.clock import Clock, SystemClock
from alerting.config import AlertingConfig
from alerting.metrics import AlertingMetrics
from alerting.model import Notification, alert_from_json
from alerting.notifiers import build_notifier, redact
from alerting.notifiers.base import Delivery, Notifier
from alerting.templates import Rendered, render
from alerting.templates.safe import DIALECTS

log = logging.getLogger("alerting.delivery")
MAX_BODY = 4 * 1024 * 1024  # Alertmanager's webhook for one group; far above any real one


class DeliveryEndpoint:
    """Turns one Alertmanager webhook payload into one chat message for one configured receiver."""

    def __init__(self, cfg: AlertingConfig, clock: Clock | None = None, notifiers: dict[str, Notifier] | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.registry = registry or CollectorRegistry()
        self.metrics = AlertingMetrics(self.registry)
        self.notifiers = notifiers if notifiers is not None else \
            {name: build_notifier(rc) for name, rc in cfg.receivers.items()}
        for name in self.notifiers:  # every receiver shows in /metrics from the start: rate() needs a zero
            for status in ("delivered", "failed"):
                self.metrics.notifications.labels(name, status)

    def deliver(self, receiver: str, payload: Any) -> tuple[int, str]:
        """(HTTP status for Alertmanager, one-line reason)."""
        notifier = self.notifiers.get(receiver)
        if notifier is None:
            return 404, f"receiver {receiver!r} is not in the config (known: {', '.join(sorted(self.notifiers))})"
        try:
            alerts = [alert_from_json(a) for a in payload["alerts"]]
            status = "resolved" if payload.get("status") == "resolved" else "firing"
            note = Notification(receiver, str(payload.get("groupKey", "")), dict(payload.get("groupLabels") or {}),
                                status, alerts, [a.fingerprint for a in alerts], self.clock.now())
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return 400, f"not an Alertmanager webhook payload ({type(exc).__name__}: {str(exc)[:120]})"
        if not alerts or (status == "resolved" and not notifier.cfg.send_resolved):
            return 200, "nothing to send"
        result = self._send(notifier, note)
        self.metrics.notifications.labels(receiver, "delivered" if result.ok else "failed").inc()
        if result.ok:
            return 200, "delivered"
        error = redact(result.error, notifier.cfg.secret)
        log.warning("receiver %s: delivery failed (%s)%s", receiver, error,
                    "; Alertmanager retries" if result.retryable else "")
        return (503 if result.retryable else 400), error

    def _send(self, notifier: Notifier, note: Notification) -> Delivery:
        rc, cfg = notifier.cfg, self.cfg
        link = f"{cfg.monitor_url}/api/v1/alerts" if cfg.monitor_url else "verl-monitor /api/v1/alerts"

        def rerender(max_bytes: int) -> Rendered:
            return render([note], template=rc.template, lang=rc.lang, link=link, receiver=rc.name,
                          max_bytes=max_bytes, runbook_base=cfg.runbook_base_url,
                          dialect=notifier.kind if notifier.kind in DIALECTS else "plain",
                          link_hosts=cfg.link_hosts, console=cfg.monitor_url)

        try:
            return notifier.deliver(rerender(notifier.max_bytes), [note], False, rerender)
        except Exception as exc:  # a notifier bug answers 503 (retried), never kills the endpoint
            return Delivery.retry(f"{rc.type} notifier error ({type(exc).__name__})")

    def close(self) -> None:
        for n in self.notifiers.values():
            n.close()


def _handler(endpoint: DeliveryEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the stdlib's name
            pass  # request lines would go to stderr per request; failures are logged by the endpoint

        def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, generate_latest(endpoint.registry), CONTENT_TYPE_LATEST)
            elif self.path in ("/healthz", "/-/healthy"):
                self._reply(200, b"ok\n")
            else:
                self._reply(404, b"GET /metrics or /healthz; Alertmanager posts to /hook/<receiver>\n")

        def do_POST(self) -> None:
            if not self.path.startswith("/hook/"):
                self._reply(404, b"POST /hook/<receiver>\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._reply(413, b"payload too large\n")
                return
            try:
                payload = json.loads(self.rfile.read(length))
            except ValueError:
                self._reply(400, b"body is not JSON\n")
                return
            code, why = endpoint.deliver(self.path[len("/hook/"):].strip("/"), payload)
            self._reply(code, (why + "\n").encode())

    return Handler


class DeliveryServer:
    """The endpoint on ``host:port`` in a background thread (``port`` 0: any free one)."""

    def __init__(self, endpoint: DeliveryEndpoint, host: str = "127.0.0.1", port: int = 9096) -> None:
        self.endpoint = endpoint
        self.httpd = ThreadingHTTPServer((host, port), _handler(endpoint))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="verl-alert-serve", daemon=True)

    def start(self) -> DeliveryServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.endpoint.close()

    def __enter__(self) -> DeliveryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
