"""Distribution shift: two-sample Kolmogorov-Smirnov test, recent window vs. the window before it."""

from __future__ import annotations

import numpy as np

from monitor.detectors.base import Detector, Every, Finding, SampleWindow, short_window
from monitor.detectors.lazy_scipy import ks_2samp


class KSShiftDetector(Detector):
    """Every ``every`` seconds: KS test of the last ``recent`` seconds against the ``reference``
    seconds before them; active when p < ``alpha`` and the KS statistic D >= ``min_statistic``
    (effect-size floor: with thousands of samples any difference is "significant") for
    ``persistence`` consecutive evaluations. ``direction``: ``"down"``/``"up"`` also require the recent
    median below/above the reference's (a verl run's reward rises while it learns: only a fall is news).

    Tested by tests/monitor/test_monitor_detectors.py::test_ks_shift.
    """

    def __init__(self, reference: float = 3600.0, recent: float = 600.0, every: float = 60.0,
                 alpha: float = 0.01, min_statistic: float = 0.3, persistence: int = 2,
                 min_samples: int = 20, direction: str = "both") -> None:
        if direction not in ("both", "down", "up"):
            raise ValueError(f"direction must be 'both', 'down' or 'up', got {direction!r}")
        self.direction = direction
        self.reference_s, self.recent_s, self.every_s = reference, recent, every
        self.alpha, self.min_statistic, self.persistence, self.min_samples = alpha, min_statistic, persistence, min_samples
        self.reset()

    def reset(self) -> None:
        self._window = SampleWindow(self.recent_s + self.reference_s)
        self._every = Every(self.every_s)
        self._streak = 0
        self._last = Finding(0.0, False)

    def unfillable(self, interval: float) -> str | None:
        return (short_window("reference", self.reference_s, interval, self.min_samples)
                or short_window("recent", self.recent_s, interval, self.min_samples))

    def update(self, t: float, value: float) -> Finding:
        self._window.add(t, value)
        if not self._every.due(t):
            return self._last
        ts, vs = self._window.arrays()
        split = int(np.searchsorted(ts, t - self.recent_s, side="left"))
        ref, rec = vs[:split], vs[split:]
        if len(ref) < self.min_samples or len(rec) < self.min_samples:
            self._streak = 0
            self._last = Finding(t, False)
            return self._last
        res = ks_2samp(rec, ref)
        p, d = float(res.pvalue), float(res.statistic)
        before, after = float(np.median(ref)), float(np.median(rec))
        sided = (self.direction == "both" or (self.direction == "down" and after < before)
                 or (self.direction == "up" and after > before))
        self._streak = self._streak + 1 if (p < self.alpha and d >= self.min_statistic and sided) else 0
        self._last = Finding(t, self._streak >= self.persistence, 1.0 - p,
                             {"p_value": p, "statistic": d, "before": before, "after": after, "value": d})
        return self._last
