"""Scrape Prometheus text / OpenMetrics endpoints (trainer, dcgm-exporter, node exporter) with httpx,
all targets concurrently, each with its own timeout; one bad target never delays or breaks another."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from monitor.model import Sample, SourceBatch, with_node

ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    node: str | None = None
    job: str = "verl"
    interval: float = 5.0
    timeout: float = 3.0


def parse_exposition(text: str, t: float, source: str, node: str | None, extra: dict[str, str]) -> SourceBatch:
    """Parse exposition text into samples. The parser (prometheus_client's) stops at the first
    malformed line, so input is parsed line-block by line-block: a bad line costs only itself."""
    batch = SourceBatch(source)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception:
        families = _parse_tolerant(text, batch)
    # prometheus_client writes each counter's creation time as a separate `<name>_created` gauge
    # family in the text format: plumbing, not a measurement, and it would double the series count.
    countable = {f.name for f in families if f.type in ("counter", "histogram", "summary")}
    for fam in families:
        if fam.name.endswith("_created") and fam.name[: -len("_created")] in countable:
            continue
        for s in fam.samples:
            if s.name.endswith("_created") and fam.type in ("counter", "histogram", "summary"):
                continue
            if not math.isfinite(s.value):
                batch.error("nonfinite_value")
                continue
            labels = with_node({**s.labels, **extra}, node)
            ts = float(s.timestamp) if s.timestamp is not None else t
            batch.samples.append(Sample(s.name, labels, float(s.value), ts))
    return batch


def _parse_tolerant(text: str, batch: SourceBatch) -> list:
    families = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            families.extend(text_string_to_metric_families(line + "\n"))
        except Exception:
            batch.error("malformed_line")
    return families


async def scrape(client: httpx.AsyncClient, target: Target, now: float) -> tuple[SourceBatch, float, bool]:
    """One scrape: (batch, duration seconds, up). Also yields the synthetic ``up`` series."""
    started = time.perf_counter()
    extra = {"job": target.job, "target": target.name}
    up = False
    try:
        resp = await client.get(target.url, timeout=target.timeout, headers={"Accept": ACCEPT})
        if resp.status_code != 200:
            batch = SourceBatch(target.name)
            batch.error(f"http_{resp.status_code}")
        else:
            batch = parse_exposition(resp.text, now, target.name, target.node, extra)
            up = True
    except httpx.TimeoutException:
        batch = SourceBatch(target.name)
        batch.error("timeout")
    except httpx.HTTPError as exc:
        batch = SourceBatch(target.name)
        batch.error(type(exc).__name__.lower())
    batch.samples.append(Sample("up", with_node({"job": target.job, "target": target.name,
                                                 "instance": httpx.URL(target.url).netloc.decode()},
                                                target.node), 1.0 if up else 0.0, now))
    return batch, time.perf_counter() - started, up


async def scrape_all(client: httpx.AsyncClient, targets: list[Target], now: float) -> list[tuple[SourceBatch, float, bool]]:
    return list(await asyncio.gather(*(scrape(client, tg, now) for tg in targets)))
