"""The bounded rollout buffer between generation and training.

Bounded by default (the article's OOM came from an unbounded default): when full, ``fifo`` evicts the
oldest sample and ``priority`` the lowest-reward one; every eviction is counted.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Rollout:
    """One generated response and everything PPO needs from it."""

    prompt_id: int
    step: int
    prompt: str
    response: str
    prompt_ids: list[int]
    response_ids: list[int]
    created_at: float
    """Clock time of generation: the buffer's age metrics are measured from it."""
    reward: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class RolloutBuffer:
    def __init__(self, max_size: int = 50000, eviction_policy: str = "fifo") -> None:
        if eviction_policy not in ("fifo", "priority"):
            raise ValueError(f"rollout_buffer_eviction_policy must be fifo or priority, got {eviction_policy!r}")
        if max_size == -1:
            log.warning("rollout_buffer_max_size=-1: the rollout buffer is unbounded and can exhaust memory "
                        "when rewards lag generation; set rollout_buffer_max_size (default 50000)")
        self.max_size = max_size
        self.policy = eviction_policy
        self.evictions = 0
        self._items: OrderedDict[int, Rollout] = OrderedDict()
        self._seq = itertools.count()
        self._heap: list[tuple[float, int]] = []  # (reward, seq) for priority eviction; lazily pruned

    def __len__(self) -> int:
        return len(self._items)

    def put(self, rollouts: list[Rollout]) -> int:
        """Add rollouts, evicting to stay within the bound; returns how many were evicted."""
        evicted = 0
        for rollout in rollouts:
            seq = next(self._seq)
            self._items[seq] = rollout
            if self.policy == "priority":
                heapq.heappush(self._heap, (_priority(rollout), seq))
            if 0 < self.max_size < len(self._items):
                self._evict_one()
                evicted += 1
        self.evictions += evicted
        return evicted

    def _evict_one(self) -> None:
        if self.policy == "fifo":
            self._items.popitem(last=False)
            return
        while self._heap:
            _, seq = heapq.heappop(self._heap)
            if self._items.pop(seq, None) is not None:
                return

    def take(self, n: int) -> list[Rollout]:
        """Remove and return up to ``n`` samples, oldest first (the training batch)."""
        out = []
        while self._items and len(out) < n:
            _, rollout = self._items.popitem(last=False)
            out.append(rollout)
        if not self._items:
            self._heap.clear()
        return out

    def shed(self, keep_newest: int) -> int:
        """Release all but the newest ``keep_newest`` samples (memory pressure); counted as evictions."""
        shed = max(0, len(self._items) - keep_newest)
        for _ in range(shed):
            self._items.popitem(last=False)
        if shed and self.policy == "priority":
            self._heap = [(p, seq) for p, seq in self._heap if seq in self._items]
            heapq.heapify(self._heap)
        self.evictions += shed
        return shed

    def oldest_age(self, now: float) -> float:
        if not self._items:
            return 0.0
        return max(0.0, now - next(iter(self._items.values())).created_at)

    def state_dict(self) -> dict[str, Any]:
        return {"max_size": self.max_size, "policy": self.policy, "evictions": self.evictions,
                "items": [asdict(r) for r in self._items.values()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.evictions = int(state["evictions"])
        self._items.clear()
        self._heap.clear()
        self.put([Rollout(**item) for item in state["items"]])
        self.evictions = int(state["evictions"])


def _priority(rollout: Rollout) -> float:
    return float("-inf") if rollout.reward is None else rollout.reward
