"""The daemon's one listener: the JSON API (``monitor.endpoints.api``) and the console (``monitor.web``) on one
port, served by uvicorn with the guards of ``monitor.endpoints.httpguard``, whose closings are counted on /metrics."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily

from monitor.endpoints.api import MonitorAPI
from monitor.endpoints.httpguard import GuardedServer
from monitor.web.app import build_app

log = logging.getLogger("monitor.listener")


class GuardCounts:
    """``verl_monitor_http_connections_closed_total{reason}``: cut (header deadline), evicted (an idle
    holder closed for a newcomer), refused (a newcomer closed: every connection mid-request); and
    ``verl_monitor_http_requests_shed_total``: API requests answered 429 so that /healthz, /metrics and
    the webhook stay served."""

    def __init__(self, server: GuardedServer) -> None:
        self.server = server

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("verl_monitor_http_connections_closed",
                                     "Connections the monitor's listener closed, by reason.", labels=["reason"])
        for reason in ("cut", "evicted", "refused"):
            family.add_metric([reason], getattr(self.server, reason))
        yield family
        yield CounterMetricFamily("verl_monitor_http_requests_shed",
                                  "API requests answered 429 (connection cap or too many at once).",
                                  value=self.server.shed)


def listen(daemon: Any, host: str, port: int, token: str | None) -> MonitorAPI:
    """Bound at once (OSError when the port is taken); serving after ``start()``."""
    api = MonitorAPI(daemon, host, port, token, app=build_app)
    daemon.metrics.registry.register(GuardCounts(api.server))
    if not token:  # a warning where the network reaches it; on loopback the CLI's INFO line says it
        log.log(logging.INFO if _loopback(host) else logging.WARNING,
                "no bearer_token: the API and console on %s:%d are open to anyone who can connect to it "
                "(writes only from its own pages or non-browser clients, Host names checked); set "
                "bearer_token_env to require a token", host, api.port)
    return api


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
