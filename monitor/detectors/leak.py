"""Memory leaks: a robust, significant upward slope of a series' *floor*."""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.stats import norm

from monitor.detectors.base import Detector, Finding


class LeakDetector(Detector):
    """Theil-Sen slope of per-bucket minima, with its confidence bound and persistence.

    GPU memory is a sawtooth (allocate during rollout, free after the update); a leak is the floor
    rising, so the series is reduced to the minimum of each ``floor`` -second bucket (choose it longer
    than one sawtooth period). Buckets do not overlap, so the bucket minima are close to independent
    and Sen's rank-based confidence interval is close to honest. Test, at each completed bucket once
    the window holds ``min_buckets`` of them: the *lower* confidence bound of the slope exceeds
    ``min_slope_per_min`` (units/min, bytes after store normalisation), and the fitted rise across
    the window is at least ``min_effect_sd`` robust standard deviations of the floor (1.4826 MAD of its
    first differences / sqrt 2) (effect-size floor: with hundreds of GPUs evaluated every two minutes, a
    noise-driven tilt passes a 95 % bound somewhere every day), for ``persistence`` consecutive
    buckets. Theil-Sen because a single freed/allocated spike must not tilt the line.

    Tested by tests/monitor/test_scenarios.py::test_leak_20mb_per_min_fires_within_30_min and
    ::test_slow_growth_and_flat_memory_stay_quiet (24 h, both name families).
    """

    def __init__(self, min_slope_per_min: float = 10e6, window: float = 1800.0, floor: float = 120.0,
                 confidence: float = 0.95, persistence: int = 2, min_buckets: int = 8,
                 min_effect_sd: float = 5.0) -> None:
        self.min_slope, self.window_s, self.floor_s = min_slope_per_min, window, floor
        self.confidence, self.persistence, self.min_buckets = confidence, persistence, min_buckets
        self.min_effect_sd = min_effect_sd
        self._z = float(norm.ppf(0.5 + confidence / 2.0))
        self.reset()

    def reset(self) -> None:
        self._buckets: deque[tuple[float, float]] = deque()
        self._bucket: int | None = None
        self._bucket_min = np.inf
        self._streak = 0
        self._last = Finding(0.0, False)

    def update(self, t: float, value: float) -> Finding:
        b = int(t // self.floor_s)
        if self._bucket is None:
            self._bucket = b
        if b != self._bucket:
            self._buckets.append(((self._bucket + 0.5) * self.floor_s, self._bucket_min))
            self._bucket, self._bucket_min = b, np.inf
            while self._buckets and self._buckets[0][0] < t - self.window_s:
                self._buckets.popleft()
            self._last = self._evaluate(t)
        self._bucket_min = min(self._bucket_min, value)
        return self._last

    def _evaluate(self, t: float) -> Finding:
        if len(self._buckets) < self.min_buckets:
            self._streak = 0
            return Finding(t, False)
        arr = np.asarray(self._buckets)
        x = (arr[:, 0] - arr[0, 0]) / 60.0
        y = arr[:, 1]
        slope, intercept, lo, hi = sen_slope(x, y, self._z)
        # Floor noise from first differences: a trend (or the bend at a leak's onset) barely moves
        # their spread, while residuals around one straight line would absorb the bend as "noise".
        d = np.diff(y)
        noise = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2.0)
        rise = slope * float(x[-1])
        ok = lo > self.min_slope and rise >= self.min_effect_sd * noise
        self._streak = self._streak + 1 if ok else 0
        details = {"slope_per_min": float(slope), "slope_per_s": float(slope) / 60.0,
                   "lower_per_min": float(lo), "upper_per_min": float(hi), "intercept": float(intercept),
                   "t_ref": float(arr[0, 0]), "window_start": float(arr[0, 0]), "value": float(slope),
                   "rise": rise, "floor_noise": noise}
        return Finding(t, self._streak >= self.persistence, min(1.0, max(0.0, lo / self.min_slope)), details)


def sen_slope(x: np.ndarray, y: np.ndarray, z: float) -> tuple[float, float, float, float]:
    """Theil-Sen slope, intercept and Sen's (1968) rank-based confidence bounds -- the same estimator
    and interval as ``scipy.stats.theilslopes``, which recomputes the normal quantile ``z`` on every
    call; here it is computed once per detector, which matters with hundreds of GPU series."""
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = np.sort((y[j] - y[i])[keep] / dx[keep])
    slope = float(np.median(slopes))
    intercept = float(np.median(y) - slope * np.median(x))
    n, m = len(x), len(slopes)
    sigma = np.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo_i = max(int(np.round((m - z * sigma) / 2.0)) - 1, 0)
    hi_i = min(int(np.round((m + z * sigma) / 2.0)), m - 1)
    return slope, intercept, float(slopes[lo_i]), float(slopes[hi_i])
