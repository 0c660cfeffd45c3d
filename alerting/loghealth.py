"""What the engine says about the transition log it follows: a log that disagrees with the engine's cursor
(restored from an older copy, pruned, reset) and rows that do not parse are logged, counted and listed by
/healthz for an hour (``StorageHealth.note``), as a database moved aside is; and whether the engine is
stuck behind the log (``lag``)."""

from __future__ import annotations

from typing import Any, Protocol

LOG_NAME = "transition log"  # how /healthz and the log name the log the engine follows
# The follower reads the log at each commit and at least every second (its timer thread); rows waiting while
# no read has run for this long mean it is stuck.
STUCK_AFTER_S = 30.0


class FollowedLog(Protocol):
    bad_rows: int
    bad_row: str


class TransitionLogHealth:
    def __init__(self, counter: Any, health: Any) -> None:
        self.counter = counter  # verl_alerting_transition_log_problems{kind}
        self.health = health
        self.bad_rows_noted = 0
        self._read_at: float | None = None  # when the follower last read the log (engine clock, monotonic)

    def follow(self, log: FollowedLog) -> None:
        """Rows the log skipped before the engine followed it were noted by whoever read them then."""
        self.bad_rows_noted = log.bad_rows

    def problem(self, text: str, kind: str = "rewound") -> None:
        self.counter.labels(kind).inc()
        self.health.note(LOG_NAME, text)

    def note_bad_rows(self, log: FollowedLog) -> None:
        bad = log.bad_rows
        if bad != self.bad_rows_noted:
            self.counter.labels("bad_row").inc(max(0, bad - self.bad_rows_noted))
            self.bad_rows_noted = bad
            self.health.note(LOG_NAME, f"{log.bad_row} ({bad} unreadable row(s) since start); the "
                                       "transitions around it are taken")

    def read(self, now: float) -> None:
        self._read_at = now

    def lag(self, behind: int, now: float, writes_failing: bool) -> list[str]:
        """/healthz's reason when the engine is stuck behind the log: ``behind`` transitions committed and
        not taken while its own writes fail, or while no read has run for ``STUCK_AFTER_S``. A row committed
        a moment ago and not read yet is the normal hand-over (/healthz once said 503 for an alert on its
        way), and so is a resolve held back until its firing's page has flushed."""
        if self._read_at is None:
            self._read_at = now  # not started reading yet: the grace starts now
        if behind and (writes_failing or now - self._read_at >= STUCK_AFTER_S):
            return [f"alerting: {behind} alert transition(s) in the log not yet taken"]
        return []
