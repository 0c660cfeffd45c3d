"""One Prometheus text / OpenMetrics target as a source: ``prom_text.scrape`` on the target's interval."""

from __future__ import annotations

import zlib

import httpx

from alerting.clock import Clock
from monitor.sources.base import DownLabels, Polled, Round
from monitor.sources.prom_text import Target, scrape
from monitor.sources.relabel import KnownUnits, relabel
from monitor.sources.stragglers import StragglerScores


def scrape_offset(url: str, interval: float) -> float:
    """Deterministic start offset in [0, interval) for one target: the same URL keeps its phase
    across restarts, different URLs spread evenly."""
    return zlib.crc32(url.encode()) / 2**32 * interval


class ScrapeSource:
    def __init__(self, target: Target, client: httpx.AsyncClient) -> None:
        self.target, self.client = target, client
        self.name = f"target {target.name}"
        self.metric = target.name
        self.interval, self.wait_after = target.interval, False  # Prometheus' fixed scrape grid
        self.budget = max(target.interval, target.timeout)
        # Spread targets over the interval (a fixed phase per URL, like Prometheus' own scrape offsets):
        # started together, 250 targets' bodies arrive in one burst and queue behind each other's parse.
        self.offset = scrape_offset(target.url, target.interval)
        self.down = DownLabels(target.job, target.node, httpx.URL(target.url).netloc.decode())
        self.units = KnownUnits()
        self.stragglers = StragglerScores()  # per-rank times of a torchrun job -> straggler scores

    async def poll(self, clock: Clock) -> Round:
        now = clock.now()
        batch, duration, up = await scrape(self.client, self.target, now)
        verl_nodes = relabel(batch, self.units)
        self.stragglers.derive(batch)
        return Round([Polled(batch, seen=now, source=self.target.name)], up=up, duration=duration,
                     verl_nodes=verl_nodes)

    async def close(self) -> None:
        pass  # the client is the daemon's, shared by every target
