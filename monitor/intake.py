"""Batches into the pipeline, the same way for every source: the daemon's loops and API hand them here.

Per batch, under the pipeline's lock: samples stamped on a stepped wall clock re-anchored onto the
monitor's timeline, far-future stamps refused one by one, the batch's error counts added to
``verl_monitor_scrape_errors_total{target,reason}``, the samples ingested, refused-but-present samples
touched as alive, the target's scrape cache taught what was stored; every error reason is logged at
most once a minute per source. ``mark_down`` is what a failed round leaves: a counted, logged error
and the source's ``up`` series at 0, so the rules see the outage.
"""

from __future__ import annotations

import logging
import threading
import time

from monitor.endpoints.metrics import MonitorMetrics
from monitor.model import Sample, SourceBatch, with_node
from monitor.pipeline import Pipeline
from monitor.series.store import series_key
from monitor.sources.base import DownLabels
from monitor.sources.scrape_cache import ScrapeCache
from monitor.timeline import SteadyClock

log = logging.getLogger("monitor.daemon")  # the daemon's voice: operators filter on it
FUTURE_LIMIT_S = 600.0   # samples stamped further ahead are refused one by one (Prometheus: 10 min)
LOG_EVERY_S = 60.0       # one log line per (source, reason) per minute, however often it fails
HINTS = {  # the fix, for the reasons that have one the operator controls
    "too_old_timestamp": ": stamped more than 5 min before the scrape, past where any rule can judge them; "
                         "fix the target's clock or set honor_timestamps: false for it",
    "future_timestamp": ": stamped more than 10 min ahead; fix the target's clock or set honor_timestamps: false",
}


class Intake:
    def __init__(self, pipeline: Pipeline, metrics: MonitorMetrics, clock: SteadyClock,
                 lock: threading.RLock) -> None:
        self.pipeline, self.metrics, self.clock, self.lock = pipeline, metrics, clock, lock
        self.caches: dict[str, ScrapeCache] = {}  # target name -> its scrape cache
        self._logged: dict[tuple[str, str], float] = {}

    def log_once(self, source: str, reason: str, message: str) -> None:
        now = time.monotonic()
        if now - self._logged.get((source, reason), -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[(source, reason)] = now
            log.warning("%s: %s (%s); counted in verl_monitor_scrape_errors_total, logged at most once a minute",
                        source, message, reason)

    def mark_down(self, source: str, exc: BaseException, down: DownLabels) -> None:
        """A round (or part of one) of ``source`` raised: count it, log it once, mark the source down."""
        reason = type(exc).__name__.lower()
        self.metrics.scrape_errors.labels(source, reason).inc()
        self.metrics.target_up.labels(source).set(0)
        self.log_once(source, reason, f"round failed: {str(exc)[:200]}")
        labels = {"job": down.job, "target": source}
        if down.instance:
            labels["instance"] = down.instance
        try:
            with self.lock:
                self.pipeline.ingest([Sample("up", with_node(labels, down.node), 0.0, self.clock.now())], source)
        except Exception:  # noqa: BLE001 - marking down is best effort; the counter above already moved
            pass

    def ingest(self, batch: SourceBatch, target: str | None = None, seen: float | None = None) -> None:
        """``seen``: the scrape's time, for scraped batches (liveness from the scrape, not the stamps)."""
        source = target or batch.source
        samples = self.clock.reanchor(batch.samples)
        limit = self.clock.now() + FUTURE_LIMIT_S
        if any(s.t > limit for s in samples):  # a far-future stamp would make every later sample "out of order"
            kept = [s for s in samples if s.t <= limit]
            batch.error("future_timestamp", len(samples) - len(kept))
            samples = kept
        for reason, n in batch.errors.items():
            self.metrics.scrape_errors.labels(source, reason).inc(n)
            self.log_once(source, reason, batch.notes.get(reason) or f"{n} failed read(s) or rejected input(s)"
                          + HINTS.get(reason, ""))
        with self.lock:
            self.pipeline.ingest(samples, source, seen, batch.known)
            if batch.refused and seen is not None:
                self.pipeline.touch(batch.refused, seen)
            cache = self.caches.get(source)
            if cache is not None and batch.comments is not None:
                store = self.pipeline.store
                cache.learn(batch.comments, [(key, index, inside, name, store.get(series_key(s.name, s.labels)))
                                             for s, key, index, inside, name in batch.learn],
                            len(samples) + len(batch.known[0] if batch.known else ()))
            rejects, self.pipeline.rejects = self.pipeline.rejects, {}
        for (src, reason), n in rejects.items():  # out of order, repeated stamps, over the series budget
            self.log_once(src, reason, f"{n} sample(s) refused" + (
                f"; the source holds {self.pipeline.store.held_by(src)} series, its fair share is "
                f"{self.pipeline.store.fair_share(src)}" if reason == "series_limit" else ""))
