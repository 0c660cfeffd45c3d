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
    re-size the new detector is replayed the samples it was fed (the last ``history`` of them), so it
    decides on the same data the old one had.

    Where they come from: the store's own ring of the series (``replay_from``), or a private copy. The
    evaluator hands over the ring at binding time; it holds every sample the detector is fed, and the same
    values, as long as each stored sample is fed right after it is stored (the pipeline's order) -- then the
    detector's last ``n`` samples are the ring's last ``n``. A private copy duplicated ~2 000 samples of each
    of 2 625 bindings at 1000 GPUs (~25-31 MiB, full after ~2.8 h) and ~4 % of the daemon's CPU encoding
    them. Kept private: an absence detector (fed the scrape's time and refused samples, not the stamps the
    ring holds), a ring that may not hold ``history`` (the store's capacity), and a caller that feeds
    samples it never stored (checked on each sample: the ring's newest must be this one).
    """

    __slots__ = ("factory", "params", "steps", "warmup_steps", "per_step", "ticks", "_history_len", "interval",
                 "used", "_prev_t", "_floor_gap", "inner", "_history", "_seen", "_fed", "_last", "_ring",
                 "history_samples")

    def __init__(self, factory: Callable[[dict[str, Any]], Detector], params: dict[str, Any],
                 steps: dict[str, float], warmup_steps: int = 0, ticks: bool = False, history: int = 2048,
                 per_step: bool = False) -> None:
        self.factory, self.params, self.steps, self.warmup_steps = factory, params, steps, warmup_steps
        self.per_step = per_step
        self.ticks = ticks
        self._history_len = history
        self._ring: Series | None = None  # the store's ring of the series, replayed from (``replay_from``)
        # the ring the evaluator reserves for this binding (0: none, an absence detector keeps its own copy)
        self.history_samples = 0 if ticks else history
        self.reset()

    def reset(self) -> None:
        self.interval = IntervalEstimate()
        self.used: dict[str, Any] = self.params  # identity: "not scaled yet"
        self._prev_t = math.inf
        self._floor_gap = min((float(self.params.get(k, 0.0)) / n for k, n in self.steps.items()), default=0.0)
        self.inner = self.factory(dict(self.params))
        # without the store's ring, the samples a re-sized detector is replayed, in a ring of its own (16 B a
        # sample, growing as they come; a deque of (t, v) tuples was ~110 B a sample), made at the first one
        self._history: Series | None = None
        self._seen = 0
        self._fed = 0  # samples fed to the detector (after the warm-up): the ring's last ones are they
        self._last = Finding(0.0, False)

    def replay_from(self, series: Series) -> bool:
        """Replay from ``series``' ring (the one this detector's samples are stored in) instead of a copy
        of its own; True where it will. Only before the first sample and where the ring holds ``history``
        (its capacity never shrinks)."""
        if self.ticks or self._seen or series.capacity < self._history_len:
            return False
        self._ring = series
        return True

    def _private(self) -> Series:
        """The detector's own copy of what it was fed, from now on: made at its first sample, or where the
        ring stopped holding it (a caller fed a sample it had not stored), from the ring's samples up to the
        last one fed."""
        history = Series("", {}, self._history_len, 0)
        ring, self._ring = self._ring, None
        if ring is not None and self._fed:
            ts, vs = ring.window()
            end = int(ts.searchsorted(self._prev_t, side="right"))
            for ht, hv in zip(ts[max(0, end - self._fed):end].tolist(), vs[max(0, end - self._fed):end].tolist(),
                              strict=True):
                history.append(ht, hv)
        self._history = history
        return history

    def _replayed(self) -> tuple[list[float], list[float]]:
        """The samples fed before the newest one, the last ``history - 1`` of them, oldest first."""
        ring = self._ring
        if ring is not None:
            ts, vs = ring.window()
            k = min(self._fed, self._history_len)  # the ring holds them (capacity >= history, all stored)
            assert ts.size >= k, "the ring lost samples the detector was fed"
            return ts[ts.size - k: -1].tolist(), vs[vs.size - k: -1].tolist()
        assert self._history is not None  # a sample was fed
        ts, vs = self._history.window()
        return ts[:-1].tolist(), vs[:-1].tolist()

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
        ring = self._ring
        if ring is None or ring.last_t != t or ring.last_v != value:  # == 1 float compare each, ~60 ns
            (self._history or self._private()).append(t, value)
        self._fed += 1
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
                ts, vs = self._replayed()
                for ht, hv in zip(ts, vs, strict=True):
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
