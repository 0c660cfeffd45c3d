"""Delivery stage: take due outbox rows, respect each robot's send budget, render, send, and record
the outcome. When a receiver has more due notifications than its robot accepts right now, they are
folded into one digest message -- never dropped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from alerting.config import AlertingConfig
from alerting.metrics import AlertingMetrics
from alerting.model import Notification
from alerting.notifiers import Delivery, Notifier
from alerting.outbox import Outbox, OutboxRow
from alerting.ratelimit import RobotLimiter
from alerting.templates import render

log = logging.getLogger("verl.alerting")


class Dispatcher:
    def __init__(self, config: AlertingConfig, outbox: Outbox, notifiers: dict[str, Notifier],
                 metrics: AlertingMetrics, on_record: Callable[[dict[str, Any]], None]) -> None:
        self.config = config
        self.outbox = outbox
        self.notifiers = notifiers
        self.metrics = metrics
        self.on_record = on_record
        self.limiters: dict[str, RobotLimiter] = {}
        for n in notifiers.values():
            if n.limits and n.robot_id not in self.limiters:
                self.limiters[n.robot_id] = RobotLimiter(list(n.limits), n.throttle_s)

    def limiter(self, receiver: str) -> RobotLimiter | None:
        n = self.notifiers.get(receiver)
        return self.limiters.get(n.robot_id) if n else None

    def run(self, now: float) -> int:
        """Deliver what is due; returns the number of rows attempted."""
        attempted = 0
        heads = self.outbox.heads_due(now)
        by_receiver: dict[str, list[OutboxRow]] = {}
        for row in heads:
            by_receiver.setdefault(row.receiver, []).append(row)
        for receiver, rows in by_receiver.items():
            notifier = self.notifiers.get(receiver)
            if notifier is None:  # receiver removed from the config while rows were queued
                self._finish(rows, Delivery.permanent(f"receiver {receiver!r} is no longer configured"), now)
                attempted += len(rows)
                continue
            limiter = self.limiter(receiver)
            budget = limiter.available(now) if limiter else len(rows) + 1
            if budget <= 0:
                continue
            if limiter and len(rows) > budget:
                batch = [r for head in rows for r in self.outbox.group_rows(receiver, head.group_key)]
                self._deliver(notifier, batch, now, limiter, digest=True)
                attempted += len(batch)
                continue
            for row in rows:
                if limiter and limiter.available(now) < notifier.cost([row.notification], False):
                    break
                self._deliver(notifier, [row], now, limiter, digest=False)
                attempted += 1
        return attempted

    def _deliver(self, notifier: Notifier, rows: list[OutboxRow], now: float, limiter: RobotLimiter | None,
                 digest: bool) -> None:
        notes: list[Notification] = [r.notification for r in rows]
        cfg = notifier.cfg
        link = f"{self.config.monitor_url}/api/v1/alerts" if self.config.monitor_url else "verl-monitor /api/v1/alerts"
        rendered = render(notes, template=cfg.template, lang=cfg.lang, link=link, receiver=cfg.name,
                          max_bytes=notifier.max_bytes, runbook_base=self.config.runbook_base_url)
        if rendered.fell_back:
            self.metrics.template_failures.labels(cfg.name).inc()
            log.warning("receiver %s: template failed, used the built-in one: %s", cfg.name, rendered.error)
        if limiter:
            limiter.take(now, notifier.cost(notes, digest))
        try:
            result = notifier.send(rendered, notes, digest=digest)
        except Exception as exc:  # a notifier bug must not stop the monitor's loop; never retried blindly
            log.error("receiver %s: notifier crashed (%s)", cfg.name, type(exc).__name__)
            result = Delivery.permanent(f"{cfg.type} notifier error ({type(exc).__name__})")
        if digest and result.ok:
            self.metrics.digests.labels(cfg.name).inc()
        if result.rate_limited and limiter:
            limiter.overrun(now)
        self._finish(rows, result, now, digest=digest, limiter=limiter)

    def _finish(self, rows: list[OutboxRow], result: Delivery, now: float, digest: bool = False,
                limiter: RobotLimiter | None = None) -> None:
        receiver = rows[0].receiver
        if result.ok:
            self.outbox.delivered(rows)
            status = "delivered"
        elif result.retryable:
            not_before = limiter.next_free(now) if limiter and result.rate_limited else 0.0
            self.outbox.retry(rows, now, result.error, not_before)
            self.metrics.retries.labels(receiver).inc(len(rows))
            status = "failed"
        else:
            self.outbox.failed(rows, result.error)
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

    def next_due(self, now: float) -> float | None:
        """When the next delivery could happen: the outbox's retry times, held back by robot budgets."""
        heads = self.outbox.heads_due(float("inf"))
        times = []
        for row in heads:
            limiter = self.limiter(row.receiver)
            t = max(row.next_attempt_at, now)
            times.append(max(t, limiter.next_free(t)) if limiter else t)
        return min(times, default=None)
