"""Query a Prometheus server's HTTP API: ``/api/v1/query_range``, split into chunks of at most
``chunk`` seconds (Prometheus refuses more than 11000 points per series in one query).

Bounded: each request has a total deadline (``timeout``: the whole answer, not each read: a
Prometheus dripping its answer a byte at a time is cut there, where httpx's per-operation timeouts
would wait ~50 s), and an answer is streamed and refused past ``BODY_LIMIT`` bytes (as Prometheus'
own ``body_size_limit``: a 300 MB answer cost 1.16 GB of memory). A request that fails (timeout,
refused, HTTP error, garbage, too large) is counted and makes the round name the source down
(``Round.problem``: /healthz says "prometheus: down (...)"); odd points inside a good answer are only
counted.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

import httpx

from alerting.clock import Clock
from alerting.http_limits import BodyTooLarge, read_async, tls_context
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round
from monitor.sources.relabel import relabel


@dataclass
class PromAPIConfig:
    """The config's ``prometheus:`` section: which server, which queries, at what step and how often."""

    url: str
    queries: list[str]
    step: float = 15.0
    interval: float = 60.0
    chunk: float = 3600.0
    lookback: float = 600.0
    timeout: float = 10.0


MAX_POINTS = 11000
BODY_LIMIT = 32 << 20  # bytes of one answer (decoded); 11000 points of ~100 series is about 30 MB
INLINE_PARSE_BYTES = 256 << 10
# reasons a request failed as a whole: the source is down while any query fails so
REQUEST_FAILURES = ("timeout", "connect_error", "body_too_large", "bad_response")


def chunks(start: float, end: float, step: float, chunk: float) -> list[tuple[float, float]]:
    span = min(chunk, step * (MAX_POINTS - 1))
    out, t = [], start
    while t < end:
        out.append((t, min(end, t + span)))
        t = min(end, t + span) + step
    return out


async def _fetch(client: httpx.AsyncClient, url: str, params: dict[str, Any], timeout: float,
                 limit: int) -> tuple[int, bytes]:
    async with client.stream("GET", f"{url}/api/v1/query_range", params=params, timeout=timeout) as resp:
        if resp.status_code != 200:
            return resp.status_code, b""
        return 200, await read_async(resp, limit)


async def query_range(client: httpx.AsyncClient, url: str, query: str, start: float, end: float, step: float,
                      chunk: float, timeout: float = 10.0, body_limit: int = BODY_LIMIT) -> SourceBatch:
    batch = SourceBatch(f"prometheus:{url}")
    for a, b in chunks(start, end, step, chunk):
        params = {"query": query, "start": a, "end": b, "step": step}
        try:
            status, body = await asyncio.wait_for(_fetch(client, url, params, timeout, body_limit), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            batch.error("timeout")
            continue
        except BodyTooLarge:
            batch.error("body_too_large")
            continue
        except httpx.HTTPError:
            batch.error("connect_error")
            continue
        if status != 200:
            batch.error(f"http_{status}")
            continue
        try:  # a large answer is parsed in a thread: the shared loop keeps scraping meanwhile
            doc = json.loads(body) if len(body) <= INLINE_PARSE_BYTES else await asyncio.to_thread(json.loads, body)
        except (ValueError, RecursionError):
            batch.error("bad_response")
            continue
        _matrix(doc, batch)
    batch.samples.sort(key=lambda s: s.t)
    return batch


def _matrix(doc: Any, batch: SourceBatch) -> None:
    if not isinstance(doc, dict) or doc.get("status") != "success":
        batch.error("bad_response")
        return
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        batch.error("bad_response")
        return
    for series in result:
        metric = series.get("metric") if isinstance(series, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict | None) or not isinstance(values, list | None):
            batch.error("bad_response")
            continue
        metric = {str(k): str(v) for k, v in (metric or {}).items()}
        name = metric.pop("__name__", None)
        if not name:
            batch.error("unnamed_series")
            continue
        labels = with_node(metric)
        for pair in values or []:
            try:  # odd JSON (a huge integer, a string time, a short pair) costs only its point
                ts, raw = pair
                t, v = float(ts), float(raw)
            except (TypeError, ValueError, OverflowError):
                batch.error("malformed_value")
                continue
            if not math.isfinite(v) or not math.isfinite(t):
                batch.error("nonfinite_value")
                continue
            batch.samples.append(Sample(name, labels, v, t))


def failed_requests(batch: SourceBatch) -> list[str]:
    """The reasons of ``batch`` that mean a request failed as a whole (not an odd point)."""
    return sorted(r for r in batch.errors if r in REQUEST_FAILURES or r.startswith("http_"))


class PromQuerySource:
    """The configured queries over the window since the last round (the first reaches back
    ``lookback``); a failing query is counted, names the source down, and the others still ingested."""

    def __init__(self, cfg: PromAPIConfig) -> None:
        self.cfg = cfg
        self.name = self.metric = "prometheus"
        self.interval, self.budget, self.offset = cfg.interval, cfg.interval + cfg.timeout, 0.0
        self.wait_after = True  # a Prometheus answering slowly is asked less often, not back to back
        self.down = DownLabels("prometheus")
        self.client = httpx.AsyncClient(verify=tls_context())
        self.last: float | None = None

    async def poll(self, clock: Clock) -> Round:
        cfg, now = self.cfg, clock.now()
        start = now - cfg.lookback if self.last is None else self.last
        out, problems = Round(), []
        for q in cfg.queries:
            try:
                batch = await query_range(self.client, cfg.url, q, start, now, cfg.step, cfg.chunk, cfg.timeout)
            except Exception as exc:  # noqa: BLE001 - counted and logged by the daemon's loop
                out.failures.append(exc)
                problems.append(f"query {q[:80]!r}: {type(exc).__name__}")
                continue
            if failed := failed_requests(batch):
                problems.append(f"query {q[:80]!r} at {cfg.url}: {', '.join(failed)}")
            out.verl_nodes |= relabel(batch)
            out.polled.append(Polled(batch, source=self.metric))
        out.up = not problems
        out.problem = "; ".join(problems)[:400] or None
        self.last = now + cfg.step
        return out

    async def close(self) -> None:
        await self.client.aclose()
