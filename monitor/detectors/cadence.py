"""Windows in steps as well as seconds: detectors that follow the series' own sampling interval.

A Prometheus scrape delivers a sample every few seconds, a verl ``file`` logger one per training step
(15 s to 15 min). A rule sized in seconds (a 30-min leak window, a 10-min staleness gap) holds 360
samples at 5 s and 2 at 15 min. A rule may therefore give, next to each duration parameter, a count of
samples (``steps: {window: 24}``); the detector then runs with ``max(seconds, steps x interval)``,
where the interval is the median of the series' last sample intervals. At scrape cadence the seconds
win and nothing changes; at step cadence the steps do.

``per_step: true`` (rules on a per-step log only): the seconds are only the start-up guess; once
the interval is known every scaled parameter is ``steps x interval x _REBUILD_RATIO`` -- the same rule
then holds at 1 s and at 15 min per step, and since the detector is re-sized whenever the interval moves
by more than ``_REBUILD_RATIO`` (verl's step time grows with the response length), a window of N steps
always holds at least N samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from monitor.detectors.base import Detector, Finding
from monitor.store import Series

_REBUILD_RATIO = 1.25  # re-size when a scaled window is off by more than this factor
_MIN_INTERVALS = 5     # intervals seen before the steps count


class IntervalEstimate:
    """Median of the last ``n`` sample intervals of one series (robust to a slow checkpoint step)."""

    __slots__ = ("_last", "_n", "_gaps")

    def __init__(self, n: int = 16) -> None:
        self._last = -math.inf
        self._n = n
        self._gaps: list[float] = []  # a list, not a deque(maxlen): ~200 B where a deque is ~600

    def add(self, t: float) -> None:
        if math.isfinite(self._last) and t > self._last:
            gaps = self._gaps
            gaps.append(t - self._last)
            if len(gaps) > self._n:
                del gaps[0]
        self._last = t

    def value(self) -> float | None:
        return statistics.median(self._gaps) if len(self._gaps) >= _MIN_INTERVALS else None


def scaled(params: dict[str, Any], steps: dict[str, float], interval: float | None,
           per_step: bool = False) -> dict[str, Any]:
    out = dict(params)
    if interval is None:
        return out
    for key, n in steps.items():
        out[key] = n * interval * _REBUILD_RATIO if per_step else max(float(params.get(key, 0.0)), n * interval)
    return out


class CadenceScaled(Detector):
    """Wraps one detector whose duration parameters follow the sampling interval (module docstring).

    ``warmup_steps``: the first samples of the series are not shown to the detector (a verl run's first
    steps compile kernels and fill caches: its memory peaks ratchet up then, and that is no leak). On a
    re-size the new detector is replayed the retained samples (at most ``history``), so it decides on the
    same data the old one had.
    """

    __slots__ = ("factory", "params", "steps", "warmup_steps", "per_step", "ticks", "_history_len", "interval",
                 "used", "_prev_t", "_floor_gap", "inner", "_history", "_seen", "_last")

    def __init__(self, factory: Callable[[dict[str, Any]], Detector], params: dict[str, Any],
                 steps: dict[str, float], warmup_steps: int = 0, ticks: bool = False, history: int = 2048,
                 per_step: bool = False) -> None:
        self.factory, self.params, self.steps, self.warmup_steps = factory, params, steps, warmup_steps
        self.per_step = per_step
        self.ticks = ticks
        self._history_len = history
        self.reset()

    def reset(self) -> None:
        self.interval = IntervalEstimate()
        self.used: dict[str, Any] = self.params  # identity: "not scaled yet"
        self._prev_t = math.inf
        self._floor_gap = min((float(self.params.get(k, 0.0)) / n for k, n in self.steps.items()), default=0.0)
        self.inner = self.factory(dict(self.params))
        # the samples a re-sized detector is replayed, in a store ring (16 B a sample, growing as they
        # come): a deque of (t, v) tuples was ~110 B a sample, ~220 KB for every leak binding after 3 h
        self._history = Series("", {}, self._history_len, 0)
        self._seen = 0
        self._last = Finding(0.0, False)

    def _needs_resize(self, want: dict[str, Any]) -> bool:
        for key in self.steps:
            old, new = float(self.used.get(key, 0.0)), float(want.get(key, 0.0))
            if old <= 0 or new <= 0:
                if old != new:
                    return True
                continue
            if not 1 / _REBUILD_RATIO <= new / old <= _REBUILD_RATIO:
                return True
        return False

    def update(self, t: float, value: float) -> Finding:
        self._seen += 1
        self.interval.add(t)
        if self._seen <= self.warmup_steps:
            return Finding(t, False)
        self._history.append(t, value)
        # fast path for scraped series (this runs on each of their samples): while unscaled and the gap is far
        # below every seconds/steps ratio, the seconds win and nothing needs computing
        gap = t - self._prev_t
        self._prev_t = t
        if self.steps and (self.per_step or self.used is not self.params or gap * 2.0 >= self._floor_gap):
            want = scaled(self.params, self.steps, self.interval.value(), self.per_step)
            # a re-size waits while the condition holds: the new windows, replayed over samples that came
            # at another step time, need not re-find a change they did not see begin (a reward collapse
            # resolved 130 steps in when verl's step time had grown 25 %)
            if not self._last.active and self._needs_resize(want):
                self.used = want if want != self.params else self.params
                self.inner = self.factory(dict(want))
                ts, vs = self._history.window()
                for ht, hv in zip(ts[:-1].tolist(), vs[:-1].tolist(), strict=True):
                    self.inner.update(ht, hv)
        self._last = self.inner.update(t, value)
        return self._last

    def unfillable(self, interval: float) -> str | None:
        # judged on the windows this interval asks for: the inner detector's may lag behind while a re-size
        # waits for the condition to clear
        want = scaled(self.params, self.steps, interval if interval > 0 else None, self.per_step)
        return self.factory(dict(want)).unfillable(interval)

    def tick(self, now: float) -> Finding:
        tick = getattr(self.inner, "tick", None)
        return tick(now) if tick is not None else self._last
