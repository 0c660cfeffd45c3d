"""The monitor's timeline: wall time that never steps.

Durations, ``for:``, staleness and timeouts must not jump when NTP (or a person) steps the wall clock:
stepped back an hour, every new sample would look older than the last one and be refused for an hour
(``up`` included, so TrainerDown could not fire); stepped forward, every series would look stale at
once. ``SteadyClock`` wraps the injected clock: its ``now()`` is the wall time at start advanced by the
injected clock's ``monotonic()``, so it keeps the one clock interface (``alerting.clock.Clock``) and a
simulated clock passes through unchanged (its monotonic time is its time). ``check`` compares it with
the wall clock on every evaluation and reports a step once; ``reanchor`` moves samples that a source
stamped with the stepped wall clock (a JSONL trainer on the same host) onto the timeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from alerting.clock import Clock
from monitor.model import Sample

STEP_S = 5.0  # wall minus monotonic moving by more than this between two checks is a step, not drift


class SteadyClock:
    def __init__(self, inner: Clock, step_s: float = STEP_S) -> None:
        self.inner = inner
        self.step_s = step_s
        self._wall0 = inner.now()
        self._mono0 = inner.monotonic()
        self.offset = 0.0  # wall clock minus timeline, as of the last check (0 until the wall clock steps)

    def now(self) -> float:
        return self._wall0 + (self.inner.monotonic() - self._mono0)

    def monotonic(self) -> float:
        return self.inner.monotonic()

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)

    def check(self) -> float | None:
        """The wall clock's step since the last check in seconds (positive: forward), None when none."""
        offset = self.inner.now() - self.now()
        step = offset - self.offset
        if abs(step) <= self.step_s:
            return None
        self.offset = offset
        return step

    def reanchor(self, samples: Sequence[Sample]) -> Sequence[Sample]:
        """Samples stamped on the stepped wall clock, moved onto the timeline; others unchanged."""
        if abs(self.offset) <= self.step_s:
            return samples
        wall, steady = self.inner.now(), self.now()
        return [dataclasses.replace(s, t=s.t - self.offset) if abs(s.t - wall) < abs(s.t - steady) else s
                for s in samples]
