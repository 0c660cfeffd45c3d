"""The contract every detector keeps (ruptures-style small estimators, but streaming).

A detector sees one series, one sample at a time, in time order, on the injected clock (``t`` are the
samples' own timestamps, so replay and benchmarks run on simulated time). It never reads wall time,
never looks ahead, and keeps bounded state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Finding:
    """What a detector says about its series after the sample at ``t``.

    ``active``: the condition holds now (rules apply their own ``for`` durations on top).
    ``score``: strength in [0, 1] — an anomaly likelihood, 1 - p-value, or 1.0/0.0 for plain conditions.
    ``details``: the test's numbers for summaries and plots (p_value, slope_per_s, before, after, ...).
    """

    t: float
    active: bool
    score: float = 0.0
    details: dict[str, float] = field(default_factory=dict)


class Detector(ABC):
    """Streaming detector over one series."""

    @abstractmethod
    def update(self, t: float, value: float) -> Finding:
        """Consume one sample (non-finite values are the caller's to count and skip)."""

    def reset(self) -> None:  # noqa: B027 - optional hook; stateless detectors need no reset
        """Forget all state (a series restarted, e.g. a counter reset)."""

    def unfillable(self, interval: float) -> str | None:
        """Why this detector's windows cannot hold its minimum sample counts at one sample per ``interval``
        seconds (None: they can). A windowed test that never fills never speaks: the evaluator says so."""
        return None


def short_window(name: str, span: float, interval: float, need: int) -> str | None:
    """The ``unfillable`` text for one window: ``span`` seconds hold ``span / interval`` samples."""
    held = span / interval if interval > 0 else float("inf")
    return None if held >= need else f"{name} {span:.0f} s holds {held:.1f} samples at one per {interval:.0f} s, needs {need}"


class SampleWindow:
    """The samples of the last ``span`` seconds (at most ``maxlen``), for the detectors that test a
    window now and then (drift, leak, KS). Times and values live in one (2, n) float64 array used as a
    sliding buffer: 16 B a sample where two deques of Python floats took ~40, and ``arrays`` is a slice
    copy, not an iteration. When the buffer's end is reached the live part moves to its front, and the
    buffer doubles only if that part fills more than half of it: its size follows the window's count."""

    __slots__ = ("span", "maxlen", "_tv", "_lo", "_hi")

    def __init__(self, span: float, maxlen: int | None = None) -> None:
        self.span = span
        self.maxlen = maxlen
        self._tv = np.empty((2, 16))
        self._lo = self._hi = 0

    def __len__(self) -> int:
        return self._hi - self._lo

    @property
    def ts(self) -> np.ndarray:
        """The times, oldest first (a view)."""
        return self._tv[0, self._lo: self._hi]

    def add(self, t: float, value: float) -> None:
        tv, lo, hi = self._tv, self._lo, self._hi
        if hi == tv.shape[1]:
            n = hi - lo
            size = tv.shape[1] * 2 if 2 * n > tv.shape[1] else tv.shape[1]
            moved = np.empty((2, size)) if size != tv.shape[1] else tv
            moved[:, :n] = tv[:, lo:hi]
            self._tv, tv, lo, hi = moved, moved, 0, n
        tv[0, hi] = t
        tv[1, hi] = value
        hi += 1
        if self.maxlen is not None and hi - lo > self.maxlen:
            lo += 1
        times = tv[0]
        while times[lo] < t - self.span:
            lo += 1
        self._lo, self._hi = lo, hi

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._tv[0, self._lo: self._hi].copy(), self._tv[1, self._lo: self._hi].copy()


class Every:
    """Throttle on sample time: ``due(t)`` is true at most once per ``seconds`` (the first call always).
    Between evaluations a detector repeats its last finding; the evaluator takes the sample time from
    the sample, not from the finding."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = -np.inf

    def due(self, t: float) -> bool:
        if t < self._next:
            return False
        self._next = t + self.seconds
        return True
