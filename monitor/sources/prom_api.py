"""Query a Prometheus server's HTTP API: ``/api/v1/query_range``, split into chunks of at most
``chunk`` seconds (Prometheus refuses more than 11000 points per series in one query)."""

from __future__ import annotations

import asyncio
import math

import httpx

from alerting.clock import Clock
from monitor.config import PromAPIConfig
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round
from monitor.sources.relabel import relabel

MAX_POINTS = 11000


def chunks(start: float, end: float, step: float, chunk: float) -> list[tuple[float, float]]:
    span = min(chunk, step * (MAX_POINTS - 1))
    out, t = [], start
    while t < end:
        out.append((t, min(end, t + span)))
        t = min(end, t + span) + step
    return out


def query_range(client: httpx.Client, url: str, query: str, start: float, end: float, step: float,
                chunk: float, timeout: float = 10.0) -> SourceBatch:
    batch = SourceBatch(f"prometheus:{url}")
    for a, b in chunks(start, end, step, chunk):
        try:
            resp = client.get(f"{url}/api/v1/query_range", timeout=timeout,
                              params={"query": query, "start": a, "end": b, "step": step})
        except httpx.TimeoutException:
            batch.error("timeout")
            continue
        except httpx.HTTPError:
            batch.error("connect_error")
            continue
        if resp.status_code != 200:
            batch.error(f"http_{resp.status_code}")
            continue
        try:
            doc = resp.json()
        except (ValueError, RecursionError):
            batch.error("bad_response")
            continue
        if not isinstance(doc, dict) or doc.get("status") != "success":
            batch.error("bad_response")
            continue
        data = doc.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            batch.error("bad_response")
            continue
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
    batch.samples.sort(key=lambda s: s.t)
    return batch


class PromQuerySource:
    """The configured queries over the window since the last round (the first reaches back
    ``lookback``); a failing query is counted and the others still ingested."""

    def __init__(self, cfg: PromAPIConfig) -> None:
        self.cfg = cfg
        self.name = self.metric = "prometheus"
        self.interval, self.budget, self.offset = cfg.interval, cfg.interval + cfg.timeout, 0.0
        self.wait_after = True  # a Prometheus answering slowly is asked less often, not back to back
        self.down = DownLabels("prometheus")
        self.client = httpx.Client()
        self.last: float | None = None

    async def poll(self, clock: Clock) -> Round:
        cfg, now = self.cfg, clock.now()
        start = now - cfg.lookback if self.last is None else self.last
        out = Round()
        for q in cfg.queries:
            try:  # the blocking client in a worker thread: a hanging Prometheus never holds the loop
                batch = await asyncio.to_thread(query_range, self.client, cfg.url, q, start, now, cfg.step,
                                                cfg.chunk, cfg.timeout)
            except Exception as exc:  # noqa: BLE001 - counted and logged by the daemon's loop
                out.failures.append(exc)
                continue
            out.verl_nodes |= relabel(batch)
            out.polled.append(Polled(batch, source=self.metric))
        out.up = None if out.failures else True
        self.last = now + cfg.step
        return out

    async def close(self) -> None:
        self.client.close()
