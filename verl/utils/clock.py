"""Injected time for the trainer. Every stage asks a clock, never ``time.time()``, so tests and
benchmarks can run on simulated time.

A checked copy of ``alerting/clock.py``, the model of the project's one clock interface (``verl`` may not
import ``alerting``): ``tests/test_boundaries.py`` fails when the two differ in anything but their
module docstrings.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Unix seconds (for timestamps that leave the process)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for durations)."""

    def sleep(self, seconds: float) -> None:
        """Wait; a simulated clock advances instead."""


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class SimulatedClock:
    """A clock that moves only when told: ``set`` to a sample's timestamp, or ``advance``/``sleep``.
    Its monotonic time is its time (it never goes back)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        return self.now()

    def set(self, t: float) -> None:
        with self._lock:
            if t < self._now:
                raise ValueError(f"simulated clock cannot go back from {self._now} to {t}")
            self._now = float(t)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"simulated clock cannot go back by {seconds}")
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
