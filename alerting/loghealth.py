"""What the engine says about the transition log it follows: a log that disagrees with the engine's cursor
(restored from an older copy, pruned, reset) and rows that do not parse are logged, counted and listed by
/healthz for an hour (``StorageHealth.note``), as a database moved aside is."""

from __future__ import annotations

from typing import Any, Protocol

LOG_NAME = "transition log"  # how /healthz and the log name the log the engine follows


class FollowedLog(Protocol):
    bad_rows: int
    bad_row: str


class TransitionLogHealth:
    def __init__(self, counter: Any, health: Any) -> None:
        self.counter = counter  # verl_alerting_transition_log_problems{kind}
        self.health = health
        self.bad_rows_noted = 0

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
