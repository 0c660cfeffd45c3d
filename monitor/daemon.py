"""``verl-monitor run``: the daemon only schedules. One asyncio loop (thread ``scrape-loop``) runs a task
per source (``monitor/sources/base.py``: scrapes run concurrently, a hanging target only waits out its own
timeout); the evaluation tick runs on a thread of its own (``evaluation``, as Prometheus' rule manager runs
beside its scrape loops), so the book's SQLite commit is never made on the thread that scrapes; the listener
(``monitor/endpoints/listener.py``) has its own thread; ``lock`` serialises the pipeline. Never blind, for
every source here: a round that raises is counted in ``verl_monitor_scrape_errors_total{target,reason}``,
logged once a minute per (target, reason), sets the source's ``up`` to 0, and the next round runs on
schedule (rounds overrun are skipped, the phase kept). Nothing slow runs in the tick: notifications go to
the engine's delivery workers, plots render in a worker process, reward outliers come from their own source.
``/healthz`` (``monitor/endpoints/health.py``) answers 503 naming the reason when a loop stopped completing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from alerting.clock import Clock, SystemClock
from alerting.durable import StorageHealth
from alerting.model import Alert
from alerting.sink import AlertSink
from monitor import heartbeat
from monitor.book import alerting_stage
from monitor.config import MonitorConfig
from monitor.console import ConsolePrinter
from monitor.endpoints import health, listener
from monitor.endpoints.api import MonitorAPI, alert_states
from monitor.endpoints.metrics import MonitorMetrics
from monitor.endpoints.targets import SourceBoard
from monitor.evaluation.rules import load_rule_files
from monitor.intake import Intake
from monitor.model import SourceBatch
from monitor.pipeline import Pipeline
from monitor.sources.base import Round, Source
from monitor.sources.configured import build_sources
from monitor.sources.scrape import ScrapeSource
from monitor.sources.scrape_http import ScrapeClient
from monitor.timeline import SteadyClock

log = logging.getLogger("monitor.daemon")


class Daemon:
    def __init__(self, config: MonitorConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = SteadyClock(clock or SystemClock())  # wall-clock steps are absorbed (timeline.py)
        self.metrics = MonitorMetrics()
        self.storage = StorageHealth()
        self.metrics.export_storage_errors(self.storage.error_counts)
        self.liveness = heartbeat.LivenessMetrics(self.metrics.registry, config.replica, config.cluster)
        self.eval_error: str | None = None
        self.lock = threading.RLock()
        rules = load_rule_files(config.rules or None)
        config.state_db.parent.mkdir(parents=True, exist_ok=True)
        self.engine: AlertSink | None = alerting_stage.build_engine(config, self.clock, self.metrics, self.storage)
        outliers = alerting_stage.reward_outliers(config)
        self.pipeline = Pipeline(rules, self.clock, cluster=config.cluster, db_path=config.state_db,
                                 plots_dir=config.plots_dir, plot_prefix=None, metrics=self.metrics,
                                 engine=self.engine, outliers=outliers, plots_in_child=True,
                                 limits=config.limits, on_record=ConsolePrinter() if config.prints_alerts else None,
                                 health=self.storage)
        self._want_outliers = config.reward_outliers and any(r.alert == "RewardDistributionDrift" for r in rules)
        # target name -> its top prompt lines, filled from the outliers source; the annotate stage reads the same value
        self._outliers: dict[str, list[str]] = outliers.lines if outliers is not None else {}
        self.api: MonitorAPI | None = None
        self._stop = asyncio.Event()
        self._fresh = threading.Event()  # samples ingested since the last evaluation tick (or: stop evaluating)
        self.started = time.time()
        self._frozen_at = 0
        self.progress = health.Progress()
        self._pruned_at = -float("inf")
        self.intake = Intake(self.pipeline, self.metrics, self.clock, self.lock)
        self.troubles = health.SourceTroubles()  # sources down, and why one cannot read its input (/healthz)
        self.sources = SourceBoard()  # what /targets shows

    def listen(self) -> MonitorAPI:
        """Bind the HTTP listener (OSError when the port is taken)."""
        return listener.listen(self, self.config.host, self.config.port, self.config.bearer_token)

    def health(self) -> dict[str, Any]:
        return health.report(self)

    def alerts(self) -> list[dict[str, Any]]:
        return alert_states(self.pipeline.book.firing(), self.pipeline.book.pending(), self.engine)

    def submit_external(self, alerts: list[Alert]) -> int:
        with self.lock:
            return len(self.pipeline.submit_external(alerts))

    def ingest(self, batch: SourceBatch, target: str | None = None, seen: float | None = None) -> None:
        """``seen``: the scrape's time, for scraped batches (liveness from the scrape, not the stamps)."""
        self.intake.ingest(batch, target, seen)

    # -- the one source loop -----------------------------------------------------------------------

    def _file_round(self, src: Source, got: Round) -> None:
        """File one round's results: its batches ingested, its failures counted, its gauges set."""
        self.pipeline.verl_nodes |= got.verl_nodes  # before ingest: new series of those nodes speak verl
        for name in got.gone:  # a target taken out of service discovery is gone, not down
            with self.lock:
                self.pipeline.forget_source(name)
        for p in got.polled:
            self.ingest(p.batch, p.source, p.seen)
        if got.polled:
            self._fresh.set()
        for prompts in got.top_prompts:
            self._outliers[prompts.target] = list(prompts.lines)
        for exc in got.failures:
            self.intake.mark_down(src.metric, exc, src.down)
        if got.duration is not None:
            self.metrics.scrape_duration.labels(src.metric).set(got.duration)
        if got.up is not None:
            self.metrics.target_up.labels(src.metric).set(1 if got.up else 0)
        self.troubles.took(src.name, got.up, got.problem)
        self.sources.took(src, got)

    async def _run_source(self, src: Source) -> None:
        # rounds are due on the event loop's monotonic time (what asyncio sleeps on), samples on self.clock
        due = time.monotonic() + src.offset
        self.progress.done(src.name, src.budget, at=due)
        try:
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # run() cancels the tasks to stop them
            while not self._stop.is_set():
                try:
                    self._file_round(src, await src.poll(self.clock))
                    self._freeze_if_grown()
                except Exception as exc:  # any input, any bug: this round is lost, the loop is not
                    self.intake.mark_down(src.metric, exc, src.down)
                    self.troubles.took(src.name, False, f"round failed ({type(exc).__name__}: {str(exc)[:160]})")
                    self.sources.failed(src, exc)
                self.progress.done(src.name, src.budget)
                mono = time.monotonic()
                due = mono + src.interval if src.wait_after else due + src.interval
                if due < mono:  # overran (slow target or starved loop): skip, keep the phase
                    due += src.interval * ((mono - due) // src.interval + 1)
                await asyncio.sleep(max(0.0, due - mono))
        finally:
            await src.close()

    def _freeze_if_grown(self) -> None:
        # Series objects live for the whole run; left in the collector's generations they make every
        # full collection walk ~1M objects (measured: 0.6 s pauses on the loop at 52 750 series).
        # Freezing them once the store has grown keeps full collections to the short-lived objects.
        # Collected first: a cycle that is garbage when frozen would never be freed (an exception's
        # traceback holding a scrape's parsed batch, say). The walk covers only what is not frozen yet.
        size = len(self.pipeline.store)
        if size > self._frozen_at:
            self._frozen_at = size
            gc.collect()
            gc.freeze()

    def _eval_loop(self, stop: threading.Event) -> None:
        """The evaluation thread's loop until ``stop`` is set (then ``_fresh`` too, to wake it)."""
        interval = self.config.eval_interval
        self.progress.done("evaluation", max(interval, 1.0))
        while not stop.is_set():
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
                    if self.eval_error is None:
                        log.exception("evaluation tick failed")
                    self.eval_error = f"{type(exc).__name__}: {str(exc)[:160]}"
                else:
                    self.eval_error = None
                    self.progress.done("evaluation", max(interval, 1.0))  # a failed tick is not a completed one
                    self.liveness.beat(time.time())  # wall time: Prometheus compares it with its own time()
            # The next tick comes `interval` after this one at the latest, sooner once new samples have arrived,
            # never within a fifth of it: a fixed wait made every sample wait up to a whole interval (eval-lag
            # p99 >= interval), while ticking on every ingest would run 50 ticks/s for 250 targets over 5 s.
            self._fresh.clear()
            if not stop.wait(interval / 5) and not self._fresh.is_set():
                self._fresh.wait(interval * 4 / 5)

    def check_clock(self) -> float | None:
        """Detect (log, count) a wall-clock step since the last evaluation; the step in seconds."""
        step = self.clock.check()
        if step is not None:
            self.metrics.clock_steps.inc()
            log.warning("wall clock stepped %+.1fs; the monitor keeps its own timeline (durations and for: "
                        "run on the monotonic clock, samples stamped by the stepped clock are re-anchored)", step)
        return step

    async def run(self, ready: threading.Event | None = None) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self.api is None:
            self.api = self.listen()
        self.api.start()
        base = self.config.external_url or f"http://{self.config.host}:{self.api.port}"
        log.info("verl-monitor: console and API on http://%s:%d/", self.config.host, self.api.port)
        self.pipeline.annotator.plot_executor = self._plots = ThreadPoolExecutor(1, thread_name_prefix="monitor-plots")
        alerting_stage.start(self.pipeline, self.engine, self.config, base)
        limits = httpx.Limits(max_connections=max(10, 3 * len(self.config.targets)))
        async with ScrapeClient(limits=limits) as client:  # scrapes on h11, the trainers' API on httpx
            sources = build_sources(self.config, client, self.metrics.registry, self._want_outliers)
            self.intake.caches.update((s.metric, s.target.cache) for s in sources if isinstance(s, ScrapeSource))
            for s in sources:
                self.sources.add(s)
            tasks = [asyncio.create_task(self._run_source(s)) for s in sources]
            tasks += heartbeat.pinger_tasks(self.config.heartbeat, self.progress, self._stop)
            evaluating = threading.Event()  # set: the evaluation thread ends after its tick
            evaluation = threading.Thread(target=self._eval_loop, args=(evaluating,), name="evaluation", daemon=True)
            evaluation.start()
            if ready is not None:
                ready.set()
            try:
                await self._stop.wait()
            finally:  # stopped or cancelled: evaluation ends before close() takes the pipeline down
                evaluating.set()
                self._fresh.set()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                evaluation.join()
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
