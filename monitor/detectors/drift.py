"""Slow drift: a significant trend over a sliding window, robust to autocorrelation."""

from __future__ import annotations

from typing import Literal

import numpy as np

from monitor.detectors.base import Detector, Every, Finding, SampleWindow, short_window
from monitor.detectors.lazy_scipy import norm_cdf, norm_sf

Direction = Literal["up", "down", "both"]

# Where the trend may begin, as fractions of the window: 0 is a straight line over the whole window;
# later knots keep at least 30 % of the window as the trend, so a knot never chases the last few points.
KNOTS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7)
# Ramps, (start, end) fractions: a rise that began and ended inside the window, with at least 20 % of
# the window after it as the new level. Without them a fast rise that then holds (KL shooting from 0.03
# to 4.6 within seconds once kl_coef is zeroed, then staying) is fitted by a hinge that cannot bend
# back, whose residuals are so autocorrelated that the slope is never significant: the detector went
# blind to the fastest drifts (a CI run of the demo at 6 steps/s never fired).
RAMPS = tuple((s, e) for s in (0.0, 0.2, 0.4, 0.6) for e in (0.2, 0.4, 0.6, 0.8) if e > s)


class TrendDriftDetector(Detector):
    """Segmented (hinge) OLS trend with autocorrelation-robust standard errors over ``window`` seconds.

    Model: ``y = a + b * clip(x - k, 0, r - k)`` -- flat, then a linear trend from ``k`` to ``r``,
    then flat again. A drift that started inside the window is therefore not diluted by the flat
    stretch before it; that stretch pins the baseline instead. With ``r`` at the window's end this is
    a hinge (a drift still going on); with ``r`` inside it, a ramp (a rise that happened and holds).
    ``(k, r)`` is chosen by least squares from a coarse grid (``KNOTS`` with ``r`` at the end, ``k = 0``
    a plain line; ``RAMPS``). Test, every ``every`` seconds of sample time once the window holds
    ``min_samples`` and spans at least half its length:

    - slope p-value (one-sided in ``direction``), ``p < alpha``, from the larger of two
      autocorrelation-robust standard errors: Newey-West HAC with its lag count chosen from the data
      (Andrews' 1991 AR(1) plug-in bandwidth for the Bartlett kernel) and the AR(1) effective-sample-
      size correction ``sqrt((1 + phi) / (1 - phi))`` (``phi`` of the residuals, Kendall's bias
      correction ``+ (1 + 3 phi) / n``) -- training metrics are autocorrelated and plain OLS p-values
      fire on every wander; HAC alone undercorrects in windows of a few hundred points. The p-value
      is multiplied by the number of models tried (Bonferroni), since ``(k, r)`` was picked from the data;
    - effect-size floors against the series' own noise: the fitted change (``b * (r - k)``) is at
      least ``min_effect_sd`` noise standard deviations, at least ``min_change`` in the series' units
      and at least ``min_relative_change`` of the baseline level ``a``. The noise sd is the larger of
      the window's residual sd and the series' exponentially weighted sd over ``noise_horizon``
      seconds (used once ~0.9 horizon of history is seen). Evaluated every minute, a p-value alone is
      crossed by stationary wander somewhere every day (and windowed AR(1) p-values are optimistic in
      the far tail); the noise-relative floor is what keeps a stationary series quiet for days;
    - persistence: the above holds for ``persistence`` consecutive evaluations.

    The drift must not hide itself: the long-run noise is learnt only from samples seen while
    the last test found no trend (``p >= alpha``), so a drift cannot inflate the noise it is measured
    against; and once firing, the alert holds while the trend does (hysteresis: ``p < keep_alpha``, the
    slope still in ``direction`` and half the effect floors), so a drift that is still climbing does not
    resolve because its window no longer shows a knee.

    ``warmup_rise`` (a per-step training metric such as verl's KL to the reference, which starts at 0 when
    actor == reference and rises to its plateau over the first tens of steps): the series' first samples
    are warm-up until their level settles -- the Theil-Sen rise over the last ``2 x settle`` samples is
    at most ``min_change / 4`` or one noise sd (MAD of differences), on ``settle / 2`` samples in a row, or
    ``max_warmup`` seconds passed (then the window restarts on the last ``2 x settle`` samples) -- and
    nothing before that point enters the window or the noise. A drift that began during the warm-up does
    not settle, and is judged from the forced end on.

    Tested by tests/monitor/test_monitor_scenarios.py::test_kl_drift_fires_before_static_threshold,
    ::test_stationary_autocorrelated_kl_is_quiet (24 h) and tests/monitor/test_monitor_detectors.py.
    """

    def __init__(self, window: float = 5400.0, every: float = 60.0, alpha: float = 0.01,
                 direction: Direction = "up", min_effect_sd: float = 2.5, min_change: float = 0.0,
                 min_relative_change: float = 0.0, persistence: int = 2, min_samples: int = 30,
                 noise_horizon: float = 21600.0, keep_alpha: float = 0.05, warmup_rise: bool = False,
                 max_warmup: float = 3600.0, settle: int = 10) -> None:
        if direction not in ("up", "down", "both"):
            raise ValueError(f"direction must be up, down or both, got {direction!r}")
        self.window_s, self.every_s, self.alpha, self.direction = window, every, alpha, direction
        self.min_effect_sd, self.min_change, self.min_relative_change = min_effect_sd, min_change, min_relative_change
        self.persistence, self.min_samples, self.noise_horizon = persistence, min_samples, noise_horizon
        self.keep_alpha, self.warmup_rise, self.max_warmup, self.settle = keep_alpha, warmup_rise, max_warmup, settle
        self.reset()

    def reset(self) -> None:
        self._window = SampleWindow(self.window_s)
        self._every = Every(self.every_s)
        self._streak = 0
        self._last = Finding(0.0, False)
        self._ew_mean = self._ew_var = 0.0
        self._ew_weight = 0.0  # how much history the exponentially weighted moments hold (0..1)
        self._quiet = True  # the last test found no trend: samples may teach the long-run noise
        self._t0: float | None = None
        self._warm = not self.warmup_rise  # warm-up over (or none to wait for)
        self.warmup_end: float | None = None
        self._settle_streak = 0

    def unfillable(self, interval: float) -> str | None:
        return short_window("window", self.window_s, interval, self.min_samples)

    def _settled(self, t: float) -> bool:
        """End of the run-start warm-up (class docstring); on settling the window restarts there."""
        if self._t0 is None:
            self._t0 = t
        _, vs = self._window.arrays()
        k = self.settle
        if t - self._t0 < self.max_warmup:
            if len(vs) < 2 * k:
                return False
            d = np.diff(vs)
            noise = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2.0)
            recent = vs[-2 * k:]
            i, j = np.triu_indices(len(recent), k=1)
            rise = float(np.median((recent[j] - recent[i]) / (j - i))) * len(recent)  # Theil-Sen over 2k
            if self.direction == "down":
                rise = -rise
            elif self.direction == "both":
                rise = abs(rise)
            # settled: the last 2k samples rise no more than the floor, on k/2 samples in a row (one quiet
            # stretch of autocorrelated noise must not end a warm-up that is still climbing)
            self._settle_streak = self._settle_streak + 1 if rise <= max(self.min_change / 4.0, noise) else 0
            if self._settle_streak < max(1, k // 2):
                return False
            keep = k  # the plateau's last samples are the new window's start
        else:
            # never settled: a drift from (nearly) the start, or a slow warm-up; the window restarts on the
            # last 2k samples either way, so the warm-up's own rise is not fitted as the drift
            keep = min(len(vs), 2 * k)
        ts, vs = self._window.arrays()
        self._window = SampleWindow(self.window_s)
        for ht, hv in zip(ts[-keep:].tolist(), vs[-keep:].tolist(), strict=True):
            self._window.add(ht, hv)
        self._ew_mean, self._ew_var, self._ew_weight = float(np.median(vs[-keep:])), 0.0, 0.0
        self.warmup_end = float(ts[-keep])
        return True

    def update(self, t: float, value: float) -> Finding:
        if not self._warm:
            self._window.add(t, value)
            self._warm = self._settled(t)
            if not self._warm:
                self._last = Finding(t, False, 0.0, {"warmup": 1.0, "value": value})
                return self._last
            self._every = Every(self.every_s)
            if self._every.due(t):
                self._last = self._evaluate(t)
            return self._last
        if not self._window:
            self._ew_mean = value
        elif self._quiet:
            w = 1.0 - float(np.exp(-(t - self._window.ts[-1]) / self.noise_horizon))
            delta = value - self._ew_mean
            self._ew_mean += w * delta
            self._ew_var = (1.0 - w) * (self._ew_var + w * delta * delta)
            self._ew_weight += w * (1.0 - self._ew_weight)
        self._window.add(t, value)
        if self._every.due(t):
            self._last = self._evaluate(t)
        return self._last

    def _evaluate(self, t: float) -> Finding:
        n = len(self._window)
        if n < self.min_samples or t - self._window.ts[0] < self.window_s / 2:
            self._streak = 0
            return Finding(t, False)
        ts, vs = self._window.arrays()
        x = (ts - ts[0]) / 60.0
        knot, end, design = best_trend(x, vs)
        fit = OLSFit(vs, design)
        resid = fit.resid
        denom = float(np.dot(resid, resid))
        phi = float(np.dot(resid[1:], resid[:-1]) / denom) if denom > 0 else 0.0
        phi = float(np.clip(phi + (1 + 3 * phi) / n, 0.0, 0.99))  # Kendall's small-sample bias correction
        hac_se = float(fit.hac_bse(andrews_lags(phi, n))[1])
        se = max(hac_se, float(fit.bse[1]) * float(np.sqrt((1 + phi) / (1 - phi))))
        slope_per_min, intercept = float(fit.params[1]), float(fit.params[0])
        z = slope_per_min / se if se > 0 else 0.0
        if self.direction == "up":
            p = norm_sf(z)
        elif self.direction == "down":
            p = norm_cdf(z)
        else:
            p = 2 * norm_sf(abs(z))
        p = min(1.0, p * (len(KNOTS) + len(RAMPS)))  # Bonferroni: the model was chosen by looking at the data
        change = slope_per_min * (end - knot)
        resid_sd = float(np.sqrt(denom / (n - 2)))
        # The noise scale of the effect floor: the larger of the window's residual sd and the series'
        # sd over ``noise_horizon`` (exponentially weighted, once that much history is seen). In a
        # window of a few hundred autocorrelated points the residual sd alone is itself noisy, and it
        # is smallest exactly when a wander looks like a trend.
        long_sd = float(np.sqrt(self._ew_var)) if self._ew_weight > 0.6 else 0.0
        noise = max(resid_sd, long_sd)
        level = abs(intercept)
        relative = abs(change) / level if level > 0 else np.inf
        ok = (p < self.alpha and abs(change) >= self.min_effect_sd * noise
              and abs(change) >= self.min_change and relative >= self.min_relative_change)
        if not ok and self._last.active:  # hysteresis: a drift that still holds keeps its alert
            sided = {"up": slope_per_min > 0, "down": slope_per_min < 0}.get(self.direction, True)
            ok = (sided and p < self.keep_alpha and abs(change) >= 0.5 * self.min_effect_sd * noise
                  and abs(change) >= 0.5 * self.min_change and relative >= 0.5 * self.min_relative_change)
        self._quiet = p >= self.alpha and not ok
        self._streak = self._streak + 1 if ok else 0
        # The plot draws intercept + slope * (t - t_ref) from window_start on: the trend segment,
        # from the knot, with the flat stretch before it shown as context.
        trend_start, trend_end = float(ts[0]) + 60.0 * knot, float(ts[0]) + 60.0 * end
        details = {"p_value": p, "slope_per_s": slope_per_min / 60.0, "slope_per_min": slope_per_min,
                   "intercept": intercept, "t_ref": trend_start, "window_start": trend_start,
                   "trend_start": trend_start, "trend_end": trend_end, "fit_start": float(ts[0]),
                   "change": change, "relative_change": relative, "resid_sd": resid_sd, "noise_sd": noise, "ar1": phi,
                   "value": float(vs[-1])}
        return Finding(t, self._streak >= self.persistence, 1.0 - p, details)


class OLSFit:
    """Least squares with its classical and Newey-West (HAC, Bartlett kernel) standard errors: what
    ``statsmodels``' ``OLS(y, X).fit()`` and ``.get_robustcov_results(cov_type="HAC", maxlags=L)`` give
    (pseudo-inverse solve, no small-sample correction; tests/monitor/test_drift_ols.py compares the two).
    Our own rather than statsmodels' because importing ``statsmodels.regression`` loads pandas, pyarrow
    and patsy, ~80 MB resident in a sidecar whose budget is the Prometheus beside it, for these few lines
    of linear algebra."""

    def __init__(self, y: np.ndarray, x: np.ndarray) -> None:
        self.x = x
        pinv = np.linalg.pinv(x)
        self.params = pinv @ y
        self.resid = y - x @ self.params
        self.bread = pinv @ pinv.T  # (X'X)^-1
        n, k = x.shape
        scale = float(self.resid @ self.resid) / (n - k)
        self.bse = np.sqrt(scale * np.diag(self.bread))

    def hac_bse(self, lags: int) -> np.ndarray:
        """Newey-West standard errors with ``lags`` lags: bread @ S @ bread, where S sums the scores'
        autocovariances up to ``lags`` with Bartlett weights ``1 - l / (lags + 1)``."""
        xu = self.x * self.resid[:, None]
        meat = xu.T @ xu
        for lag in range(1, lags + 1):
            s = xu[lag:].T @ xu[:-lag]
            meat += (1.0 - lag / (lags + 1.0)) * (s + s.T)
        return np.sqrt(np.diag(self.bread @ meat @ self.bread))


def best_trend(x: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """The trend's start and end (minutes from the window start) among the hinges (``KNOTS``) and
    ramps (``RAMPS``) whose fit is best, and its design matrix."""
    span = float(x[-1])
    best: tuple[float, float, float, np.ndarray] | None = None
    for start, end in [(k, 1.0) for k in KNOTS] + list(RAMPS):
        knot, stop = start * span, end * span
        design = np.column_stack([np.ones(len(x)), np.clip(x - knot, 0.0, stop - knot)])
        beta = np.linalg.lstsq(design, y, rcond=None)[0]
        err = float(np.sum((y - design @ beta) ** 2))
        if best is None or err < best[0]:
            best = (err, knot, stop, design)
    assert best is not None
    return best[1], best[2], best[3]


def andrews_lags(phi: float, n: int) -> int:
    """Andrews (1991) AR(1) plug-in bandwidth for the Bartlett kernel: 1.1447 (alpha1 n)^(1/3)."""
    alpha1 = 4 * phi * phi / ((1 - phi) ** 2 * (1 + phi) ** 2)
    return int(min(max(1, np.ceil(1.1447 * (alpha1 * n) ** (1 / 3))), n // 4))
