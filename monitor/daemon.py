"""``verl-monitor run``: sources on their own intervals -> pipeline -> alerting engine, plus the HTTP API.

One asyncio loop drives every source (scrapes run concurrently; a hanging target only waits out its
own timeout) and the evaluation tick; the HTTP server runs in its own threads. ``lock`` serialises
access to the pipeline between the two.

Never blind: every source loop survives any input (an exception in one scrape or poll is counted in
``verl_monitor_scrape_errors_total{target,reason}``, logged once a minute per (target, reason), sets the
source's ``up`` to 0 and the next round runs on schedule). Nothing slow runs in the evaluation tick:
notifications go to the alerting engine's per-receiver delivery workers, plots render in a worker
thread and the trainer's reward outliers are fetched by their own loop into a cache. ``/healthz``
answers 503 naming the reason when a loop stopped completing or a notification is stuck.

Over 450 lines on purpose: ``Daemon`` is one object because every source loop shares its lock, its
per-loop health marks and its log-once table; split apart, each loop would take all three as arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from alerting.clock import Clock, SystemClock
from alerting.durable import StorageHealth
from alerting.logsafe import setup_logging
from alerting.model import Alert
from monitor.api import MonitorAPI
from monitor.config import MonitorConfig
from monitor.console import ConsolePrinter
from monitor.evaluator import Candidate
from monitor.metrics import MonitorMetrics
from monitor.model import Sample, SourceBatch, with_node
from monitor.pipeline import Pipeline
from monitor.plotlinks import PlotLinks
from monitor.rules import RuleError, load_rule_files
from monitor.sources import prom_api
from monitor.sources.dmon import DmonParser
from monitor.sources.prom_text import Target, scrape
from monitor.sources.scrape_cache import ScrapeCache
from monitor.sources.scrape_http import ScrapeClient
from monitor.sources.verl_export import VerlSeriesExport
from monitor.sources.verl_jsonl import JsonlTail, OffsetStore, RunLiveness, writer_holds
from monitor.store import series_key
from monitor.timeline import SteadyClock

log = logging.getLogger("monitor.daemon")
FUTURE_LIMIT_S = 600.0   # samples stamped further ahead are refused one by one (Prometheus: 10 min)
LOG_EVERY_S = 60.0       # one log line per (source, reason) per minute, however often it fails
STALE_LOOPS = 3          # /healthz degrades when a loop has not completed for this many intervals
STUCK_NOTIFICATION_S = 300.0
SHUTDOWN_S = 4.5         # SIGTERM: a clean stop gets this long, then the process exits regardless
OUTLIERS_EVERY_S = 10.0


def scrape_offset(url: str, interval: float) -> float:
    """Deterministic start offset in [0, interval) for one target: the same URL keeps its phase
    across restarts, different URLs spread evenly."""
    return zlib.crc32(url.encode()) / 2**32 * interval


class Daemon:
    def __init__(self, config: MonitorConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = SteadyClock(clock or SystemClock())  # wall-clock steps are absorbed (timeline.py)
        self.metrics = MonitorMetrics()
        self.storage = StorageHealth(lambda db, op: self.metrics.storage_errors.labels(db, op).inc())
        self._eval_error: str | None = None
        self.lock = threading.RLock()
        self.engine: Any = None
        rules = load_rule_files(config.rules or None)
        config.state_db.parent.mkdir(parents=True, exist_ok=True)
        if config.notify_config is not None:
            from alerting.engine import AlertEngine  # only needed when notifying

            self.engine = AlertEngine.from_file(config.notify_config, config.state_db.with_name("alerting.db"),
                                                self.clock, registry=self.metrics.registry, health=self.storage)
        self.pipeline = Pipeline(rules, self.clock, cluster=config.cluster, db_path=config.state_db,
                                 plots_dir=config.plots_dir, plot_prefix=None, metrics=self.metrics,
                                 engine=self.engine, enrich=self._enrich if config.reward_outliers else None,
                                 limits=config.limits, on_record=ConsolePrinter() if config.prints_alerts else None,
                                 health=self.storage)
        if self.engine is not None:
            self.engine.retention_s = config.retention
        self._want_outliers = config.reward_outliers and any(r.alert == "RewardDistributionDrift" for r in rules)
        self._outliers: dict[str, list[str]] = {}  # target name -> top prompt lines, filled by _outliers_loop
        self.api: MonitorAPI | None = None
        self._stop = asyncio.Event()
        self.started = time.time()
        self._frozen_at = 0
        self._jsonl_offsets: OffsetStore | None = None
        self._verl_export: VerlSeriesExport | None = None
        self._progress: dict[str, tuple[float, float]] = {}  # loop -> (monotonic of last completion, interval)
        self._logged: dict[tuple[str, str], float] = {}
        self._pruned_at = -float("inf")
        self._caches: dict[str, ScrapeCache] = {}  # target name -> its scrape cache

    def listen(self) -> MonitorAPI:
        """Bind the HTTP listener (OSError when the port is taken)."""
        return MonitorAPI(self, self.config.host, self.config.port, self.config.bearer_token)

    # -- API helpers -----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``reasons`` is non-empty (and the API answers 503) when a source or the evaluation loop has not
        completed for STALE_LOOPS intervals, the last evaluation tick failed, a state write is failing,
        a delivery worker is stuck or died, or the oldest undelivered notification is over 5 min old.
        ``storage_events`` lists the last hour's recoveries (a corrupt database moved aside, a deleted
        state file recreated)."""
        reasons = []
        if self._eval_error:
            reasons.append(f"evaluation: last tick failed ({self._eval_error})")
        reasons += self.storage.reasons()
        book, pipeline = self.pipeline.book, self.pipeline
        if book.unwritten():
            reasons.append(f"{book.DB}: {book.unwritten()} alert transition(s) held in memory, not yet written")
        if pipeline.unsubmitted:
            reasons.append(f"alerting: {len(pipeline.unsubmitted)} alert transition(s) not yet taken by the engine")
        mono = time.monotonic()
        for name, (last, interval) in sorted(self._progress.items()):
            if mono - last > STALE_LOOPS * interval:
                reasons.append(f"{name}: no completed round for {mono - last:.0f}s (interval {interval:g}s)")
        engine = self.engine
        problems = getattr(engine, "delivery_problems", None)
        if problems is not None:
            reasons += problems()
        try:
            oldest = engine.oldest_undelivered() if engine is not None else None
        except (OSError, sqlite3.Error) as exc:
            oldest = None
            reasons.append(f"outbox: unreadable ({exc})")
        if oldest is not None and self.clock.now() - oldest > STUCK_NOTIFICATION_S:
            reasons.append(f"outbox: oldest undelivered notification queued {self.clock.now() - oldest:.0f}s ago")
        return {"status": "degraded" if reasons else "ok", "reasons": reasons,
                "storage_events": self.storage.events(),
                "series": len(self.pipeline.store), "firing": len(self.pipeline.book.firing()),
                "uptime_s": round(time.time() - self.started, 1)}

    def _done(self, loop: str, interval: float) -> None:
        self._progress[loop] = (time.monotonic(), interval)

    def _log_once(self, source: str, reason: str, message: str) -> None:
        now = time.monotonic()
        if now - self._logged.get((source, reason), -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[(source, reason)] = now
            log.warning("%s: %s (%s); counted in verl_monitor_scrape_errors_total, logged at most once a minute",
                        source, message, reason)

    def _source_failed(self, source: str, exc: BaseException, job: str, node: str | None = None,
                       instance: str | None = None) -> None:
        """A round of ``source`` raised: count it, log it once, mark the source down, carry on."""
        reason = type(exc).__name__.lower()
        self.metrics.scrape_errors.labels(source, reason).inc()
        self.metrics.target_up.labels(source).set(0)
        self._log_once(source, reason, f"round failed: {str(exc)[:200]}")
        labels = {"job": job, "target": source}
        if instance:
            labels["instance"] = instance
        try:
            with self.lock:
                self.pipeline.ingest([Sample("up", with_node(labels, node), 0.0, self.clock.now())], source)
        except Exception:  # noqa: BLE001 - marking down is best effort; the counter above already moved
            pass

    def alerts(self) -> list[dict[str, Any]]:
        own = [dict(a.to_json(), state="firing") for a in self.pipeline.book.firing()]
        own += [dict(a.to_json(), state="pending") for a in self.pipeline.book.pending()]
        return own

    def submit_external(self, alerts: list[Alert]) -> int:
        with self.lock:
            return len(self.pipeline.submit_external(alerts))

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
            self._log_once(source, reason, f"{n} failed read(s) or rejected input(s)")
        with self.lock:
            self.pipeline.ingest(samples, source, seen, batch.known)
            if batch.refused and seen is not None:
                self.pipeline.touch(batch.refused, seen)
            cache = self._caches.get(source)
            if cache is not None and batch.comments is not None:
                store = self.pipeline.store
                cache.learn(batch.comments, [(key, index, inside, name, store.get(series_key(s.name, s.labels)))
                                             for s, key, index, inside, name in batch.learn],
                            len(samples) + len(batch.known[0] if batch.known else ()))
            rejects, self.pipeline.rejects = self.pipeline.rejects, {}
        for (src, reason), n in rejects.items():  # out of order, repeated stamps, over the series budget
            self._log_once(src, reason, f"{n} sample(s) refused" + (
                f"; the source holds {self.pipeline.store.held_by(src)} series, its fair share is "
                f"{self.pipeline.store.fair_share(src)}" if reason == "series_limit" else ""))

    # -- enrichment: RewardDistributionDrift gets the trainer's top-3 anomalous prompts -------------

    def _enrich(self, c: Candidate, ann: dict[str, str]) -> dict[str, str]:
        """Runs inside the evaluation tick, so it only reads the cache ``_outliers_loop`` fills."""
        if c.rule.alert != "RewardDistributionDrift":
            return ann
        node = c.labels.get("node")
        for tg in self.config.targets:
            if tg.job != "verl" or (tg.node and tg.node != node):
                continue
            lines = self._outliers.get(tg.name)
            if lines:
                ann["top_prompts"] = "\n".join(lines)
                ann["description"] = (ann.get("description", "") + "\nTop anomalous prompts:\n"
                                      + "\n".join(f"{i + 1}. {x}" for i, x in enumerate(lines))).strip()
                break
        return ann

    async def _fetch_outliers(self, client: httpx.AsyncClient, tg: Target) -> None:
        url = str(httpx.URL(tg.url).copy_with(path="/api/v1/reward_outliers", query=b"k=3"))
        token = self.config.target_tokens.get(tg.name)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        try:
            resp = await asyncio.wait_for(client.get(url, timeout=min(tg.timeout, 2.0), headers=headers),
                                          min(tg.timeout, 2.0))
            doc = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, asyncio.TimeoutError, RecursionError):
            return
        items = doc.get("outliers", doc.get("data", [])) if isinstance(doc, dict) else doc
        lines = []
        for it in (items if isinstance(items, list) else [])[:3]:
            if isinstance(it, dict):
                reward = it.get("reward", it.get("score"))
                prompt = str(it.get("prompt", it.get("text", "")))[:200]
                lines.append(f"{reward}: {prompt}" if reward is not None else prompt)
            else:
                lines.append(str(it)[:200])
        self._outliers[tg.name] = lines

    async def _refresh_outliers(self, client: httpx.AsyncClient) -> None:
        await asyncio.gather(*(self._fetch_outliers(client, tg) for tg in self.config.targets if tg.job == "verl"),
                             return_exceptions=True)

    async def _outliers_loop(self, client: httpx.AsyncClient) -> None:
        while not self._stop.is_set():
            await self._sleep(OUTLIERS_EVERY_S)
            await self._refresh_outliers(client)

    # -- loops -----------------------------------------------------------------------------------

    async def _scrape_loop(self, client: httpx.AsyncClient, target: Target) -> None:
        # Spread targets over the interval (a fixed phase per URL, like Prometheus' own scrape offsets):
        # started together, 250 targets' bodies arrive in one burst and queue behind each other's parse.
        due = time.monotonic() + scrape_offset(target.url, target.interval)
        loop_name = f"target {target.name}"
        budget = max(target.interval, target.timeout)
        self._caches[target.name] = target.cache
        self._progress[loop_name] = (due, budget)
        await self._sleep(due - time.monotonic())
        while not self._stop.is_set():
            try:
                now = self.clock.now()
                batch, duration, up = await scrape(client, target, now)
                self.metrics.scrape_duration.labels(target.name).set(duration)
                self.metrics.target_up.labels(target.name).set(1 if up else 0)
                self.ingest(batch, target.name, now)
                self._freeze_if_grown()
            except Exception as exc:  # any input, any bug: this round is lost, the loop is not
                self._source_failed(target.name, exc, target.job, target.node,
                                    httpx.URL(target.url).netloc.decode())
            self._done(loop_name, budget)
            due += target.interval
            if due < time.monotonic():  # overran (slow target or starved loop): skip, keep the phase
                due += target.interval * ((time.monotonic() - due) // target.interval + 1)
            await self._sleep(due - time.monotonic())

    def _freeze_if_grown(self) -> None:
        # Series objects live for the whole run; left in the collector's generations they make every
        # full collection walk ~1M objects (measured: 0.6 s pauses on the loop at 52 750 series).
        # Freezing them once the store has grown keeps full collections to the short-lived objects.
        size = len(self.pipeline.store)
        if size > self._frozen_at:
            self._frozen_at = size
            gc.freeze()

    async def _prom_loop(self) -> None:
        cfg = self.config.prometheus
        assert cfg is not None
        last = self.clock.now() - cfg.lookback
        self._done("prometheus", cfg.interval + cfg.timeout)
        with httpx.Client() as client:
            while not self._stop.is_set():
                now = self.clock.now()
                ok = True
                for q in cfg.queries:
                    try:
                        batch = await asyncio.to_thread(prom_api.query_range, client, cfg.url, q, last, now,
                                                        cfg.step, cfg.chunk, cfg.timeout)
                        self.ingest(batch, "prometheus")
                    except Exception as exc:
                        ok = False
                        self._source_failed("prometheus", exc, "prometheus")
                if ok:
                    self.metrics.target_up.labels("prometheus").set(1)
                last = now + cfg.step
                self._done("prometheus", cfg.interval + cfg.timeout)
                await self._sleep(cfg.interval)

    def _jsonl_tail(self, j: Any) -> JsonlTail:
        if self._jsonl_offsets is None:  # read offsets survive restarts, next to the alert states
            self._jsonl_offsets = OffsetStore(self.config.state_db.with_name("jsonl-offsets.json"))
        tail = JsonlTail(j.path or "", j.node, offsets=self._jsonl_offsets, resolved_config=j.resolved_config)
        tail.liveness = RunLiveness(j.total_steps, j.down_after, j.down_after_steps,
                                    writer_open=lambda: writer_holds(tail.path))
        return tail

    async def _jsonl_loop(self, tail: JsonlTail, name: str, node: str | None, export: bool = False) -> None:
        if export and self._verl_export is None:
            self._verl_export = VerlSeriesExport()
            self.metrics.registry.register(self._verl_export)
        self._done(name, 1.0)
        while not self._stop.is_set():
            try:
                batch = tail.poll(self.clock.now())
                if export and self._verl_export is not None:
                    self._verl_export.update(batch.samples)
                self.ingest(batch, name)
                self.metrics.target_up.labels(name).set(1)
            except Exception as exc:
                self._source_failed(name, exc, "jsonl", node)
            self._done(name, 1.0)
            await self._sleep(1.0)
        tail.close()

    async def _dmon_file_loop(self, path: str, parser: DmonParser) -> None:
        offset = 0
        self._done(parser.source, 1.0)
        while not self._stop.is_set():
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    fh.seek(offset)
                    text = fh.read()
                    offset = fh.tell()
                self.ingest(parser.feed(text.splitlines(), self.clock.now()))
                self.metrics.target_up.labels(parser.source).set(1)
            except OSError:
                self.metrics.scrape_errors.labels(parser.source, "read_error").inc()
                self.metrics.target_up.labels(parser.source).set(0)
            except Exception as exc:
                self._source_failed(parser.source, exc, "dmon", parser.node)
            self._done(parser.source, 1.0)
            await self._sleep(1.0)

    async def _dmon_command_loop(self, command: list[str], parser: DmonParser) -> None:
        while not self._stop.is_set():
            try:
                proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                            stderr=asyncio.subprocess.DEVNULL)
            except OSError:
                self.metrics.scrape_errors.labels(parser.source, "command_failed").inc()
                await self._sleep(30.0)
                continue
            assert proc.stdout is not None
            try:
                while not self._stop.is_set():
                    line = await proc.stdout.readline()
                    if not line:
                        break
                    try:
                        self.ingest(parser.feed([line.decode(errors="replace")], self.clock.now()))
                    except Exception as exc:
                        self._source_failed(parser.source, exc, "dmon", parser.node)
                    self._done(parser.source, 5.0)
            except Exception as exc:  # e.g. a line longer than the stream limit: restart the command
                self._source_failed(parser.source, exc, "dmon", parser.node)
            finally:  # also on cancellation at shutdown: never leave nvidia-smi running
                if proc.returncode is None:
                    proc.terminate()
                    await asyncio.shield(proc.wait())
            await self._sleep(5.0)

    async def _nvml_loop(self) -> None:
        from monitor.sources.nvml import NvmlSampler

        if not NvmlSampler.available():
            log.info("nvml: no GPU visible; local NVML sampling off")
            return
        try:
            sampler = NvmlSampler()
        except Exception as exc:
            self._source_failed("nvml", exc, "nvml")
            return
        interval = self.config.nvml_interval
        self._done("nvml", interval)
        try:
            while not self._stop.is_set():
                try:
                    self.ingest(await asyncio.to_thread(sampler.poll, self.clock.now()), "nvml")
                    self.metrics.target_up.labels("nvml").set(1)
                except Exception as exc:
                    self._source_failed("nvml", exc, "nvml")
                self._done("nvml", interval)
                await self._sleep(interval)
        finally:
            with contextlib.suppress(Exception):
                sampler.close()

    async def _eval_loop(self) -> None:
        interval = self.config.eval_interval
        self._done("evaluation", max(interval, 1.0))
        while not self._stop.is_set():
            self.check_clock()
            with self.lock:
                try:
                    self.pipeline.tick()
                    now = self.clock.now()
                    if now - self._pruned_at >= 60.0:
                        self._pruned_at = now
                        self.pipeline.book.prune(now - self.config.retention)
                except Exception as exc:  # evaluation must go on; the error is logged with its cause
                    self.metrics.eval_failures.inc()
                    if self._eval_error is None:
                        log.exception("evaluation tick failed")
                    self._eval_error = f"{type(exc).__name__}: {str(exc)[:160]}"
                else:
                    self._eval_error = None
                    self._done("evaluation", max(interval, 1.0))  # a failed tick is not a completed one
            await self._sleep(interval)

    def check_clock(self) -> float | None:
        """Detect (log, count) a wall-clock step since the last evaluation; the step in seconds."""
        step = self.clock.check()
        if step is not None:
            self.metrics.clock_steps.inc()
            log.warning("wall clock stepped %+.1fs; the monitor keeps its own timeline (durations and for: "
                        "run on the monotonic clock, samples stamped by the stepped clock are re-anchored)", step)
        return step

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))

    async def run(self, ready: threading.Event | None = None) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self.api is None:
            self.api = self.listen()
        self.api.start()
        base = self.config.external_url or f"http://{self.config.host}:{self.api.port}"
        self.pipeline.set_base_url(base)  # plots and alert links are served by our API
        if self.config.plots_dir:  # links that work for people with a token set; notifiers read the files
            self.pipeline.plot_links = PlotLinks(self.config.plots_dir, f"{base.rstrip('/')}/api/v1/plots",
                                                 self.config.bearer_token)
            if self.engine is not None:
                self.engine.set_plot_store(self.pipeline.plot_links.read)
        log.info("verl-monitor listening on http://%s:%d", self.config.host, self.api.port)
        self.pipeline.plot_executor = self._plots = ThreadPoolExecutor(1, thread_name_prefix="monitor-plots")
        if self.engine is not None:
            self.engine.start_delivery()
        limits = httpx.Limits(max_connections=max(10, 3 * len(self.config.targets)))
        async with ScrapeClient(limits=limits) as client:  # scrapes on h11, the trainers' API on httpx
            tasks = [asyncio.create_task(self._scrape_loop(client, t)) for t in self.config.targets]
            if self._want_outliers:
                await self._refresh_outliers(client)  # bounded by each target's 2 s cap
                tasks.append(asyncio.create_task(self._outliers_loop(client)))
            if self.config.prometheus:
                tasks.append(asyncio.create_task(self._prom_loop()))
            for j in self.config.jsonl:
                tail = self._jsonl_tail(j)
                tasks.append(asyncio.create_task(
                    self._jsonl_loop(tail, f"jsonl:{tail.path.name}", j.node, j.export)))
            for i, dm in enumerate(self.config.dmon):
                parser = DmonParser(dm.node, f"dmon{i}")
                tasks.append(asyncio.create_task(
                    self._dmon_command_loop(dm.command, parser) if dm.command
                    else self._dmon_file_loop(dm.path or "", parser)))
            if self.config.nvml:
                tasks.append(asyncio.create_task(self._nvml_loop()))
            tasks.append(asyncio.create_task(self._eval_loop()))
            if ready is not None:
                ready.set()
            await self._stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.close()

    def stop(self) -> None:
        """Thread-safe: may be called from a signal handler, the API thread or a test."""
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._stop.set)
        else:
            self._stop.set()

    def close(self) -> None:
        if self.api is not None:
            self.api.stop()
            self.api = None
        plots = getattr(self, "_plots", None)
        if plots is not None:
            plots.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            if self.engine is not None:
                self.engine.close()
                self.engine = None
            self.pipeline.close()


def serve(config: MonitorConfig) -> int:
    setup_logging(logging.INFO)
    try:
        daemon = Daemon(config)
    except RuleError as exc:
        print(f"verl-monitor: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:
        print(f"verl-monitor: state_db {config.state_db}: cannot open ({exc}); {config.fix('state_db')} "
              "to a writable path", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__name__ == "ConfigError":  # alerting's config error, already one line
            print(f"verl-monitor: notify_config {config.notify_config}: {exc}", file=sys.stderr)
            return 2
        raise
    try:
        daemon.api = daemon.listen()
    except OSError as exc:
        print(f"verl-monitor: cannot listen on {config.host}:{config.port} ({exc.strerror}); "
              f"{config.fix('listen')} to a free port", file=sys.stderr)
        daemon.close()
        return 2

    def on_signal() -> None:
        daemon.stop()
        # Whatever is running (a hanging Prometheus query in a worker thread, a receiver mid-request),
        # the process is gone within 5 s of SIGTERM; SQLite (WAL) and the outbox are crash-safe.
        timer = threading.Timer(SHUTDOWN_S, _forced_exit)
        timer.daemon = True
        timer.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        await daemon.run()

    asyncio.run(main())
    return 0



def _forced_exit() -> None:
    log.warning("shutdown took longer than %.1fs; exiting now (state is in SQLite, nothing is lost)", SHUTDOWN_S)
    logging.shutdown()
    os._exit(0)
