"""A level judged against the run's own start: host RAM a verl run uses (``perf/cpu_memory_used_gb``) that
has grown to ``ratio`` x where it stood once the run had warmed up is the run filling the node, however
slowly it got there -- a trailing baseline would have grown with it (189 -> 731 GB over a run is never
1.3x its last 100 steps) and the node has no total RAM in verl's keys to count down to.

``ReferenceRiseDetector`` (rule type ``reference_rise``): the reference is the median of samples
``warmup`` .. ``warmup + reference`` (the first steps spawn dataloader and rollout workers); active while
the median of the last ``recent`` samples is at least ``ratio`` x the reference and ``min_delta`` above it.
A series that restarts (``reset``: a resumed run) takes a new reference. Tested by
tests/monitor/test_memory_work.py.
"""

from __future__ import annotations

import statistics
from collections import deque

from monitor.detectors.base import Detector, Finding


class ReferenceRiseDetector(Detector):
    def __init__(self, ratio: float = 1.3, min_delta: float = 0.0, warmup: int = 5, reference: int = 10,
                 recent: int = 3) -> None:
        if ratio <= 1.0:
            raise ValueError(f"ratio must be > 1 (a multiple of the run's early level), got {ratio}")
        if reference < 1 or recent < 1 or warmup < 0:
            raise ValueError("reference and recent must be >= 1 sample, warmup >= 0")
        self.ratio, self.min_delta, self.warmup, self.reference, self.recent = ratio, min_delta, warmup, reference, recent
        self.reset()

    def reset(self) -> None:
        self._seen = 0
        self._early: list[float] = []
        self._ref: float | None = None
        self._last: deque[float] = deque(maxlen=self.recent)

    def update(self, t: float, value: float) -> Finding:
        self._seen += 1
        self._last.append(value)
        if self._ref is None:
            if self._seen > self.warmup:
                self._early.append(value)
            if len(self._early) >= self.reference:
                self._ref = statistics.median(self._early)
            return Finding(t, False)
        now = statistics.median(self._last)
        ref = self._ref
        hit = ref > 0 and now >= self.ratio * ref and now - ref >= self.min_delta
        return Finding(t, hit, min(1.0, now / (self.ratio * ref)) if ref > 0 else 0.0,
                       {"value": value, "reference": ref, "ratio": now / ref if ref > 0 else float("inf")})
