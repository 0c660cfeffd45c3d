"""Contextual anomalies: a value, a change or a rhythm the series has not shown in its context.

``ContextAnomalyDetector`` (rule type ``context_anomaly``) asks three questions of every judgement (a sample, or a 5-min mean: ``bucket``), each
a two-sided empirical tail probability among the series' own recent history (the rank test of
``RareValueDetector``, no distribution assumed):

- the value itself (a level the series has not been at);
- the change from the previous sample (a jump, or a jump that should have come and did not);
- the residual from a seasonal baseline, when the series has a daily or weekly rhythm (a value normal
  for the series but not for this hour of the day/week: a flat stretch where the cycle should rise).

The smallest of the three p-values, Bonferroni-corrected, becomes a raw surprise ``-log10 p`` (capped:
beyond 1e-10 every value is simply "impossible", and one absurd sample must not swamp the mean). Raw
surprise is not comparable between series (a noisy volume series is surprised far more often than a
smooth temperature), so the trigger is an *anomaly likelihood* in NAB's sense (Ahmad et al. 2017):
the short-window mean of raw surprise against the mean and spread of that same short-window mean over
the long history, as a Gaussian tail probability. Each series is measured against its own habits, so
one threshold serves every series. A change in spike density, or a run of mildly odd samples, lifts
the short-window mean without any single sample being extreme.

Cost per sample: three sorted windows (``bisect``: O(log n) comparisons plus a memmove of at most
``history`` pointers, ~1 µs at 4000) and O(1) running sums; no numpy on the hot path (a per-sample
numpy call costs more than the whole update). Causal: a sample is scored against history before it
joins it.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from monitor.detectors.base import Detector, Finding

DAY = 86400.0
WEEK = 7 * DAY


class RankWindow:
    """The last ``size`` values, kept sorted, for two-sided empirical tail probabilities."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._arrival: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def p_value(self, x: float) -> float:
        """2 · min(#{h ≤ x}, #{h ≥ x}) / m; beyond every value: (2/m) · 10^(−excess/spread)."""
        h = self._sorted
        m = len(h)
        if m == 0:
            return 1.0
        below = bisect.bisect_right(h, x)
        above = m - bisect.bisect_left(h, x)
        count = min(below, above)
        if count > 0:
            return min(1.0, 2.0 * count / m)
        spread = max(h[(3 * m) // 4] - h[m // 4], 0.01 * (h[-1] - h[0]), 1e-12)
        excess = (x - h[-1]) if above == 0 else (h[0] - x)
        return 2.0 / m * 10.0 ** (-min(excess / spread, 300.0))

    def add(self, x: float) -> None:
        self._arrival.append(x)
        bisect.insort(self._sorted, x)
        if len(self._arrival) > self.size:
            old = self._arrival.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]


class SeasonalBaseline:
    """Per-phase exponentially weighted means for a daily and a weekly cycle (phase from the sample's
    own timestamp, so irregular sampling and gaps keep their phase). Which cycle serves - or none - is
    decided online: the one whose one-step residuals have the smaller EW mean square, and only when
    it beats the plain level (EW mean) by ``gain``. That is the autocorrelation question ("does last
    cycle at this phase predict now better than the recent level?") asked in O(1) per sample."""

    def __init__(self, bins_per_day: int = 48, rate: float = 0.3, gain: float = 0.7) -> None:
        self.periods = (DAY, WEEK)
        self.bins = (bins_per_day, 7 * bins_per_day)
        self.rate = rate
        self.gain = gain
        self._mean: tuple[dict[int, float], ...] = ({}, {})
        self._sq = [0.0, 0.0]   # EW mean squared residual of each cycle's prediction
        self._seen = [0, 0]     # predictions made by each cycle (it must have seen this phase before)
        self._level: float | None = None
        self._level_sq = 0.0
        self._first_t: float | None = None
        self._slow = 1.0 / 500.0

    def _phase(self, k: int, t: float) -> int:
        return int((t % self.periods[k]) / self.periods[k] * self.bins[k])

    def residual(self, t: float, x: float) -> float | None:
        """The residual of ``x`` from the serving cycle's baseline, None while no cycle serves."""
        if self._first_t is None or t - self._first_t < 2 * DAY:
            return None
        best, best_sq = None, self.gain * self._level_sq
        for k in (0, 1):
            if self._seen[k] >= 100 and t - self._first_t >= 2 * self.periods[k] and self._sq[k] < best_sq:
                best, best_sq = k, self._sq[k]
        if best is None:
            return None
        base = self._mean[best].get(self._phase(best, t))
        return None if base is None else x - base

    def add(self, t: float, x: float) -> None:
        if self._first_t is None:
            self._first_t = t
        a = self._slow
        for k in (0, 1):
            bin_ = self._phase(k, t)
            base = self._mean[k].get(bin_)
            if base is None:
                self._mean[k][bin_] = x
            else:
                self._sq[k] += a * ((x - base) ** 2 - self._sq[k])
                self._seen[k] += 1
                self._mean[k][bin_] = base + self.rate * (x - base)
        if self._level is None:
            self._level = x
        else:
            self._level_sq += a * ((x - self._level) ** 2 - self._level_sq)
            self._level += 0.1 * (x - self._level)


class AnomalyLikelihood:
    """NAB's anomaly likelihood over a raw surprise stream: the mean of the last ``short`` raw scores
    against a Gaussian fitted to that short mean over the last ``long`` samples (running sums, O(1)).
    ``update`` returns -log10 of the upper tail probability (5.0 = NAB's likelihood 0.99999)."""

    def __init__(self, short: int = 10, long: int = 4000, min_sd: float = 0.05) -> None:
        self.short = short
        self.long = long
        self.min_sd = min_sd
        self._recent: deque[float] = deque()
        self._recent_sum = 0.0
        self._means: deque[float] = deque()
        self._s1 = 0.0
        self._s2 = 0.0

    def __len__(self) -> int:
        return len(self._means)

    def update(self, raw: float) -> float:
        self._recent.append(raw)
        self._recent_sum += raw
        if len(self._recent) > self.short:
            self._recent_sum -= self._recent.popleft()
        now = self._recent_sum / len(self._recent)
        n = len(self._means)
        out = 0.0
        if n >= 2:
            mu = self._s1 / n
            sd = max(math.sqrt(max(self._s2 / n - mu * mu, 0.0)), self.min_sd)
            z = (now - mu) / sd
            tail = 0.5 * math.erfc(z / math.sqrt(2.0))
            out = -math.log10(tail) if tail > 1e-300 else 300.0
        self._means.append(now)
        self._s1 += now
        self._s2 += now * now
        if n + 1 > self.long:
            old = self._means.popleft()
            self._s1 -= old
            self._s2 -= old * old
        return out


class ContextFeatures:
    """The three p-values of a sample (value, change, seasonal residual), each against its own window
    of the last ``history`` samples; a feature not yet measurable reports 1.0."""

    NAMES = ("value", "change", "seasonal")

    def __init__(self, history: int = 4000, min_history: int = 100, seasonal: bool = True) -> None:
        self.history = history
        self.min_history = min_history
        self.seasonal = seasonal
        self.reset()

    def reset(self) -> None:
        self._windows = [RankWindow(self.history) for _ in self.NAMES]
        self._baseline = SeasonalBaseline() if self.seasonal else None
        self._prev: float | None = None

    def update(self, t: float, x: float) -> tuple[float, float, float]:
        change = None if self._prev is None else x - self._prev
        resid = self._baseline.residual(t, x) if self._baseline is not None else None
        feats = (x, change, resid)
        ps = []
        for w, f in zip(self._windows, feats, strict=True):
            if f is None:
                ps.append(1.0)
                continue
            ps.append(w.p_value(f) if len(w) >= self.min_history else 1.0)
            w.add(f)
        if self._baseline is not None:
            self._baseline.add(t, x)
        self._prev = x
        return ps[0], ps[1], ps[2]


def raw_surprise(ps: tuple[float, ...], cap: float = 10.0) -> float:
    """-log10 of the Bonferroni-corrected smallest p-value, in [0, cap]."""
    p = min(1.0, len(ps) * min(ps))
    return cap if p <= 10.0 ** -cap else min(cap, -math.log10(p))


class ContextAnomalyDetector(Detector):
    """Value, change and seasonal-residual rarity -> raw surprise -> anomaly likelihood.

    Triggers when the likelihood's tail surprise reaches ``threshold`` (-log10 of the tail probability:
    3.75 means "the recent surprise is a 1-in-5600 event for this series").

    ``bucket`` (seconds): the detector judges the mean of each run of k consecutive samples spanning
    about ``bucket`` seconds, k = round(bucket / median interval of the first 20 samples), at least 1.
    A false-alarm rate is per judgement, so without it a signal scraped every 30 s would alarm ten
    times as often per day as the same signal every 5 min; with it every cadence at or below
    ``bucket`` costs the same per day (NAB's 5-min files: k = 1, every sample judged on arrival).
    Samples inside a run repeat the last judgement; a run is judged when its last sample arrives.

    Counts below (``min_history``, ``history``, ``short``, ``hold_samples``) are in judgements. Nothing
    triggers before 2 · ``min_history`` of them (the rank windows, then the likelihood, need history).
    An episode lasts until ``hold_samples`` judgements pass without a trigger, so one incident is one
    alert. ``score`` is the likelihood in [0, 1]. The defaults are the ones chosen by cross-validation
    on NAB (benchmarks/nab_cv.py, benchmarks/RESULTS.md).
    """

    CADENCE_SAMPLES = 20

    def __init__(self, threshold: float = 3.75, history: int = 4000, min_history: int = 100,
                 short: int = 20, surprise_cap: float = 10.0, seasonal: bool = True,
                 hold_samples: int = 150, bucket: float = 300.0) -> None:
        if history < 10 or not 2 <= min_history <= history:
            raise ValueError("history >= 10 and 2 <= min_history <= history required")
        if threshold <= 0 or short < 1 or surprise_cap <= 0 or hold_samples < 0:
            raise ValueError("threshold > 0, short >= 1, surprise_cap > 0 and hold_samples >= 0 required")
        self.threshold = threshold
        self.history = history
        self.min_history = min_history
        self.short = short
        self.surprise_cap = surprise_cap
        self.seasonal = seasonal
        self.hold_samples = hold_samples
        if bucket < 0:
            raise ValueError("bucket >= 0 seconds required (0: every sample on its own)")
        self.bucket = bucket
        self.reset()

    def reset(self) -> None:
        self._first: list[tuple[float, float]] = []
        self._group: int | None = None if self.bucket > 0 else 1
        self._bucket_sum = 0.0
        self._bucket_n = 0
        self._last = Finding(t=0.0, active=False)
        self._features = ContextFeatures(self.history, self.min_history, self.seasonal)
        self._likelihood = AnomalyLikelihood(self.short, self.history)
        self._since_trigger: int | None = None
        self._n = 0

    def update(self, t: float, value: float) -> Finding:
        if self._group is None:  # still learning the sampling interval
            self._first.append((t, value))
            if len(self._first) <= self.CADENCE_SAMPLES:
                return Finding(t=t, active=False, details={"likelihood_surprise": 0.0, "raw_surprise": 0.0,
                                                           "value": value})
            gaps = sorted(b[0] - a[0] for a, b in zip(self._first, self._first[1:], strict=False))
            self._group = max(1, round(self.bucket / gaps[len(gaps) // 2])) if gaps[len(gaps) // 2] > 0 else 1
            pending, self._first = self._first, []
            f = self._last
            for pt, pv in pending:
                f = self._add(pt, pv)
            return f
        return self._add(t, value)

    def _add(self, t: float, value: float) -> Finding:
        """Judge the mean of each ``_group`` consecutive samples when its last sample arrives; the
        samples in between repeat the last judgement."""
        self._bucket_sum += value
        self._bucket_n += 1
        if self._bucket_n >= self._group:
            f = self._judge(t, self._bucket_sum / self._bucket_n)
            self._bucket_sum, self._bucket_n = 0.0, 0
            self._last = f
        elif self._last.t != t:
            self._last = Finding(t=t, active=self._last.active, score=self._last.score, details=self._last.details)
        return self._last

    def _judge(self, t: float, value: float) -> Finding:
        ps = self._features.update(t, value)
        raw = raw_surprise(ps, self.surprise_cap)
        # The likelihood learns only from samples the rank windows could judge (the warm-up's zeros
        # would make every later surprise look extreme), and speaks once it has min_history of them.
        ready = self._n >= self.min_history
        tail = self._likelihood.update(raw) if ready else 0.0
        self._n += 1
        if ready and len(self._likelihood) > self.min_history and tail >= self.threshold:
            self._since_trigger = 0
        elif self._since_trigger is not None:
            self._since_trigger += 1
            if self._since_trigger >= self.hold_samples:
                self._since_trigger = None
        active = self._since_trigger is not None
        details = {"likelihood_surprise": tail, "raw_surprise": raw, "value": value,
                   **{f"p_{n}": p for n, p in zip(ContextFeatures.NAMES, ps, strict=True)}}
        return Finding(t=t, active=active, score=1.0 - 10.0 ** -tail, details=details)
