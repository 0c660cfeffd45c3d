"""Liveness: a timestamp-valued gauge that stopped moving, or a series that stopped arriving."""

from __future__ import annotations

import math

from monitor.detectors.base import Detector, Finding


class ValueAgeDetector(Detector):
    """The series' *value* is a Unix timestamp (heartbeat, last checkpoint); active when
    ``t - value > max_age``. Samples keep arriving (the process answers) but the loop is stuck.
    A value <= 0 means "never happened yet" (exporters initialise such gauges to 0): the age then
    counts from the first sample this detector saw, i.e. "no heartbeat/checkpoint since we started
    watching".

    Tested by tests/monitor/test_monitor_detectors.py::test_value_age.
    """

    def __init__(self, max_age: float = 300.0) -> None:
        self.max_age = max_age
        self._first: float | None = None

    def update(self, t: float, value: float) -> Finding:
        if self._first is None:
            self._first = t
        age = t - (value if value > 0 else self._first)
        hit = age > self.max_age
        return Finding(t, hit, 1.0 if hit else 0.0, {"age_s": age, "value": age})

    def reset(self) -> None:
        self._first = None


class StalenessDetector(Detector):
    """No sample for ``max_gap`` seconds. Evaluated on the clock (``tick``), not only on samples,
    because the point is that samples stopped. Tested by test_monitor_detectors.py::test_staleness_tick.
    """

    ticks = True

    def __init__(self, max_gap: float = 120.0) -> None:
        self.max_gap = max_gap
        self._last = -math.inf

    def update(self, t: float, value: float) -> Finding:
        self._last = t
        return Finding(t, False, 0.0, {"gap_s": 0.0})

    def tick(self, now: float) -> Finding:
        gap = now - self._last
        hit = math.isfinite(gap) and gap > self.max_gap
        return Finding(now, hit, 1.0 if hit else 0.0, {"gap_s": gap, "value": gap})

    def reset(self) -> None:
        self._last = -math.inf
