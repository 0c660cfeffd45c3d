"""A training signal judged against the run itself, in steps: its recent level against the run's own
reference level (the run's early steps, or the window ``lookback`` steps back once the run is older).

Why not a 30-step change point alone: a slow collapse (entropy /5 over 60 steps at 8-min steps) never
halves against any 30-step window, yet it is /5 against where the run stood before it began. A healthy
trend (entropy 0.9 -> 0.25 over hundreds of steps, responses growing 600 -> 3000 tokens) moves its
signal far less than ``ratio`` inside ``lookback`` steps, or in the direction the catalogue calls healthy.

Every count is in samples: a per-step log has one sample per step whatever the step time, so the same
entry judges 10-s and 1-h steps alike. Once the condition holds, the reference is frozen and the
condition is held while the signal stays ``hold_ratio`` away from it (a collapse that lasts stays paged
even when the sliding reference would have caught up with it).
"""

from __future__ import annotations

import math
from collections import deque

from monitor.detectors.base import Detector, Finding, median

TRANSFORMS = ("identity", "one_minus", "abs")
DIRECTIONS = ("up", "down", "both")


class RunReferenceDetector(Detector):
    def __init__(self, direction: str = "both", ratio: float = 4.0, min_delta: float = 0.0,
                 scale_floor: float = 1e-9, reference: int = 10, recent: int = 5, lookback: int = 120,
                 warmup: int = 5, transform: str = "identity", min_z: float = 0.0,
                 hold_ratio: float | None = None) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        if transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {', '.join(TRANSFORMS)}, got {transform!r}")
        if ratio <= 1.0:
            raise ValueError(f"ratio must be > 1 (a factor away from the reference), got {ratio!r}")
        if recent < 1 or reference < 1 or reference > lookback:
            raise ValueError("need recent >= 1 and 1 <= reference <= lookback samples")
        self.direction, self.ratio, self.min_delta = direction, float(ratio), float(min_delta)
        self.scale_floor, self.transform, self.min_z = float(scale_floor), transform, float(min_z)
        self.reference, self.recent, self.lookback, self.warmup = int(reference), int(recent), int(lookback), int(warmup)
        self.hold_ratio = float(hold_ratio) if hold_ratio is not None else math.sqrt(ratio)
        self.reset()

    def reset(self) -> None:
        self._seen = 0
        self._values: deque[float] = deque(maxlen=self.lookback + self.recent)
        self._frozen: float | None = None

    def _value(self, value: float) -> float:
        if self.transform == "one_minus":
            return 1.0 - value
        if self.transform == "abs":
            return abs(value)
        return value

    def _factor(self, ref: float, now: float) -> float:
        """How many times ``now`` is above (> 1) or below (< 1) the reference, on a floored scale."""
        return max(abs(now), self.scale_floor) / max(abs(ref), self.scale_floor)

    def _beyond(self, ref: float, now: float, ratio: float, spread: float, min_delta: float | None = None) -> str | None:
        """'up' or 'down' when ``now`` stands ``ratio`` times and ``min_delta`` away from ``ref`` (a held
        condition: half of it, so a noisy level at the fault's size does not resolve and page again)."""
        delta = self.min_delta if min_delta is None else min_delta
        if abs(now - ref) < delta or (self.min_z and abs(now - ref) < self.min_z * spread):
            return None
        factor = self._factor(ref, now)
        if self.direction in ("up", "both") and now > ref and factor >= ratio:
            return "up"
        if self.direction in ("down", "both") and now < ref and factor <= 1.0 / ratio:
            return "down"
        return None

    def update(self, t: float, value: float) -> Finding:
        self._seen += 1
        if self._seen <= self.warmup:
            return Finding(t, False)
        vals = self._values
        vals.append(self._value(value))
        if len(vals) < self.reference + self.recent:
            return Finding(t, False)
        n = len(vals)
        now = median([vals[i] for i in range(n - self.recent, n)])
        if self._frozen is not None:
            moved = self._beyond(self._frozen, now, self.hold_ratio, 0.0, self.min_delta / 2.0)
            if moved is not None:
                return self._finding(t, self._frozen, now, moved)
            self._frozen = None
        # the run's own reference: its first steps after the warm-up while the run is young, then the
        # window `lookback` steps back; and the window right before the recent steps (a step change)
        early = [vals[i] for i in range(self.reference)]
        late = [vals[i] for i in range(n - self.recent - self.reference, n - self.recent)]
        for window in (early, late):
            ref = median(window)
            spread = 1.4826 * median([abs(v - ref) for v in window]) if self.min_z else 0.0
            moved = self._beyond(ref, now, self.ratio, spread)
            if moved is not None:
                self._frozen = ref
                return self._finding(t, ref, now, moved)
        return Finding(t, False)

    def _finding(self, t: float, ref: float, now: float, moved: str) -> Finding:
        factor = self._factor(ref, now)
        if self.transform == "one_minus":  # report the signal as written, not its distance from 1
            ref, now = 1.0 - ref, 1.0 - now
        return Finding(t, True, 1.0, {"before": ref, "after": now, "factor": factor,
                                      "relative_change": (now - ref) / ref if ref else 0.0,
                                      "direction": 1.0 if moved == "up" else -1.0})
