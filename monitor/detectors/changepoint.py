"""Abrupt level shifts (change points) in one streaming series.

The article's case: tokens/s falls from 12000 to 6000 and stays there. A static threshold cannot
express "half of what it was", and a spike filter cannot tell a dip from a new level; a change-point
test can.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from monitor.detectors.base import Detector, Finding, SampleWindow, median, short_window
from monitor.detectors.lazy_scipy import kendalltau, mannwhitneyu

Direction = Literal["down", "up", "both"]


def best_split(values: np.ndarray, min_size: int) -> int:
    """Index ``k`` that best splits ``values`` into two constant-median pieces (L1 cost).

    The same cost as ruptures' ``l1`` model with one breakpoint; written here because it runs on a
    window of at most a few hundred points once per confirmed shift, where building a ruptures
    estimator would cost more than the scan itself.
    """
    n = len(values)
    best_k, best_cost = min_size, math.inf
    for k in range(min_size, n - min_size + 1):
        left, right = values[:k], values[k:]
        cost = np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum()
        if cost < best_cost:
            best_k, best_cost = k, cost
    return best_k


class LevelShiftDetector(Detector):
    """Online two-window change-point test for sustained level shifts.

    Test, after every sample: the *recent* window (the last ``confirm_s`` seconds, at least
    ``min_recent`` samples) is compared with the *baseline* (the up to ``baseline_s`` seconds of the
    current segment before it, at least ``min_baseline`` samples). A shift is confirmed when all of:

    - the one-sided Mann-Whitney U test says recent and baseline differ in location, p < ``alpha``
      (rank-based: no normality assumption, and a single wild sample cannot carry it);
    - the medians differ by at least ``min_relative_shift`` of the baseline median (the operator's
      effect-size floor: "≥ 30 % less throughput", not "statistically different");
    - the medians differ by at least ``min_z`` robust standard deviations (1.4826·MAD) of the
      baseline, so a noisy series needs a shift that stands out of its own noise;
    - the baseline is not itself trending towards the new level (Kendall's tau of the baseline
      against time at most ``max_trend_tau`` in the shift's direction): a trend that carries on is
      drift — the drift detector's case — not an abrupt shift.

    On confirmation the change time is located by the best single L1 split of baseline+recent
    (ruptures' ``l1`` cost), the pre-change median is kept as the *reference*, and a new segment
    starts at the change: the detector re-learns its baseline from post-change samples, which gives a
    natural refractory period and lets it find the next change (multiple change points per series).

    ``active`` is true while the current level (median of the recent window) still differs from the
    reference by ``min_relative_shift`` in ``direction``; a recovery clears it. Samples during the
    first ``warmup_s`` seconds of the series are ignored: start-up ramps (compilation, cache warm-up)
    are not a regime. State is bounded: at most ``max_samples`` samples of the current segment.

    Why a windowed rank test instead of CUSUM/BOCPD: CUSUM needs the pre-change mean and variance
    known in advance and BOCPD a likelihood model and hazard rate; training throughput has neither
    stable noise nor Gaussian tails, while a rank test over two windows needs only "the last minutes
    look different from the ten before", is exact for small samples, and its delay is bounded by
    ``confirm_s`` whatever the sampling interval.
    """

    def __init__(
        self,
        min_relative_shift: float = 0.3,
        direction: Direction = "both",
        baseline_s: float = 600.0,
        confirm_s: float = 120.0,
        min_baseline: int = 8,
        min_recent: int = 4,
        alpha: float = 1e-3,
        min_z: float = 3.0,
        max_trend_tau: float = 0.4,
        warmup_s: float = 300.0,
        max_samples: int = 2000,
    ) -> None:
        if direction not in ("down", "up", "both"):
            raise ValueError(f"direction must be 'down', 'up' or 'both', got {direction!r}")
        if min_relative_shift < 0 or baseline_s <= 0 or confirm_s <= 0 or not 0 < alpha < 1:
            raise ValueError("min_relative_shift >= 0, baseline_s > 0, confirm_s > 0, 0 < alpha < 1 required")
        if min_baseline < 2 or min_recent < 1:
            raise ValueError("min_baseline >= 2 and min_recent >= 1 required")
        self.min_relative_shift = min_relative_shift
        self.direction: Direction = direction
        self.baseline_s = baseline_s
        self.confirm_s = confirm_s
        self.min_baseline = min_baseline
        self.min_recent = min_recent
        self.alpha = alpha
        self.min_z = min_z
        self.max_trend_tau = max_trend_tau
        self.warmup_s = warmup_s
        self.max_samples = max_samples
        self.reset()

    def reset(self) -> None:
        # the segment's (t, v) in a numpy buffer: its windows are slices, not rebuilt from a deque of
        # tuples each update (~100 B a sample there, 16 here); trimmed by ``_windows`` as before
        self._segment = SampleWindow(math.inf, maxlen=self.max_samples,
                                     sized_for=self.baseline_s + self.confirm_s)
        self._first_t: float | None = None
        self._reference: float | None = None
        self._last_change: dict[str, float] = {}
        self.change_points: list[float] = []  # change times confirmed so far (for backtests and plots)

    def unfillable(self, interval: float) -> str | None:
        return (short_window("baseline_s", self.baseline_s, interval, self.min_baseline)
                or short_window("confirm_s", self.confirm_s, interval, self.min_recent))

    # -- helpers -------------------------------------------------------------------------------

    def _relative(self, before: float, after: float) -> float:
        if before == 0.0:
            return 0.0 if after == 0.0 else math.copysign(math.inf, after)
        return (after - before) / abs(before)

    def _matches_direction(self, rel: float) -> bool:
        if self.direction == "down":
            return rel <= -self.min_relative_shift
        if self.direction == "up":
            return rel >= self.min_relative_shift
        return abs(rel) >= self.min_relative_shift

    def _windows(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cut = t - self.confirm_s
        start = cut - self.baseline_s
        self._segment.drop_before(start)
        ts, vs = self._segment.views()
        split = int(np.searchsorted(ts, cut, side="right"))
        return ts, vs[:split], vs[split:]

    def _trending(self, base: np.ndarray, shift: float) -> bool:
        if self.max_trend_tau >= 1.0:
            return False
        tau = float(kendalltau(np.arange(len(base)), base).statistic)
        towards = math.copysign(1.0, tau) == math.copysign(1.0, shift)
        return math.isfinite(tau) and abs(tau) > self.max_trend_tau and towards

    # -- the test ------------------------------------------------------------------------------

    def update(self, t: float, value: float) -> Finding:
        if self._first_t is None:
            self._first_t = t
        if t - self._first_t < self.warmup_s:
            return Finding(t=t, active=False)
        self._segment.add(t, value)
        ts, base, recent = self._windows(t)
        if len(base) < self.min_baseline or len(recent) < self.min_recent:
            return self._status(t, recent, p_value=1.0)

        before, after = median(base), median(recent)
        rel = self._relative(before, after)
        sigma = 1.4826 * median(np.abs(base - before))
        z = abs(after - before) / sigma if sigma > 0 else (math.inf if after != before else 0.0)
        if abs(rel) < self.min_relative_shift or z < self.min_z or self._trending(base, after - before):
            return self._status(t, recent, p_value=1.0)
        side = "less" if after < before else "greater"
        p_value = float(mannwhitneyu(recent, base, alternative=side).pvalue)
        if p_value >= self.alpha:
            return self._status(t, recent, p_value=p_value)

        self._confirm(ts, np.concatenate([base, recent]), before, after, rel, p_value)
        # The segment now starts at the change: judge the level on post-change samples only.
        seg_t, seg_v = self._segment.views()
        recent = seg_v[seg_t > t - self.confirm_s]
        return self._status(t, recent, p_value=p_value)

    def _confirm(
        self, ts: np.ndarray, values: np.ndarray, before: float, after: float, rel: float, p_value: float
    ) -> None:
        k = best_split(values, min_size=min(self.min_recent, len(values) // 2))
        change_t = float(ts[k])
        if self._reference is None:
            self._reference = before if self._matches_direction(rel) else None
        elif not self._matches_direction(self._relative(self._reference, after)):
            self._reference = None  # recovered: the next shift is judged against its own baseline
        self._last_change = {
            "before": before,
            "after": after,
            "relative_change": rel,
            "change_t": change_t,
            "p_value": p_value,
        }
        self.change_points.append(change_t)
        self._segment.drop_first(k)

    def _status(self, t: float, recent: np.ndarray, p_value: float) -> Finding:
        if self._reference is None or len(recent) == 0:
            return Finding(t=t, active=False, score=1.0 - p_value)
        level = median(recent)
        rel = self._relative(self._reference, level)
        if not self._matches_direction(rel):
            return Finding(t=t, active=False, score=1.0 - p_value)
        details = dict(self._last_change)
        details.update(before=self._reference, after=level, relative_change=rel)
        return Finding(t=t, active=True, score=1.0, details=details)
