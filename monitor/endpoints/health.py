"""``/healthz``: is the monitor still seeing, evaluating, writing and delivering?

The daemon marks each loop's completed rounds in ``Progress``; ``report`` turns those marks and the
other stages' own health into the answer (503 with the reasons when any is non-empty).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

log = logging.getLogger("monitor.daemon")

STALE_LOOPS = 3          # a loop not completed for this many budgets degrades /healthz
STUCK_NOTIFICATION_S = 300.0


class Progress:
    """When each loop last completed a round, on the event loop's own (monotonic) time: a simulated
    clock moves alert time, not how long the process has really been stuck."""

    def __init__(self) -> None:
        self.marks: dict[str, tuple[float, float]] = {}  # loop -> (monotonic of last completion, budget)

    def done(self, loop: str, budget: float, at: float | None = None) -> None:
        """``at``: when the first round is due (a phase offset is no stall)."""
        self.marks[loop] = (time.monotonic() if at is None else at, budget)

    def stalled(self) -> list[str]:
        mono = time.monotonic()
        return [f"{name}: no completed round for {mono - last:.0f}s (interval {budget:g}s)"
                for name, (last, budget) in sorted(self.marks.items()) if mono - last > STALE_LOOPS * budget]


class SourceTroubles:
    """Which sources their last round left down, and why a source cannot read its input at all (a FIFO
    for a log path, Prometheus failing): /healthz names the latter; logged once when it starts or changes."""

    def __init__(self) -> None:
        self.problems: dict[str, str] = {}
        self.down: set[str] = set()

    def took(self, name: str, up: bool | None, problem: str | None) -> None:
        if up is not None:
            (self.down.discard if up else self.down.add)(name)
        if problem is None:
            if self.problems.pop(name, None) is not None:
                log.info("%s: reading again", name)
            return
        if self.problems.get(name) != problem:
            log.warning("%s: down: %s", name, problem)
        self.problems[name] = problem
        self.down.add(name)


def report(daemon: Any) -> dict[str, Any]:
    """``reasons`` is non-empty when a source or the evaluation loop has not completed for STALE_LOOPS
    budgets, a source cannot read its input at all (a FIFO for a log path, Prometheus failing; named), the last evaluation tick failed, a state write is failing, a delivery worker is stuck or
    died, or the oldest undelivered notification is over 5 min old. ``storage_events`` lists the last
    hour's recoveries (a corrupt database moved aside, a deleted state file recreated); ``sources_down``
    names every source whose last round left it down (a scraped trainer that is down is an alert, not a
    monitor failure: listed, not a reason)."""
    reasons = []
    if daemon.eval_error:
        reasons.append(f"evaluation: last tick failed ({daemon.eval_error})")
    reasons += daemon.storage.reasons()
    book, pipeline = daemon.pipeline.book, daemon.pipeline
    if book.held():
        reasons.append(f"{book.DB}: {book.held()} alert transition(s) held in memory, not yet written")
    reasons += daemon.progress.stalled()
    troubles = daemon.troubles
    reasons += [f"{name}: down ({why})" for name, why in sorted(troubles.problems.items())]
    engine = daemon.engine
    try:
        reasons += engine.problems() if engine is not None else []  # delivery, transitions not yet taken
    except (OSError, sqlite3.Error) as exc:
        reasons.append(f"alerting: state unreadable ({exc})")
    try:
        oldest = engine.oldest_undelivered() if engine is not None else None
    except (OSError, sqlite3.Error) as exc:
        oldest = None
        reasons.append(f"outbox: unreadable ({exc})")
    now = daemon.clock.now()
    if oldest is not None and now - oldest > STUCK_NOTIFICATION_S:
        reasons.append(f"outbox: oldest undelivered notification queued {now - oldest:.0f}s ago")
    return {"status": "degraded" if reasons else "ok", "reasons": reasons,
            "storage_events": daemon.storage.events(),
            "sources_down": sorted(troubles.down),
            "series": len(pipeline.store), "firing": len(book.firing()),
            "uptime_s": round(time.time() - daemon.started, 1)}
