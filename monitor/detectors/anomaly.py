"""Point anomalies: a value the series has (almost) never shown before."""

from __future__ import annotations

import math

from monitor.detectors.base import Detector, Finding
from monitor.detectors.context import RankWindow


class RareValueDetector(Detector):
    """Empirical two-sided tail probability of each value within the series' own recent history.

    Test: with the last ``history`` samples H (m = |H|), the value x gets
    p = 2 · min(#{h ≤ x}, #{h ≥ x}) / m — the fraction of history at least as extreme, on the
    nearer side, as in a two-sided rank test. A value beyond everything in H would get p = 0; it gets
    p = (2/m) · 10^(−e), e the excess over the extreme in units of the history's spread
    (IQR, floored at 1 % of its range), so "slightly beyond" and "far beyond" stay ordered.
    The value triggers when p ≤ ``alpha``.

    Why this test: it assumes no distribution, seasonality model or stationarity beyond "the recent
    past is the reference" — what an operator means by "never seen that before" on heterogeneous
    series (CPU ratios, byte rates, latencies, temperatures) — and costs O(log m) to look up.

    Episodes: ``active`` stays true until ``hold_samples`` consecutive samples have passed without a
    trigger, so one incident is one episode (and one alert), not a burst of flapping alerts.
    Nothing is reported before ``min_history`` samples. ``score`` is 1 − p.
    """

    def __init__(
        self, history: int = 4000, min_history: int = 100, alpha: float = 0.0018, hold_samples: int = 150
    ) -> None:
        if history < 10 or not 2 <= min_history <= history:
            raise ValueError("history >= 10 and 2 <= min_history <= history required")
        if not 0 < alpha < 1 or hold_samples < 0:
            raise ValueError("0 < alpha < 1 and hold_samples >= 0 required")
        self.history = history
        self.min_history = min_history
        self.alpha = alpha
        self.hold_samples = hold_samples
        self.reset()

    def reset(self) -> None:
        self._window = RankWindow(self.history)
        self._since_trigger: int | None = None

    def p_value(self, x: float) -> float:
        """Two-sided tail probability of ``x`` within the current history (1.0 when empty)."""
        return self._window.p_value(x)

    def update(self, t: float, value: float) -> Finding:
        ready = len(self._window) >= self.min_history
        p = self.p_value(value) if ready else 1.0
        self._window.add(value)
        if ready and p <= self.alpha:
            self._since_trigger = 0
        elif self._since_trigger is not None:
            self._since_trigger += 1
            if self._since_trigger >= self.hold_samples:
                self._since_trigger = None
        active = self._since_trigger is not None
        surprise = -math.log10(p) if p > 0 else math.inf
        return Finding(t=t, active=active, score=1.0 - p, details={"p_value": p, "surprise": surprise})
