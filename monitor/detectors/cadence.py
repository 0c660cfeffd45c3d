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
from monitor.series.store import Series

_REBUILD_RATIO = 1.25  # re-size when a scaled window is off by more than this factor
_MIN_INTERVALS = 5     # intervals seen before the steps count
# a scraped series' re-size replays its spans twice over (a window, and as much before it to fill and confirm
# in), counted at its interval with a margin for jitter; a per-step log's rules replay up to HISTORY samples
_REPLAY_SPANS, _JITTER, HISTORY = 2.0, 1.25, 2048
# samples seen at which that count is worked out again (from the 6th the interval is known: _MIN_INTERVALS):
# the evaluator re-reserves the ring at these counts too (``evaluator._SIZE_CHECKS``), right after this
# detector's update, before the next sample is stored
_GROW_AT = frozenset({_MIN_INTERVALS + 1, 20, 200, 2000})


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
    re-size the new detector is replayed the samples it was fed, so it decides on the same data the old one
    had: a per-step rule the last ``history`` of them; any other the last ``history_samples``, its spans
    twice over at its series' interval (``_REPLAY_SPANS``) -- a scraped series re-sizes only when its
    cadence slows past ``seconds / steps``, and 2048 samples of 5-s GPU memory were 2.8 h that no re-sized
    30-min window reads (~6.8 MiB of rings at 1000 GPUs). That count only grows, as the ring's room does,
    and a replay takes no more samples than were fed since it last grew, so the ring and a private copy
    replay the same ones.

    Where they come from: the store's own ring of the series (``replay_from``), or a private copy. The
    evaluator hands over the ring at binding time; it holds every sample the detector is fed, and the same
    values, as long as each stored sample is fed right after it is stored (the pipeline's order) -- then the
    detector's last ``n`` samples are the ring's last ``n``. A private copy duplicated ~2 000 samples of each
    of 2 625 bindings at 1000 GPUs (~25-31 MiB, full after ~2.8 h) and ~4 % of the daemon's CPU encoding
    them. Kept private: an absence detector (fed the scrape's time and refused samples, not the stamps the
    ring holds), a ring that may not hold ``history`` (the store's capacity), and a caller that feeds
    samples it never stored (checked on each sample: the ring's newest must be this one).
    """

    __slots__ = ("factory", "params", "steps", "warmup_steps", "per_step", "ticks", "_history_len", "_max_history",
                 "interval", "used", "_prev_t", "_floor_gap", "inner", "_history", "_seen", "_held", "_last",
                 "_ring", "history_samples")

    def __init__(self, factory: Callable[[dict[str, Any]], Detector], params: dict[str, Any],
                 steps: dict[str, float], warmup_steps: int = 0, ticks: bool = False, history: int = HISTORY,
                 per_step: bool = False) -> None:
        self.factory, self.params, self.steps, self.warmup_steps = factory, params, steps, warmup_steps
        self.per_step = per_step
        self.ticks = ticks
        self._max_history = history
        # samples a re-size replays (at most): before the interval is known, what the steps ask for; grows
        # (``_grow``), never shrinks: it is the ring's room
        # (none without steps: nothing re-sizes, only a warm-up is skipped)
        self._history_len = 0 if not steps else history if per_step else min(history, math.ceil(
            _REPLAY_SPANS * _JITTER * sum(steps.values())))
        self._ring: Series | None = None  # the store's ring of the series, replayed from (``replay_from``)
        # the ring the evaluator reserves for this binding (0: none, an absence detector keeps its own copy)
        self.history_samples = 0 if ticks else self._history_len
        self.reset()

    def _grow(self) -> None:
        """A scraped series' replay at its interval now: its scaled spans, twice over, in samples."""
        interval = self.interval.value()
        if self.per_step or self.ticks or not self.steps or interval is None or interval <= 0:
            return
        spans = sum(float(v) for k, v in scaled(self.params, self.steps, interval).items() if k in self.steps)
        want = min(self._max_history, math.ceil(_REPLAY_SPANS * _JITTER * spans / interval))
        if want > self._history_len:
            self._history_len = self.history_samples = want
            if self._history is not None:
                self._history.reserve(want)

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
        # samples fed to the detector (after the warm-up) that a ring of ``_history_len`` holds: the ring's last
        # ones are they (at most ``_history_len``; a ring that grows holds no more of the older ones than before)
        self._held = 0
        self._last = Finding(0.0, False)

    def replay_from(self, series: Series) -> bool:
        """Replay from ``series``' ring (the one this detector's samples are stored in) instead of a copy
        of its own; True where it will. Only before the first sample and where the ring holds what a re-size
        replays (its capacity never shrinks; the evaluator reserves ``history_samples`` as that grows), and
        not where nothing is replayed (no ``steps``)."""
        if self.ticks or self._seen or not self._history_len or series.capacity < self._history_len:
            return False
        self._ring = series
        return True

    def _private(self) -> Series:
        """The detector's own copy of what it was fed, from now on: made at its first sample, or where the
        ring stopped holding it (a caller fed a sample it had not stored), from the ring's samples up to the
        last one fed."""
        history = Series("", {}, self._history_len, 0)
        ring, self._ring = self._ring, None
        if ring is not None and self._held:
            ts, vs = ring.window()
            end = int(ts.searchsorted(self._prev_t, side="right"))
            for ht, hv in zip(ts[max(0, end - self._held):end].tolist(), vs[max(0, end - self._held):end].tolist(),
                              strict=True):
                history.append(ht, hv)
        self._history = history
        return history

    def _replayed(self) -> tuple[list[float], list[float]]:
        """The samples fed before the newest one, the last ``_held - 1`` of them, oldest first: the same from
        the ring and from a private copy (either may hold more: a grown ring keeps older samples it had room
        for, a store's chunks some beyond their capacity)."""
        source = self._ring if self._ring is not None else self._history
        assert source is not None  # a sample was fed
        ts, vs = source.window()
        # a store whose ``limits.capacity`` is below what the replay wants caps the ring: it replays what it holds
        k = min(self._held, ts.size)
        return ts[ts.size - k: -1].tolist(), vs[vs.size - k: -1].tolist()

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
            if self._seen in _GROW_AT:
                self._grow()
            return Finding(t, False)
        ring = self._ring
        if self._history_len and (ring is None or ring.last_t != t or ring.last_v != value):  # ~60 ns a compare
            (self._history or self._private()).append(t, value)
        self._held = min(self._held + 1, self._history_len)  # before a growth: the ring held no more
        if self._seen in _GROW_AT:
            self._grow()
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
