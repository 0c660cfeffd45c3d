"""Who watches the watcher: the monitor's liveness as others can see it.

``verl_monitor_heartbeat_timestamp_seconds{replica}`` is set by each completed evaluation tick, so a
Prometheus rule (prometheus/rules/verl-monitor-health.yml) tells a monitor whose HTTP thread still
answers but whose loop is stuck from a healthy one -- ``up`` alone cannot. ``verl_monitor_info{replica,
cluster}`` names the replica of an HA pair, as Prometheus' external labels do.

``heartbeat: {url: ...}`` in the config pings a dead man's switch (healthchecks.io, Cronitor, an
Alertmanager-independent webhook) every ``interval`` while the evaluation loop is alive: when the pings
stop, that outside service pages. The URL usually carries a token, so it is never logged (only its host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry, Gauge

from alerting.http_limits import tls_context
from alerting.notifiers.base import redact
from monitor import config_values as value
from monitor.errors import MonitorConfigError

if TYPE_CHECKING:
    from monitor.endpoints.health import Progress

log = logging.getLogger("monitor.heartbeat")


@dataclass
class HeartbeatConfig:
    url: str = ""
    interval: float = 60.0
    method: str = "GET"  # healthchecks.io takes GET or POST, Cronitor GET
    timeout: float = 10.0


class LivenessMetrics:
    """The two gauges: the replica's identity and the time of its last completed evaluation."""

    def __init__(self, registry: CollectorRegistry, replica: str, cluster: str) -> None:
        self.replica = replica
        Gauge("verl_monitor_info", "1 per monitor process; its replica (HA pair) and cluster.",
              ["replica", "cluster"], registry=registry).labels(replica, cluster).set(1)
        self.heartbeat = Gauge("verl_monitor_heartbeat_timestamp_seconds",
                               "Wall time of the last completed evaluation tick (stops when the loop does).",
                               ["replica"], registry=registry).labels(replica)

    def beat(self, wall: float) -> None:
        self.heartbeat.set(wall)


def host_only(url: str) -> str:
    """What a log may say about the heartbeat URL: scheme and host, never path or query (the token)."""
    return redact(httpx.URL(url).copy_with(path="/", query=None, fragment=None).__str__())


class HeartbeatPinger:
    """Pings ``cfg.url`` every ``cfg.interval`` while ``alive()`` says the evaluation loop is completing
    ticks; a failed ping is logged once per failure streak (host only) and tried again next interval."""

    def __init__(self, cfg: HeartbeatConfig, alive: Callable[[], bool],
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.cfg = cfg
        self.alive = alive
        self.transport = transport
        self.sent = 0
        self.failed = 0
        self._failing = False

    async def ping_once(self, client: httpx.AsyncClient) -> bool:
        if not self.alive():
            return False  # a stuck loop must look dead from outside: no ping
        try:
            resp = await client.request(self.cfg.method, self.cfg.url)
            ok = resp.status_code < 400
            why = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            ok, why = False, type(exc).__name__
        if ok:
            self.sent += 1
            if self._failing:
                log.info("heartbeat to %s works again", host_only(self.cfg.url))
            self._failing = False
            return True
        self.failed += 1
        if not self._failing:
            log.warning("heartbeat to %s failed (%s); retrying every %gs", host_only(self.cfg.url), why,
                        self.cfg.interval)
        self._failing = True
        return False

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=self.cfg.timeout, transport=self.transport, verify=tls_context(),
                                     follow_redirects=True) as client:
            while not stop.is_set():
                try:
                    await self.ping_once(client)
                except Exception as exc:  # the pinger never takes the daemon down
                    log.warning("heartbeat: %s", type(exc).__name__)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.cfg.interval)


def pinger_tasks(cfg: HeartbeatConfig | None, progress: Progress, stop: asyncio.Event) -> list[asyncio.Task[Any]]:
    """The pinger as a task of the daemon's loop (none without ``heartbeat:``); alive = evaluation not stalled."""
    if cfg is None:
        return []
    pinger = HeartbeatPinger(cfg, lambda: not any(s.startswith("evaluation:") for s in progress.stalled()))
    return [asyncio.create_task(pinger.run(stop))]


HEARTBEAT_KEYS = {"url", "url_env", "interval", "method", "timeout"}


def parse_heartbeat(raw: Any) -> HeartbeatConfig:
    """``heartbeat: {url | url_env, interval, method, timeout}``: the URL of a dead man's switch. It carries
    the check's token, so ``url_env`` keeps it out of the file and errors never quote it."""
    hb = value.section(raw, "heartbeat", "{url_env: HEARTBEAT_URL, interval: 1m}", HEARTBEAT_KEYS)
    if ("url" in hb) == ("url_env" in hb):
        raise MonitorConfigError("heartbeat: give exactly one of url or url_env (an environment variable holding it)")
    if "url_env" in hb:
        env = value.text(hb["url_env"], "heartbeat.url_env")
        url = os.environ.get(env, "").strip()
        if not url:
            raise MonitorConfigError(f"heartbeat.url_env: environment variable {env[:60]} is unset or empty; export it")
    else:
        url = value.text(hb["url"], "heartbeat.url")
    if not url.startswith(("http://", "https://")):
        raise MonitorConfigError("heartbeat.url: must start with http:// or https://")
    method = str(hb.get("method", "GET")).upper()
    if method not in ("GET", "POST", "HEAD"):
        raise MonitorConfigError(f"heartbeat.method: expected GET, POST or HEAD, got {method[:20]!r}")
    return HeartbeatConfig(url, value.duration(hb.get("interval", 60), "heartbeat.interval"), method,
                           value.duration(hb.get("timeout", 10), "heartbeat.timeout"))
