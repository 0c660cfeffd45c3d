"""The contract every detector keeps (ruptures-style small estimators, but streaming).

A detector sees one series, one sample at a time, in time order, on the injected clock (``t`` are the
samples' own timestamps, so replay and benchmarks run on simulated time). It never reads wall time,
never looks ahead, and keeps bounded state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
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
    window now and then (drift, leak, KS). Times and values live in two flat deques: ``np.fromiter`` on
    them is ~5x faster than on one deque of (t, v) tuples."""

    def __init__(self, span: float, maxlen: int | None = None) -> None:
        self.span = span
        self.ts: deque[float] = deque(maxlen=maxlen)
        self.vs: deque[float] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, t: float, value: float) -> None:
        self.ts.append(t)
        self.vs.append(value)
        while self.ts[0] < t - self.span:
            self.ts.popleft()
            self.vs.popleft()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.ts)
        return np.fromiter(self.ts, float, n), np.fromiter(self.vs, float, n)


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
