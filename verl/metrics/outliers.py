"""Recent (prompt, reward) pairs and the most anomalous of them, for ``/api/v1/reward_outliers``.

Anomaly = robust z-score ``|r - median| / (1.4826 * MAD)`` over the window, so a handful of extreme
rewards cannot hide themselves by inflating a mean/std.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class RewardRecord:
    step: int
    prompt_id: int
    prompt: str
    response: str
    reward: float


class OutlierBook:
    def __init__(self, window: int = 1024) -> None:
        self._records: deque[RewardRecord] = deque(maxlen=window)
        self._lock = threading.Lock()

    def record(self, records: list[RewardRecord]) -> None:
        with self._lock:
            self._records.extend(records)

    def top(self, k: int = 3) -> list[dict]:
        with self._lock:
            records = list(self._records)
        if not records:
            return []
        rewards = [r.reward for r in records]
        median = statistics.median(rewards)
        mad = statistics.median(abs(r - median) for r in rewards) * 1.4826
        scale = mad if mad > 1e-12 else (statistics.pstdev(rewards) or 1.0)
        scored = sorted(records, key=lambda r: abs(r.reward - median) / scale, reverse=True)
        return [{**asdict(r), "z": round(abs(r.reward - median) / scale, 4), "median": median} for r in scored[:k]]

    def extreme_ratio(self, rewards: list[float], z: float = 3.5) -> float:
        """Share of ``rewards`` whose robust z-score against the window exceeds ``z``."""
        with self._lock:
            window = np.fromiter((r.reward for r in self._records), dtype=np.float64, count=len(self._records))
        if len(window) < 8 or not rewards:
            return 0.0
        median = float(np.median(window))
        mad = float(np.median(np.abs(window - median))) * 1.4826
        if mad <= 1e-12:
            return 0.0
        return float(np.mean(np.abs(np.asarray(rewards) - median) / mad > z))
