"""Time to exhaustion: how many minutes until a falling resource (host memory available) reaches its floor.

The leak detector's robust estimator (Theil-Sen with Sen's confidence bound, ``leak.sen_slope``) on the
last ``window`` seconds of the series' *floor*: each sample replaced by the lowest value of the ``floor``
seconds before it (a rolling minimum). A training step draws host memory down and frees it again; the
floor of a cycle shorter than ``floor`` is flat, while a steady fall is its own floor (no lag) -- on raw
samples Theil-Sen reads every step's drawdown as a fall. One spike must not tilt the line either. Every
``every`` seconds of sample time, once the floor spans ``min_span`` seconds (2 min):

- the slope's *upper* confidence bound must be below zero (the fall is real, not noise);
- minutes left = (fitted level now - ``floor``) / -slope, and the condition holds while that is at most
  ``horizon`` -- so the page comes while there is still time to act, and says how much;
- ``persistence`` consecutive evaluations.

A drawdown longer than ``floor`` that would empty the host within ``horizon`` at its pace is, by design,
indistinguishable from a fall and paged; raise ``floor`` for slower cycles.

A fall too fast for that (``fast_window`` > 0): the floor and the window need ``floor + min_span`` of
history (6 min), more than a node losing 50 MB/s of 20 GB has left. So the raw samples of the last
``fast_window`` seconds are judged too: a fall with no rise in it (no sample above its predecessor by more
than ``FAST_RISE_SHARE`` of the window's fall -- a step that frees its buffers is a cycle, not a fall) that
empties the host within ``fast_horizon`` at its pace, at ``persistence`` evaluations in a row. A step's
drawdown that fast is paged too: at that pace the host is minutes from its OOM killer either way.

Tested by tests/monitor/test_host_memory.py (a steady fall: stated minutes within 2x of the truth;
flat and sawtooth memory stay quiet).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from monitor.detectors.base import Detector, Every, Finding, SampleWindow, short_window
from monitor.detectors.lazy_scipy import norm_ppf
from monitor.detectors.leak import sen_slope

FAST_MIN_SAMPLES = 5
FAST_RISE_SHARE = 0.1  # a rise between two samples above this share of the fast window's fall: not one fall
MAX_POINTS = 120  # Theil-Sen is O(n^2) in pairs: a 10-min window at 1 s is thinned to this many samples


class ExhaustionDetector(Detector):
    def __init__(self, horizon: float = 1800.0, window: float = 600.0, every: float = 30.0, floor: float = 240.0,
                 empty_at: float = 0.0, confidence: float = 0.95, persistence: int = 2, min_samples: int = 10,
                 min_span: float = 120.0, fast_window: float = 0.0, fast_horizon: float = 300.0) -> None:
        """``empty_at``: the level that counts as exhausted (0: none left). ``min_span``: seconds of floor
        before the first judgement (a monitor started during a fall speaks after ``floor + min_span``)."""
        self.min_span_s = min(min_span, window)
        self.horizon_s, self.window_s, self.every_s, self.floor_s = horizon, window, every, floor
        self.empty_at = empty_at
        self.persistence, self.min_samples = persistence, min_samples
        self.fast_window_s, self.fast_horizon_s = fast_window, fast_horizon
        self._z = norm_ppf(0.5 + confidence / 2.0)
        self.reset()

    def reset(self) -> None:
        self._window = SampleWindow(max(self.window_s + self.floor_s, self.fast_window_s))
        self._every = Every(self.every_s)
        self._streak = 0
        self._last = Finding(0.0, False)

    def unfillable(self, interval: float) -> str | None:
        return short_window("window", self.min_span_s, interval, self.min_samples)

    def update(self, t: float, value: float) -> Finding:
        self._window.add(t, value)
        if self._every.due(t):
            self._last = self._evaluate(t)
        return self._last

    def _evaluate(self, t: float) -> Finding:
        raw_t, raw_v = self._window.arrays()
        fit = self._fit_floor(t, raw_t, raw_v)
        fast = self._fit_fast(t, raw_t, raw_v)
        if fit is None and fast is None:
            self._streak = 0
            return Finding(t, False)
        slope, hi, level, left = fit if fit is not None else (0.0, 0.0, 0.0, float("inf"))
        ok = fit is not None and hi < 0 and left * 60.0 <= self.horizon_s
        details: dict[str, float] = {}
        if not ok and fast is not None:
            slope, hi, level, left = fast
            ok, details = True, {"fast": 1.0}
        self._streak = self._streak + 1 if ok else 0
        minutes = max(0.0, left) if np.isfinite(left) else -1.0
        details |= {"minutes_left": minutes, "slope_per_min": float(slope), "upper_per_min": float(hi),
                    "level": float(level), "value": minutes}
        return Finding(t, self._streak >= self.persistence,
                       min(1.0, max(0.0, 1.0 - left * 60.0 / self.horizon_s)) if ok else 0.0, details)

    def _fit_floor(self, t: float, raw_t: np.ndarray, raw_v: np.ndarray) -> tuple[float, float, float, float] | None:
        """(slope/min, its upper bound, level now, minutes left) of the floor's last ``window`` seconds."""
        ts, vs = rolling_floor(raw_t, raw_v, self.floor_s)
        keep = ts >= t - self.window_s
        ts, vs = ts[keep], vs[keep]
        if len(ts) < self.min_samples or t - ts[0] < self.min_span_s:
            return None
        if len(ts) > MAX_POINTS:
            pick = np.linspace(0, len(ts) - 1, MAX_POINTS).round().astype(int)
            ts, vs = ts[pick], vs[pick]
        return self._line(ts, vs)

    def _fit_fast(self, t: float, ts: np.ndarray, vs: np.ndarray) -> tuple[float, float, float, float] | None:
        """The same of the raw samples of the last ``fast_window`` seconds when they are one fast fall
        that empties the host within ``fast_horizon`` (module docstring); None otherwise."""
        if self.fast_window_s <= 0:
            return None
        keep = ts >= t - self.fast_window_s
        ts, vs = ts[keep], vs[keep]
        if len(ts) < FAST_MIN_SAMPLES or t - ts[0] < 0.8 * self.fast_window_s:
            return None
        fall = float(vs[0] - vs[-1])
        if fall <= 0 or float(np.max(np.diff(vs))) > FAST_RISE_SHARE * fall:
            return None
        slope, hi, level, left = self._line(ts, vs)
        return (slope, hi, level, left) if hi < 0 and left * 60.0 <= self.fast_horizon_s else None

    def _line(self, ts: np.ndarray, vs: np.ndarray) -> tuple[float, float, float, float]:
        x = (ts - ts[0]) / 60.0
        slope, intercept, _lo, hi = sen_slope(x, vs, self._z)
        level = intercept + slope * float(x[-1])
        left = (level - self.empty_at) / -slope if slope < 0 else float("inf")
        return float(slope), float(hi), float(level), float(left)


def rolling_floor(ts: np.ndarray, vs: np.ndarray, span: float) -> tuple[np.ndarray, np.ndarray]:
    """Each sample from ``span`` seconds after the first on, as the minimum of the ``span`` seconds up to it
    (a monotone deque: O(n))."""
    out_t, out_v = [], []
    queue: deque[int] = deque()
    start = 0
    for i in range(len(ts)):
        while queue and vs[queue[-1]] >= vs[i]:
            queue.pop()
        queue.append(i)
        while ts[start] < ts[i] - span:
            start += 1
        while queue[0] < start:
            queue.popleft()
        if ts[i] - ts[0] >= span:
            out_t.append(ts[i])
            out_v.append(vs[queue[0]])
    return np.asarray(out_t, float), np.asarray(out_v, float)
