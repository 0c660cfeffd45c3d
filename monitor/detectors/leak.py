"""Memory leaks: a robust, significant upward slope of a series' *floor*."""

from __future__ import annotations

import math

import numpy as np

from monitor.detectors.base import Detector, Every, Finding, SampleWindow, short_window
from monitor.detectors.lazy_scipy import norm_ppf
from monitor.detectors.work import WorkLog


class LeakDetector(Detector):
    """Theil-Sen slope of the floor of the last ``window`` seconds, with Sen's confidence bound.

    GPU memory is a sawtooth (allocate during rollout, free after the update, one cycle per PPO
    step); a leak is the *floor* rising. Test, every ``every`` seconds of sample time once the
    window is (nearly) full:

    1. Period: the lag of the highest autocorrelation peak after the first zero crossing (linearly
       detrended samples, FFT; periods up to a third of the window), if that peak exceeds
       ``min_acf`` -- else the series is aperiodic.
    2. Floor: the window is cut, from its end backwards, into buckets of ``max(floor, period + 2
       sample intervals)`` seconds, so each bucket holds at least one cycle's bottom; each bucket
       gives its minimum (at the time it was seen). Non-overlapping buckets keep the minima close to independent, which
       Sen's rank-based interval assumes.
    3. Slope: Theil-Sen over the bucket minima; the *lower* bound of Sen's two-sided ``confidence``
       interval (0.95: a one-sided 97.5 % bound) must exceed ``min_slope_per_min`` (units/min; bytes
       after store normalisation).
    4. Effect floor: the fitted rise across the window must exceed the floor's sampling resolution
       plus ``min_effect_sd`` robust sd of the measurement noise (1.4826 MAD of the samples' second
       differences / sqrt 6; second differences cancel the linear ramp between resets). The
       resolution is the median climb between consecutive samples: a cycle's lowest sample lies
       anywhere within one climb above the true bottom, and when the step period is incommensurate
       with the scrape interval that offset drifts slowly from cycle to cycle -- an aliased rise of up
       to one climb (444 MB for an 8 GB sawtooth of 90 s sampled every 5 s) that no slope test on the
       sampled floor can tell from a leak.
    5. Persistence: 1-4 hold for ``persistence`` consecutive evaluations.

    6. Work (``work``, a rule's ``explain_by:``; for a *peak* series only): the test runs on the
       peak's rise at the steps whose work set no new high (monitor/detectors/work.py) -- a peak that
       ratchets while the run warms up or while its responses grow rises with its work and is no leak;
       a leak lifts it at steps that did no more work than before. And at least
       ``min_unexplained_share`` of the window's rise must be such rise: on verl-written runs a leak's
       peak rose 70-85 % at steps without a new work high, a healthy x1.9 response growth's 23-27 %
       (a noisy batch statistic sets its highs at other steps than the peak's own noise does). Samples
       newer than the last record with work wait for it (a record's memory keys come before its length
       keys). A fall of the peak is a restarted process (a peak never falls): the window and the work
       highs start over, and the next ``warmup_after_restart`` samples are not judged. The peak must
       still be rising: the later half of the window holds at least ``min_recent_share`` of its rise (a
       leak keeps lifting the peak; a warm-up ratchet saturates). The rate the alert states stays the
       peak's own.

    Theil-Sen because a single freed or allocated spike must not tilt the line. State is the raw
    window (bounded by ``max_samples``); one evaluation costs an FFT and O(buckets^2) slopes.

    Tested by tests/monitor/test_monitor_scenarios.py::test_leak_20mb_per_min_fires_within_30_min,
    ::test_slow_growth_and_flat_memory_stay_quiet (24 h, both name families) and
    tests/monitor/test_monitor_detectors.py (period, aliasing, slow steps).
    """

    __slots__ = ("min_slope", "window_s", "every_s", "floor_s", "confidence", "persistence", "min_buckets",
                 "min_effect_sd", "min_acf", "max_samples", "work", "warmup_after_restart",
                 "min_unexplained_share", "min_recent_share", "_z", "_window", "_every", "_streak", "_last",
                 "_prev", "_skip")

    def __init__(self, min_slope_per_min: float = 10e6, window: float = 1800.0, every: float = 60.0,
                 floor: float = 30.0, confidence: float = 0.95, persistence: int = 2, min_buckets: int = 6,
                 min_effect_sd: float = 1.0, min_acf: float = 0.3, max_samples: int = 4096,
                 work: WorkLog | None = None, warmup_after_restart: int = 5, min_unexplained_share: float = 0.5,
                 min_recent_share: float = 0.25) -> None:
        self.min_slope, self.window_s, self.every_s, self.floor_s = min_slope_per_min, window, every, floor
        self.confidence, self.persistence, self.min_buckets = confidence, persistence, min_buckets
        self.min_effect_sd, self.min_acf, self.max_samples = min_effect_sd, min_acf, max_samples
        self.work, self.warmup_after_restart = work, warmup_after_restart
        self.min_unexplained_share, self.min_recent_share = min_unexplained_share, min_recent_share
        self._z = norm_ppf(0.5 + confidence / 2.0)
        self.reset()

    def reset(self) -> None:
        self._window = SampleWindow(self.window_s, maxlen=self.max_samples)
        self._every = Every(self.every_s)
        self._streak = 0
        self._last = Finding(0.0, False)
        self._prev = math.inf
        self._skip = 0

    def unfillable(self, interval: float) -> str | None:
        return short_window("window", self.window_s, interval, 3 * self.min_buckets)

    def update(self, t: float, value: float) -> Finding:
        if self.work is not None:
            fell, self._prev = value < self._prev, value
            if fell and len(self._window):
                self.reset()  # a peak fell: the process restarted (a resumed run), its peaks start over
                self._prev, self._skip = value, self.warmup_after_restart
                self.work.restart()
            if self._skip > 0:
                self._skip -= 1
                return Finding(t, False)
        self._window.add(t, value)
        if self._every.due(t):
            self._last = self._evaluate(t)
        return self._last

    def _evaluate(self, t: float) -> Finding:
        n = len(self._window)
        ts, vs = self._window.arrays()
        if n < 3 * self.min_buckets or t - ts[0] < 0.9 * self.window_s:
            self._streak = 0
            return Finding(t, False)
        raw_t, raw_v = ts, vs
        if self.work is not None and len(self.work):
            ts, vs = unexplained_rise(ts, vs, self.work)
            if len(ts) < 3 * self.min_buckets:
                self._streak = 0
                return Finding(t, False)
        dt = float(np.median(np.diff(ts)))
        period = sawtooth_period(vs, dt, self.window_s / 3.0, self.min_acf)
        bucket = max(self.floor_s, period + 2.0 * dt)
        bt, by = bucket_minima(ts, vs, t, bucket)
        if len(bt) < self.min_buckets:
            self._streak = 0
            return Finding(t, False)
        x = (bt - bt[0]) / 60.0
        slope, intercept, lo, hi = sen_slope(x, by, self._z)
        noise = 1.4826 * float(np.median(np.abs(by - (intercept + slope * x))))
        steps = np.diff(vs)
        climbs = steps[steps > 0]
        resolution = float(np.median(climbs)) if len(climbs) else 0.0
        curv = np.diff(steps)
        jitter = 1.4826 * float(np.median(np.abs(curv - np.median(curv)))) / np.sqrt(6.0)
        rise = slope * float(x[-1])
        ok = lo > self.min_slope and rise >= resolution + self.min_effect_sd * jitter
        if raw_t is not ts:  # most of the peak's rise must be unexplained by work (a leak: ~70-85 %)
            raw_rise = float(raw_v[raw_t <= ts[-1]][-1] - raw_v[0])
            ok = ok and float(vs[-1] - vs[0]) >= self.min_unexplained_share * raw_rise
            # and the peak still rises: a leak lifts it all along (its later half holds ~half the window's
            # rise, more when it began inside the window); a warm-up ratchet is concave -- fast, then flat
            # (verl-written runs: 30.9 -> 44.1 GB in 25 steps, then +0.09 GB over the next 12)
            mid = raw_t[0] + (raw_t[-1] - raw_t[0]) / 2.0
            ok = ok and float(raw_v[-1] - raw_v[raw_t <= mid][-1]) >= self.min_recent_share * raw_rise
        # The rate the alert states: the window's slope understates a leak that began inside the window
        # (a flat stretch before it pulls the median slope down: 49 MB/min reported for 300), so the
        # later half's own Theil-Sen slope is used when it is steeper -- the rate of the leak now.
        half = len(bt) // 2
        rate = max(slope, sen_slope(x[half:], by[half:], self._z)[0]) if len(bt) - half >= 3 else slope
        if raw_t is not ts:  # the peak's own rate, not its unexplained part's
            rx = (raw_t - raw_t[0]) / 60.0
            rate = max(sen_slope(rx, raw_v, self._z)[0], sen_slope(rx[len(rx) // 2:], raw_v[len(rx) // 2:], self._z)[0])
        self._streak = self._streak + 1 if ok else 0
        details = {"slope_per_min": float(slope), "slope_per_s": float(slope) / 60.0, "rate_per_min": float(rate),
                   "lower_per_min": float(lo), "upper_per_min": float(hi), "intercept": float(intercept),
                   "t_ref": float(bt[0]), "window_start": float(ts[0]), "value": float(slope),
                   "rise": rise, "floor_noise": noise, "resolution": resolution, "jitter": jitter,
                   "period_s": period, "bucket_s": bucket}
        return Finding(t, self._streak >= self.persistence, min(1.0, max(0.0, lo / self.min_slope)), details)


def unexplained_rise(ts: np.ndarray, vs: np.ndarray, work: WorkLog) -> tuple[np.ndarray, np.ndarray]:
    """The peak as it would be had it risen only at steps whose work set no new high: its first value
    plus the running sum of those steps' rises. Samples after the last record with work are left out."""
    keep = ts <= work.last_t
    ts, vs = ts[keep], vs[keep]
    if len(ts) < 2:
        return ts, vs
    rise = np.maximum(np.diff(vs), 0.0)
    explained = np.fromiter((work.at_high(t) for t in ts[1:].tolist()), bool, len(ts) - 1)
    rise[explained] = 0.0
    return ts, vs[0] + np.concatenate(([0.0], np.cumsum(rise)))


def sawtooth_period(v: np.ndarray, dt: float, max_period: float, min_acf: float) -> float:
    """Dominant cycle length in seconds (0.0 when the series is aperiodic): the highest
    autocorrelation peak after the first zero crossing, of the linearly detrended samples. The ACF is
    a few numpy lines rather than ``statsmodels.tsa.stattools.acf``, which validates and converts its
    input on every call -- this runs once a minute for every GPU. Samples are taken as evenly spaced
    (``dt`` = their median interval), which scrape jitter of a few percent does not disturb."""
    n = len(v)
    idx = np.arange(n, dtype=float)
    resid = v - np.polyval(np.polyfit(idx, v, 1), idx)
    spec = np.fft.rfft(resid, 2 * n)
    acf = np.fft.irfft(spec * np.conj(spec))[: n]
    if acf[0] <= 0:
        return 0.0
    acf = acf / acf[0]
    max_lag = min(int(max_period / dt), n // 2)
    below = np.nonzero(acf[1: max_lag + 1] < 0)[0]
    if len(below) == 0:
        return 0.0
    start = int(below[0]) + 1
    if start >= max_lag:
        return 0.0
    lag = start + int(np.argmax(acf[start: max_lag + 1]))
    return float(lag * dt) if acf[lag] >= min_acf else 0.0


def bucket_minima(ts: np.ndarray, vs: np.ndarray, t_end: float, bucket: float) -> tuple[np.ndarray, np.ndarray]:
    """Minimum of each full ``bucket``-second slice, counted back from ``t_end``, and when it was seen."""
    k = np.floor((t_end - ts) / bucket).astype(int)
    full = int(np.floor((t_end - ts[0]) / bucket))
    keep = k < full
    k, tk, vk = k[keep], ts[keep], vs[keep]
    order = np.lexsort((vk, k))  # by bucket, then value: the first row of each bucket is its minimum
    first = np.ones(len(order), bool)
    first[1:] = k[order][1:] != k[order][:-1]
    rows = order[first]
    back = np.argsort(tk[rows])
    return tk[rows][back], vk[rows][back]


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
