"""The contract every detector keeps (ruptures-style small estimators, but streaming).

A detector sees one series, one sample at a time, in time order, on the injected clock (``t`` are the
samples' own timestamps, so replay and benchmarks run on simulated time). It never reads wall time,
never looks ahead, and keeps bounded state.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)  # one made per sample per binding: no instance dict
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
    """Streaming detector over one series. The detectors bound per series (thousands at 1000 GPUs)
    declare ``__slots__``: no instance dict beside their few fields."""

    __slots__ = ()
    # an absence detector is ticked and fed the scrape's time (``staleness.py``); read per sample, so a
    # class attribute here rather than a missed lookup on each of the ~22 000 bindings at 1000 GPUs
    ticks = False
    # samples of its series' ring it reads back (``cadence.CadenceScaled.replay_from``): the evaluator
    # reserves them and hands the series over at binding time (0: it reads none)
    history_samples = 0

    @abstractmethod
    def update(self, t: float, value: float) -> Finding:
        """Consume one sample (non-finite values are the caller's to count and skip)."""

    def quiet(self, t: float, value: float) -> bool:
        """True where ``update(t, value)`` would change none of this detector's state and return an inactive
        finding: the evaluator then skips the call (nothing reads an inactive finding). False: call
        ``update``. Only a detector that can tell it in less than an update costs overrides it."""
        return False

    def reset(self) -> None:  # noqa: B027 - optional hook; stateless detectors need no reset
        """Forget all state (a series restarted, e.g. a counter reset)."""

    def unfillable(self, interval: float) -> str | None:
        """Why this detector's windows cannot hold its minimum sample counts at one sample per ``interval``
        seconds (None: they can). A windowed test that never fills never speaks: the evaluator says so."""
        return None


def median(x: np.ndarray | Sequence[float]) -> float:
    """``float(np.median(x))``, bit for bit, of a non-empty 1-D float array (NaN when one is NaN) or a
    sequence of finite floats: the one median of the detectors' windows. A sequence of up to 256 is sorted
    in Python (~1-10 us; numpy's call overhead alone is ~20); an array, or a longer sequence, is
    partitioned as ``np.median`` does, without its generic path (axis handling, ``mean`` of the middle
    pair), ~3 us against ~20 on a window of a few hundred (tests/monitor/test_detector_median.py)."""
    n = len(x)
    m = n // 2
    if not isinstance(x, np.ndarray):
        if n <= 256:
            s = sorted(x)
            return s[m] if n % 2 else (s[m - 1] + s[m]) / 2
        x = np.asarray(x, dtype=float)
    # partitioned as np.median does, with the last position too: NaN sorts last, so it shows there
    p = np.partition(x, (m - 1, m, n - 1) if n % 2 == 0 else (m, n - 1))
    if p[n - 1] != p[n - 1]:
        return math.nan
    return float(p[m]) if n % 2 else (float(p[m - 1]) + float(p[m])) / 2


def short_window(name: str, span: float, interval: float, need: int) -> str | None:
    """The ``unfillable`` text for one window: ``span`` seconds hold ``span / interval`` samples."""
    held = span / interval if interval > 0 else float("inf")
    return None if held >= need else f"{name} {span:.0f} s holds {held:.1f} samples at one per {interval:.0f} s, needs {need}"


class SampleWindow:
    """The samples of the last ``span`` seconds (at most ``maxlen``), for the detectors that test a
    window now and then (drift, leak, KS). Times and values live in one (2, n) float64 array used as a
    sliding buffer: 16 B a sample where two deques of Python floats took ~40, and ``arrays`` is a slice
    copy, not an iteration. When the buffer's end is reached the live part moves to its front, into a
    buffer sized for the whole window: the count the samples' rate so far gives for ``span`` (at most
    4x at a time: a 360-sample window is sized at its 16th and 86th samples), or the live count once
    the window is full, with a quarter's room (jitter; a move every quarter-window of samples).
    Doubling instead left a 30-min window at 5 s (360 samples) in a 1024-sample buffer for good."""

    __slots__ = ("span", "maxlen", "_sized_for", "_tv", "_lo", "_hi")

    def __init__(self, span: float, maxlen: int | None = None, sized_for: float | None = None) -> None:
        """``sized_for``: the span to size the buffer for where ``span`` is not it (a window its owner
        trims itself, ``drop_before``, with ``span`` infinite)."""
        self.span = span
        self.maxlen = maxlen
        self._sized_for = span if sized_for is None else sized_for
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
            size = self._size(n, t - tv[0, lo] if n else 0.0)
            moved = np.empty((2, size)) if size > tv.shape[1] or 2 * size <= tv.shape[1] else tv
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

    def views(self) -> tuple[np.ndarray, np.ndarray]:
        """The times and values, oldest first, without copying: valid until the next ``add``."""
        return self._tv[0, self._lo: self._hi], self._tv[1, self._lo: self._hi]

    def drop_before(self, start: float) -> None:
        """Forget the samples older than ``start`` (t < start)."""
        times, lo, hi = self._tv[0], self._lo, self._hi
        while lo < hi and times[lo] < start:
            lo += 1
        self._lo = lo

    def drop_first(self, k: int) -> None:
        """Forget the ``k`` oldest samples."""
        self._lo = min(self._hi, self._lo + k)

    def _size(self, n: int, covered: float) -> int:
        """Buffer for a window of ``n`` live samples covering ``covered`` s, with the one coming."""
        expect = n + 1
        if 0 < covered < self._sized_for:  # still filling: what the rate so far gives for the whole span, at
            # most 4x at a time (a burst of samples at one instant says little about the rate)
            expect = max(expect, math.ceil((n + 1) * min(4.0, self._sized_for / covered)))
        if self.maxlen is not None:
            expect = min(expect, self.maxlen + 1)
        return max(16, expect + expect // 4 + 1)


class Every:
    """Throttle on sample time: ``due(t)`` is true at most once per ``seconds`` (the first call always).
    Between evaluations a detector repeats its last finding; the evaluator takes the sample time from
    the sample, not from the finding."""

    __slots__ = ("seconds", "_next")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = -np.inf

    def due(self, t: float) -> bool:
        if t < self._next:
            return False
        self._next = t + self.seconds
        return True
