"""The monitor's answer to ``alerting.evidence.EvidenceReader``: the diagnosis stage reads the series
store through it (live ``verl_kl_coef``, the reward mean before the alerts, the buffer's trend), in the
daemon on wall time and in replay on the data's time."""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.stats import theilslopes

from alerting.clock import Clock
from alerting.evidence import NonFinite, Reading, Trend
from monitor.store import Series, SeriesKey, SeriesStore

MAX_TREND_POINTS = 240  # Theil-Sen is O(n^2): a long window is thinned evenly to this many samples
NONFINITE_KEPT = 256    # NaN/Inf sample times remembered per series


def _node(s: Series) -> str:
    """The node the evaluator puts on this series' alerts (sources resolve it into the ``node`` label)."""
    return s.labels.get("node", "unknown")


class NonFiniteLog:
    """Times of the NaN/Inf samples the pipeline refused, per series (the store never keeps them, yet
    "reward mean is NaN" is evidence)."""

    def __init__(self) -> None:
        self.times: dict[SeriesKey, deque[float]] = {}
        self.series: dict[SeriesKey, Series] = {}

    def add(self, series: Series, t: float) -> None:
        self.series[series.key] = series
        self.times.setdefault(series.key, deque(maxlen=NONFINITE_KEPT)).append(t)


class StoreEvidence:
    def __init__(self, store: SeriesStore, clock: Clock, nonfinite: NonFiniteLog | None = None) -> None:
        self.store = store
        self.clock = clock
        self.nonfinite_log = nonfinite or NonFiniteLog()
        self._by_name: dict[str, list[Series]] = {}
        self._indexed = -1

    def now(self) -> float:
        return self.clock.now()

    def _series(self, name: str, node: str | None, match: dict[str, str] | None) -> list[Series]:
        if len(self.store) != self._indexed:  # series are only ever added: re-index when the count moved
            self._by_name = {}
            for s in self.store:
                self._by_name.setdefault(s.name, []).append(s)
            self._indexed = len(self.store)
        found = [s for s in self._by_name.get(name, [])
                 if len(s) and (node is None or _node(s) == node)
                 and all(s.labels.get(k) == v for k, v in (match or {}).items())]
        return sorted(found, key=lambda s: -s.last_t)

    @staticmethod
    def _reading(s: Series, value: float, t: float) -> Reading:
        return Reading(s.name, dict(s.labels), float(value), float(t))

    def latest(self, name: str, node: str | None = None, match: dict[str, str] | None = None) -> Reading | None:
        found = self._series(name, node, match)
        return self._reading(found[0], found[0].last_v, found[0].last_t) if found else None

    def readings(self, name: str, node: str | None = None,
                 match: dict[str, str] | None = None) -> list[Reading]:
        return [self._reading(s, s.last_v, s.last_t) for s in self._series(name, node, match)]

    def at(self, name: str, t: float, node: str | None = None,
           match: dict[str, str] | None = None) -> Reading | None:
        for s in self._series(name, node, match):
            ts, vs = s.window()
            i = int(np.searchsorted(ts, t, side="right")) - 1
            if i >= 0:
                return self._reading(s, vs[i], ts[i])
        return None

    def median(self, name: str, t0: float, t1: float, node: str | None = None,
               match: dict[str, str] | None = None) -> Reading | None:
        for s in self._series(name, node, match):
            ts, vs = s.window(t0)
            vs = vs[ts <= t1]
            if vs.size:
                return self._reading(s, float(np.median(vs)), t1)
        return None

    def held_since(self, name: str, node: str | None = None, match: dict[str, str] | None = None,
                   tolerance: float = 1e-9) -> Reading | None:
        found = self._series(name, node, match)
        if not found:
            return None
        ts, vs = found[0].window()
        last = vs[-1]
        differs = np.flatnonzero(np.abs(vs - last) > tolerance * max(1.0, abs(last)))
        i = int(differs[-1]) + 1 if differs.size else 0
        return self._reading(found[0], vs[i], ts[i])

    def trend(self, name: str, window_s: float, node: str | None = None,
              match: dict[str, str] | None = None) -> Trend | None:
        found = self._series(name, node, match)
        if not found:
            return None
        s = found[0]
        ts, vs = s.window(s.last_t - window_s)
        if ts.size < 5:
            return None
        if ts.size > MAX_TREND_POINTS:
            keep = np.linspace(0, ts.size - 1, MAX_TREND_POINTS).astype(int)
            ts, vs = ts[keep], vs[keep]
        x = ts - ts[0]
        if np.ptp(vs) == 0:  # a flat series: theilslopes' interval would be degenerate anyway
            slope = lo = hi = 0.0
            intercept = float(vs[0])
        else:
            slope, intercept, lo, hi = (float(v) for v in theilslopes(vs, x, 0.95))
        return Trend(s.name, dict(s.labels), slope, lo, hi, int(ts.size), float(ts[0]), float(ts[-1]),
                     intercept, intercept + slope * float(x[-1]))

    def nonfinite(self, name: str, since: float, node: str | None = None) -> NonFinite | None:
        log = self.nonfinite_log
        for k, times in log.times.items():
            s = log.series[k]
            if s.name != name or (node is not None and _node(s) != node):
                continue
            recent = [t for t in times if t >= since]
            if recent:
                return NonFinite(name, dict(s.labels), len(recent), recent[0], recent[-1])
        return None
