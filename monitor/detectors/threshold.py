"""Plain conditions on the current value; rules add ``for`` durations and compound joins on top."""

from __future__ import annotations

import math
import operator
from collections import deque

from monitor.detectors.base import Detector, Finding, SampleWindow, median

OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
       "!=": operator.ne}


class ThresholdDetector(Detector):
    """``value <op> threshold``. ``skip_value``: a reading that means "not measured yet" (a gauge
    the exporter initialises to 0 before its first computation) is never a hit.

    Tested by tests/monitor/test_monitor_detectors.py::test_threshold_ops and ::test_threshold_skip_value.
    """

    __slots__ = ("op", "threshold", "_cmp", "skip_value")

    def __init__(self, op: str = ">", value: float = 0.0, skip_value: float | None = None) -> None:
        if op not in OPS:
            raise ValueError(f"op must be one of {sorted(OPS)}, got {op!r}")
        self.op, self.threshold, self._cmp = op, float(value), OPS[op]
        self.skip_value = skip_value

    def update(self, t: float, value: float) -> Finding:
        hit = value != self.skip_value and bool(self._cmp(value, self.threshold))
        return Finding(t, hit, 1.0 if hit else 0.0, {"value": value, "threshold": self.threshold})


class SpikeFilter(Detector):
    """Feeds the wrapped detector the rolling median of the last ``window`` samples.

    A lone outlier never moves a median of three or more, so a single 99 % CPU sample cannot start a
    ``for`` timer; a sustained level passes through after ``window // 2 + 1`` samples.
    Tested by tests/monitor/test_monitor_detectors.py::test_spike_filter_ignores_lone_sample.
    """

    __slots__ = ("inner", "window", "_buf")

    def __init__(self, inner: Detector, window: int = 3) -> None:
        if window < 1:
            raise ValueError("spike_filter window must be >= 1")
        self.inner = inner
        self.window = window
        # a list, not a deque(maxlen): ~100 B for a handful of floats where an empty deque is ~600 (one per
        # filtered binding, thousands at 1000 GPUs); dropping its first of ~3 costs nothing
        self._buf: list[float] = []

    def update(self, t: float, value: float) -> Finding:
        buf = self._buf
        buf.append(value)
        if len(buf) > self.window:
            del buf[0]
        n = len(buf)
        if n == 1:
            return self.inner.update(t, value)
        # sorted() beats np.median by ~20x on a handful of values, and this runs on every sample.
        ordered = sorted(self._buf)
        mid = n // 2
        return self.inner.update(t, ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid]))

    def reset(self) -> None:
        self._buf.clear()
        self.inner.reset()


class FluctuationDetector(Detector):
    """Swing of a series within a window: ``(max - min) / mean > min_relative``.

    For "GPU memory fluctuating more than 5 %" (allocation churn while the CPU feeds the GPU). Runs
    on every GPU-memory series of the fleet, so values and times live in two flat lists and the
    builtins scan the (short) window at C speed. Tested by
    tests/monitor/test_monitor_detectors.py::test_fluctuation.
    """

    __slots__ = ("window_s", "min_relative", "min_samples", "below", "_ts", "_vs")

    def __init__(self, window: float = 60.0, min_relative: float = 0.05, min_samples: int = 3,
                 below: bool = False) -> None:
        # below: the opposite question, "has it stayed flat" (swing <= min_relative over a full window):
        # verl's response_length/max pinned at the configured cap step after step
        self.window_s, self.min_relative, self.min_samples, self.below = window, min_relative, min_samples, below
        self.reset()

    def reset(self) -> None:
        # lists, not deques: a window of a dozen samples in two lists is ~300 B where two deques are ~1.2 KB
        # (one pair per GPU-memory series); the samples that left are cut in one slice
        self._ts: list[float] = []
        self._vs: list[float] = []

    def update(self, t: float, value: float) -> Finding:
        ts, vs = self._ts, self._vs
        ts.append(t)
        vs.append(value)
        cut = t - self.window_s
        k = 0
        while ts[k] < cut:
            k += 1
        if k:
            del ts[:k], vs[:k]
        n = len(vs)
        if n < self.min_samples:
            return Finding(t, False)
        mean = sum(vs) / n
        top, bottom = max(vs), min(vs)
        swing = (top - bottom) / abs(mean) if mean else (math.inf if top != bottom else 0.0)
        hit = swing <= self.min_relative if self.below else swing > self.min_relative
        return Finding(t, hit, min(1.0, swing), {"relative_swing": swing, "value": value, "max": top, "min": bottom})


class BaselineRatioDetector(Detector):
    """Current level (optionally squared: std -> variance) over the median of the preceding window.

    For the reward guard's "variance jumps x3". The current level is the median of the last ``recent``
    samples: with 1, one sample decides, and a per-step reward std of a 16-answer batch whose policy has
    saturated (std 0 most steps, 0.15-0.25 when one or two answers miss) jumped "x12" over its median
    every few seconds on healthy soaks; a reward model gone noisy raises the level of every batch.
    ``min_delta``: the level must also be this much above the baseline (a 0.1-s stage timer tripling
    is no slowdown anyone waits for).
    Tested by test_monitor_detectors.py::test_baseline_ratio.
    """

    def __init__(self, window: float = 1800.0, ratio: float = 3.0, power: float = 1.0,
                 min_samples: int = 10, every: float = 60.0, recent: int = 1, min_delta: float = 0.0) -> None:
        if recent < 1:
            raise ValueError(f"recent must be >= 1 sample, got {recent}")
        self.window_s, self.ratio, self.power, self.min_samples = window, ratio, power, min_samples
        self.every_s = every  # the baseline median is refreshed this often, not on every sample
        self.recent, self.min_delta = recent, min_delta
        self.reset()

    def reset(self) -> None:
        # 16 B a sample in one float64 buffer; a deque of (t, x) tuples was ~110 (the 30-min windows of the
        # 750 reward-variance and gradient-norm bindings at 1000 GPUs grew ~3 MiB from minute 15 to 25)
        self._buf = SampleWindow(self.window_s)
        self._last: deque[float] = deque(maxlen=self.recent)
        self._base: float | None = None
        self._next = -math.inf

    def update(self, t: float, value: float) -> Finding:
        x = abs(value) ** self.power
        self._buf.drop_before(t - self.window_s)
        if t >= self._next:
            self._next = t + self.every_s
            self._base = median(self._buf.views()[1]) if len(self._buf) >= self.min_samples else None
        base = self._base
        self._buf.add(t, x)
        self._last.append(x)
        if base is None or base <= 0 or len(self._last) < self.recent:
            return Finding(t, False)
        level = median(self._last)
        r = level / base
        return Finding(t, r >= self.ratio and level - base >= self.min_delta, min(1.0, r / self.ratio),
                       {"ratio": r, "baseline": base, "value": value})
