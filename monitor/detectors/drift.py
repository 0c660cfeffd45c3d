"""Slow drift: a significant linear trend over a sliding window, robust to autocorrelation."""

from __future__ import annotations

from collections import deque
from typing import Literal

import numpy as np
from scipy import stats
from statsmodels.regression.linear_model import OLS
from statsmodels.tools.tools import add_constant

from monitor.detectors.base import Detector, Finding

Direction = Literal["up", "down", "both"]


class TrendDriftDetector(Detector):
    """OLS trend with Newey-West (HAC) standard errors over the last ``window`` seconds.

    Test, every ``every`` seconds of sample time once the window holds ``min_samples`` and spans at
    least half its length:

    - slope p-value (one-sided in ``direction``) from OLS with the larger of two autocorrelation-
      robust standard errors: HAC (Newey-West, ``maxlags = floor(4 (n/100)^(2/9))``) and the AR(1)
      effective-sample-size correction -- training metrics are strongly autocorrelated and plain
      OLS p-values would fire on every wander;
    - effect-size floor: the fitted change across the window is at least ``min_effect_sd`` residual
      standard deviations *and* ``min_relative_change`` of the fitted level at the window start (a
      significant but operationally tiny trend is not a drift);
    - persistence: the above holds for ``persistence`` consecutive evaluations.

    Tested by tests/monitor/test_scenarios.py::test_kl_drift_fires_before_static_threshold and
    ::test_stationary_autocorrelated_kl_is_quiet (24 h).
    """

    def __init__(self, window: float = 3600.0, every: float = 60.0, alpha: float = 0.01,
                 direction: Direction = "up", min_effect_sd: float = 2.0, min_relative_change: float = 1.0,
                 persistence: int = 2, min_samples: int = 30) -> None:
        if direction not in ("up", "down", "both"):
            raise ValueError(f"direction must be up, down or both, got {direction!r}")
        self.window_s, self.every_s, self.alpha, self.direction = window, every, alpha, direction
        self.min_effect_sd, self.min_relative_change = min_effect_sd, min_relative_change
        self.persistence, self.min_samples = persistence, min_samples
        self.reset()

    def reset(self) -> None:
        self._ts: deque[float] = deque()  # two flat deques: np.fromiter on them is 5x faster than
        self._vs: deque[float] = deque()  # converting a deque of (t, v) tuples
        self._next_eval = -np.inf
        self._streak = 0
        self._last = Finding(0.0, False)

    def update(self, t: float, value: float) -> Finding:
        self._ts.append(t)
        self._vs.append(value)
        while self._ts[0] < t - self.window_s:
            self._ts.popleft()
            self._vs.popleft()
        if t < self._next_eval:
            return self._last  # the evaluator takes the sample time from the sample, not the finding
        self._next_eval = t + self.every_s
        self._last = self._evaluate(t)
        return self._last

    def _evaluate(self, t: float) -> Finding:
        n = len(self._ts)
        if n < self.min_samples or t - self._ts[0] < self.window_s / 2:
            self._streak = 0
            return Finding(t, False)
        ts, vs = np.fromiter(self._ts, float, n), np.fromiter(self._vs, float, n)
        x = (ts - ts[0]) / 60.0
        fit = OLS(vs, add_constant(x)).fit(
            cov_type="HAC", cov_kwds={"maxlags": int(4 * (n / 100.0) ** (2 / 9))})
        slope_per_min, intercept = float(fit.params[1]), float(fit.params[0])
        resid = np.asarray(fit.resid)
        # Newey-West with the rule-of-thumb lag count undercorrects slow AR(1) wander (phi ~ 0.9 at
        # per-step sampling); the effective-sample-size correction (1+phi)/(1-phi) on the plain OLS
        # error does not, so the larger of the two standard errors is used.
        denom = float(np.dot(resid, resid))
        phi = float(np.clip(np.dot(resid[1:], resid[:-1]) / denom, 0.0, 0.99)) if denom > 0 else 0.0
        ols_se = float(np.sqrt(denom / (n - 2) / np.sum((x - x.mean()) ** 2)))
        se = max(float(fit.bse[1]), ols_se * float(np.sqrt((1 + phi) / (1 - phi))))
        z = slope_per_min / se if se > 0 else 0.0
        if self.direction == "up":
            p = float(stats.norm.sf(z))
        elif self.direction == "down":
            p = float(stats.norm.cdf(z))
        else:
            p = float(2 * stats.norm.sf(abs(z)))
        change = slope_per_min * float(x[-1])
        resid_sd = float(np.std(resid, ddof=2))
        level = abs(intercept)
        relative = abs(change) / level if level > 0 else np.inf
        ok = (p < self.alpha and abs(change) >= self.min_effect_sd * resid_sd
              and relative >= self.min_relative_change)
        self._streak = self._streak + 1 if ok else 0
        details = {"p_value": p, "slope_per_s": slope_per_min / 60.0, "slope_per_min": slope_per_min,
                   "intercept": intercept, "t_ref": float(ts[0]), "window_start": float(ts[0]),
                   "change": change, "relative_change": relative, "resid_sd": resid_sd, "ar1": phi,
                   "value": float(vs[-1])}
        return Finding(t, self._streak >= self.persistence, 1.0 - p, details)
