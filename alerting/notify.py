"""Notify stage, named as in Alertmanager (its ``notify`` pipeline: rate limits, retries, integrations):
take due outbox rows, respect each robot's send budget, render, send, and record
the outcome. When a receiver has more due notifications than its robot accepts right now, they are
folded into one digest message -- never dropped. ``DeliveryWorkers`` runs the sends: in line, or one
worker thread per receiver."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from time import monotonic as _monotonic
from typing import Any

from alerting.clock import Clock
from alerting.config import AlertingConfig
from alerting.durable import StorageUnavailable
from alerting.metrics import AlertingMetrics
from alerting.model import Notification
from alerting.notifiers import Delivery, Notifier
from alerting.notifiers.base import Rerender
from alerting.outbox import Outbox, OutboxRow
from alerting.ratelimit import RobotLimiter
from alerting.templates import Rendered, render
from alerting.templates.safe import DIALECTS

log = logging.getLogger("verl.alerting")


@dataclass
class Job:
    """One planned delivery: rows of one receiver, rendered, already charged to the robot's budget."""

    notifier: Notifier
    rows: list[OutboxRow]
    rendered: Rendered
    digest: bool
    limiter: RobotLimiter | None
    rerender: Rerender | None = None  # the same message at a smaller text budget (fitting, "too long")


class NotifyStage:
    def __init__(self, config: AlertingConfig, outbox: Outbox, notifiers: dict[str, Notifier],
                 metrics: AlertingMetrics, on_record: Callable[[dict[str, Any]], None]) -> None:
        self.config = config
        self.outbox = outbox
        self.notifiers = notifiers
        self.metrics = metrics
        self.on_record = on_record
        self.limiters: dict[str, RobotLimiter] = {}
        # Rows sent whose outcome is not committed yet (its write failed): never planned again meanwhile,
        # so a full disk cannot turn one delivered message into a resend every second.
        self.held: set[int] = set()
        for n in notifiers.values():
            if n.limits and n.robot_id not in self.limiters:
                self.limiters[n.robot_id] = RobotLimiter(list(n.limits), n.throttle_s)

    def limiter(self, receiver: str) -> RobotLimiter | None:
        n = self.notifiers.get(receiver)
        return self.limiters.get(n.robot_id) if n else None

    def plan(self, now: float, receiver: str | None = None) -> list[Job]:
        """The deliveries due now, rendered and charged to their robot's budget. Rows of receivers that
        no longer exist are failed here (no HTTP)."""
        jobs: list[Job] = []
        by_receiver: dict[str, list[OutboxRow]] = {}
        for row in self.outbox.heads_due(now, receiver):
            if row.id in self.held:
                continue  # its group waits behind it, in order
            by_receiver.setdefault(row.receiver, []).append(row)
        for name, rows in by_receiver.items():
            notifier = self.notifiers.get(name)
            if notifier is None:  # receiver removed from the config while rows were queued
                self._finish(rows, Delivery.permanent(f"receiver {name!r} is no longer configured"), now)
                continue
            limiter = self.limiter(name)
            budget = limiter.available(now) if limiter else len(rows) + 1
            if budget <= 0:
                continue
            if limiter and len(rows) > budget:
                batch = [r for head in rows for r in self.outbox.group_rows(name, head.group_key)]
                jobs.append(self._prepare(notifier, batch, now, limiter, digest=True))
                continue
            for row in rows:
                if limiter and limiter.available(now) < notifier.cost([row.notification], False):
                    break
                jobs.append(self._prepare(notifier, [row], now, limiter, digest=False))
        return jobs

    def _prepare(self, notifier: Notifier, rows: list[OutboxRow], now: float, limiter: RobotLimiter | None,
                 digest: bool) -> Job:
        notes: list[Notification] = [r.notification for r in rows]
        cfg = notifier.cfg
        link = f"{self.config.monitor_url}/api/v1/alerts" if self.config.monitor_url else "verl-monitor /api/v1/alerts"

        def rerender(max_bytes: int) -> Rendered:
            return render(notes, template=cfg.template, lang=cfg.lang, link=link, receiver=cfg.name,
                          max_bytes=max_bytes, runbook_base=self.config.runbook_base_url,
                          dialect=notifier.kind if notifier.kind in DIALECTS else "plain",
                          link_hosts=self.config.link_hosts, console=self.config.monitor_url)

        rendered = notifier.fit(rerender(notifier.max_bytes), notes, digest, rerender)
        if rendered.fell_back:
            self.metrics.template_failures.labels(cfg.name).inc()
            log.warning("receiver %s: template failed, used the built-in one: %s", cfg.name, rendered.error)
        if limiter:
            limiter.spend(now, notifier.cost(notes, digest))
        return Job(notifier, rows, rendered, digest, limiter, rerender)

    def send(self, job: Job) -> Delivery:
        """The HTTP call; touches no shared state, so it runs without the engine's lock."""
        try:
            return job.notifier.deliver(job.rendered, [r.notification for r in job.rows], job.digest, job.rerender)
        except Exception as exc:  # a notifier bug must not stop the monitor's loop; never retried blindly
            log.error("receiver %s: notifier crashed (%s)", job.notifier.cfg.name, type(exc).__name__)
            return Delivery.permanent(f"{job.notifier.cfg.type} notifier error ({type(exc).__name__})")

    def finish(self, job: Job, result: Delivery, now: float) -> None:
        self.write_outcome(job, result, now)
        self.report(job, result)

    def write_outcome(self, job: Job, result: Delivery, now: float) -> None:
        """The outcome's rows (and the robot budget it used); database only, safe to run again."""
        if result.rate_limited and job.limiter:
            job.limiter.overrun(now)
        rows = job.rows
        if result.ok:
            self.outbox.delivered(rows)
        elif result.retryable:
            limiter = job.limiter
            not_before = limiter.next_free(now) if limiter and result.rate_limited else 0.0
            self.outbox.retry(rows, now, result.error, not_before)
        else:
            self.outbox.failed(rows, result.error)

    def report(self, job: Job, result: Delivery) -> None:
        """Metrics, log and records of an outcome, once it is committed."""
        if job.digest and result.ok:
            self.metrics.digests.labels(job.notifier.cfg.name).inc()
        self._report(job.rows, result, digest=job.digest)

    def _finish(self, rows: list[OutboxRow], result: Delivery, now: float) -> None:
        """Outcome without a send (receiver gone): written and reported at once."""
        self.outbox.failed(rows, result.error)
        self._report(rows, result)

    def _report(self, rows: list[OutboxRow], result: Delivery, digest: bool = False) -> None:
        receiver = rows[0].receiver
        if result.ok:
            status = "delivered"
            if result.error:  # delivered, with a part lost (a plot): say so once, not silently
                log.warning("receiver %s: delivered, but %s", receiver, result.error)
        elif result.retryable:
            self.metrics.retries.labels(receiver).inc(len(rows))
            status = "failed"
        else:
            log.error("receiver %s: notification failed permanently: %s", receiver, result.error)
            status = "failed"
        for row in rows:
            self.metrics.notifications.labels(receiver, status).inc()
            rec: dict[str, Any] = {"kind": "notification", "receiver": receiver, "status": status,
                                   "fingerprints": list(row.notification.fingerprints),
                                   "attempts": row.attempts + 1, "group": row.group_key,
                                   "notification_status": row.notification.status}
            if digest:
                rec["digest"] = True
            if result.error:
                rec["error"] = result.error
            if status == "failed":
                rec["retry"] = result.retryable
            self.on_record(rec)

    def next_due(self, now: float, receiver: str | None = None) -> float | None:
        """When the next delivery could happen: the outbox's retry times, held back by robot budgets."""
        heads = self.outbox.heads_due(float("inf"), receiver)
        times = []
        for row in heads:
            limiter = self.limiter(row.receiver)
            t = max(row.next_attempt_at, now)
            times.append(max(t, limiter.next_free(t)) if limiter else t)
        return min(times, default=None)


Transaction = Callable[[str], AbstractContextManager[None]]  # the engine's commit: op name -> context


class DeliveryWorkers:
    """Commit the attempt, send, commit the outcome -- in line (``deliver``, simulated time) or, once
    ``start`` ran (the daemon), in one worker thread per receiver (Alertmanager's notify stage), making
    HTTP calls without holding the engine's lock. A hanging robot then delays only its own messages. A
    row is marked delivered only after its robot answered, so a kill -9 re-sends at most the message
    that was in flight (at-least-once).

    ``commit(op)`` is the engine's transaction (no in-memory reload on failure: an attempt or outcome
    changes only the outbox rows); ``save_limiters`` writes the robots' budgets inside it."""

    def __init__(self, stage: NotifyStage, lock: threading.RLock, commit: Transaction, clock: Clock,
                 save_limiters: Callable[[], None], db_name: str) -> None:
        self.stage = stage
        self.lock = lock
        self.commit = commit
        self.clock = clock
        self.save_limiters = save_limiters
        self.db_name = db_name
        # Outcomes of messages already sent whose write failed: committed on the next chance, in order.
        self.held_outcomes: list[tuple[Job, Delivery, float]] = []
        self._beats: dict[str, float] = {}  # worker -> monotonic time of its last completed round
        self._workers: dict[str, threading.Thread] = {}
        self._wake: dict[str, threading.Event] = {}
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        return bool(self._workers)

    def wake(self) -> None:
        """New rows in the outbox: the workers plan at once instead of at their next round."""
        for wake in list(self._wake.values()):
            wake.set()

    def deliver(self, jobs: list[Job], worker: bool = False) -> bool:
        """Send ``jobs``. An attempt that cannot be recorded is not sent; an outcome that cannot be
        recorded is held in memory (its rows are not planned again) and written when the disk takes it.
        A worker stops between jobs when asked to. True when every job was sent and recorded (a worker
        then plans again at once; otherwise it waits its round, so a full disk is not retried in a
        tight loop)."""
        if not self.write_outcomes():
            return False
        for job in jobs:
            if worker and self._stopping.is_set():
                return False
            try:
                with self.lock, self.commit("claim"):
                    self.stage.outbox.claim(job.rows)
            except StorageUnavailable:
                return False
            result = self.stage.send(job)  # no lock held by a worker: only this receiver waits
            with self.lock:
                self.held_outcomes.append((job, result, self.clock.now()))
                self.stage.held.update(r.id for r in job.rows)
            if not self.write_outcomes():
                return False
        return True

    def write_outcomes(self) -> bool:
        """Commit the held outcomes; True when none is left."""
        with self.lock:
            todo = list(self.held_outcomes)
            if not todo:
                return True
            try:
                with self.commit("outcome"):
                    for job, result, at in todo:
                        self.stage.write_outcome(job, result, at)
                    self.save_limiters()  # an outcome changes only the outbox row and the budgets
            except StorageUnavailable:
                return False
            del self.held_outcomes[:len(todo)]
            for job, result, _ in todo:
                self.stage.held.difference_update(r.id for r in job.rows)
                self.stage.report(job, result)
            self.stage.metrics.outbox_depth.set(self.stage.outbox.depth())
            return not self.held_outcomes

    def start(self) -> None:
        """One delivery thread per receiver from now on."""
        with self.lock:
            if self._workers:
                return
            self._stopping.clear()
            for name in self.stage.notifiers:
                self._wake[name] = threading.Event()
                self._workers[name] = threading.Thread(target=self._loop, args=(name,),
                                                       name=f"deliver-{name}", daemon=True)
            for t in self._workers.values():
                t.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Ask the workers to stop and wait up to ``timeout`` in total; a worker stuck in a hanging HTTP
        call is left behind (a daemon thread): its row stays pending and is sent again later."""
        self._stopping.set()
        self.wake()
        deadline = _monotonic() + timeout
        for t in self._workers.values():
            t.join(max(0.0, deadline - _monotonic()))
        with self.lock:
            self._workers, self._wake = {}, {}
            self._beats = {}

    def problems(self, stuck_after_s: float = 120.0) -> list[str]:
        """/healthz reasons: a worker that died or has not finished a round for ``stuck_after_s``
        (longer than any receiver's timeout plus its retries within one round)."""
        out = []
        mono = _monotonic()
        for name, t in list(self._workers.items()):
            if not t.is_alive() and not self._stopping.is_set():
                out.append(f"delivery worker {name}: stopped")
            elif mono - self._beats.get(name, mono) > stuck_after_s:
                out.append(f"delivery worker {name}: stuck, no round finished for {mono - self._beats[name]:.0f}s")
        if self.held_outcomes:
            out.append(f"{self.db_name}: {len(self.held_outcomes)} delivery outcome(s) held in memory, not yet written")
        return out

    def _loop(self, receiver: str) -> None:
        wake = self._wake[receiver]
        failed_before = False
        while not self._stopping.is_set():
            wait = 1.0
            self._beats[receiver] = _monotonic()
            try:
                with self.lock:
                    jobs = self.stage.plan(self.clock.now(), receiver)
                sent = self.deliver(jobs, worker=True)
                if sent and jobs:
                    continue
                if sent:  # a write that failed waits out the round (1 s): no tight loop on a full disk
                    with self.lock:
                        now = self.clock.now()
                        nxt = self.stage.next_due(now, receiver)
                    if nxt is not None:
                        wait = min(1.0, max(0.01, nxt - now))
                failed_before = False
            except Exception as exc:  # the worker must outlive any one failure (e.g. a locked database)
                if self._stopping.is_set():
                    return
                if not failed_before:
                    log.error("receiver %s: delivery worker error (%s: %s); retrying", receiver,
                              type(exc).__name__, str(exc)[:200])
                failed_before = True
            wake.wait(wait)
            wake.clear()
