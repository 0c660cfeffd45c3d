"""Series store: bounded numpy ring buffers per series, unit normalisation, staleness, cardinality cap.

Every sample enters here before any detector sees it. Values are normalised to base units on the way
in (dcgm-exporter reports framebuffer MiB and utilisation percent; our trainer exports bytes and
ratios), so one rule threshold serves both name families.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from monitor.selectors import Selector

MIB = 1024.0 * 1024.0

# name -> factor to base units (the DCGM field docs state MiB for FB_* and % for *_UTIL).
UNIT_FACTORS: dict[str, float] = {
    "DCGM_FI_DEV_FB_USED": MIB,
    "DCGM_FI_DEV_FB_FREE": MIB,
    "DCGM_FI_DEV_FB_TOTAL": MIB,
    "DCGM_FI_DEV_FB_RESERVED": MIB,
    "DCGM_FI_DEV_GPU_UTIL": 0.01,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 0.01,
    "DCGM_FI_DEV_ENC_UTIL": 0.01,
    "DCGM_FI_DEV_DEC_UTIL": 0.01,
}

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def series_key(name: str, labels: dict[str, str]) -> SeriesKey:
    return name, tuple(sorted(labels.items()))


class Series:
    """One series' recent history in a fixed-size ring (oldest samples overwritten)."""

    __slots__ = ("name", "labels", "key", "id", "_t", "_v", "_n", "_head", "last_t", "last_v", "factor",
                 "_interval", "_interval_at")

    def __init__(self, name: str, labels: dict[str, str], capacity: int, sid: int) -> None:
        self.name = name
        self.labels = labels
        self.key = series_key(name, labels)
        self.id = sid
        self._t = np.empty(capacity)
        self._v = np.empty(capacity)
        self._n = 0
        self._head = 0
        self.last_t = -math.inf
        self.last_v = math.nan
        self.factor = UNIT_FACTORS.get(name, 1.0)
        self._interval = 0.0
        self._interval_at = -math.inf

    def interval(self, n: int = 16) -> float:
        """Median of the last ``n`` sample intervals (0.0 with fewer than 3): the series' own cadence,
        a scrape interval or, for a per-step log, the step time. Cached until the next sample."""
        if self._interval_at == self.last_t:
            return self._interval
        cap = len(self._t)
        k = min(self._n, n + 1)
        if k < 4:
            return 0.0
        idx = (self._head - k + np.arange(k)) % cap
        self._interval = float(np.median(np.diff(self._t[idx])))
        self._interval_at = self.last_t
        return self._interval

    def append(self, t: float, value: float) -> float:
        """Store a raw sample; returns the value in base units."""
        v = value * self.factor
        cap = len(self._t)
        self._t[self._head] = t
        self._v[self._head] = v
        self._head = (self._head + 1) % cap
        self._n = min(self._n + 1, cap)
        self.last_t, self.last_v = t, v
        return v

    def window(self, since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
        """Samples with t >= since, oldest first (copies)."""
        cap = len(self._t)
        if self._n < cap:
            t, v = self._t[: self._n], self._v[: self._n]
        else:
            t = np.concatenate([self._t[self._head:], self._t[: self._head]])
            v = np.concatenate([self._v[self._head:], self._v[: self._head]])
        i = int(np.searchsorted(t, since, side="left"))
        return t[i:].copy(), v[i:].copy()

    def __len__(self) -> int:
        return self._n


@dataclass(frozen=True)
class StoreLimits:
    capacity: int = 4096           # samples per series: 5.7 h at 5 s
    max_series: int = 20000
    max_series_per_metric: int = 2000
    stale_after_s: float = 300.0   # Prometheus' lookback delta


class SeriesStore:
    """All series, bounded: new series beyond the caps are refused and counted by reason."""

    def __init__(self, limits: StoreLimits | None = None,
                 on_drop: Callable[[str], None] | None = None) -> None:
        self.limits = limits or StoreLimits()
        self._series: dict[SeriesKey, Series] = {}
        self._per_metric: dict[str, int] = {}
        self._on_drop = on_drop or (lambda reason: None)
        self.dropped: dict[str, int] = {}

    def get_or_create(self, name: str, labels: dict[str, str]) -> Series | None:
        key = series_key(name, labels)
        s = self._series.get(key)
        if s is not None:
            return s
        reason = None
        if len(self._series) >= self.limits.max_series:
            reason = "max_series"
        elif self._per_metric.get(name, 0) >= self.limits.max_series_per_metric:
            reason = "max_series_per_metric"
        if reason:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            self._on_drop(reason)
            return None
        s = Series(name, dict(labels), self.limits.capacity, len(self._series))
        self._series[key] = s
        self._per_metric[name] = self._per_metric.get(name, 0) + 1
        return s

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[Series]:
        return iter(list(self._series.values()))

    def get(self, key: SeriesKey) -> Series | None:
        return self._series.get(key)

    def select(self, selector: Selector) -> list[Series]:
        return [s for s in self._series.values() if selector.matches(s.name, s.labels)]

    def is_stale(self, s: Series, now: float) -> bool:
        return now - s.last_t > self.limits.stale_after_s
