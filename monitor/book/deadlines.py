"""Keys that are due at a time, taken out when it comes: the alert book's loose alerts (firing, held by
nothing) are looked at again when their ``keep_firing_for`` or restore grace may have run out, not at every
tick. ``heapq`` with lazily deleted entries, as the evaluator's calm heap: the standard library has no
priority queue with updatable keys, and a sorted container would cost more per change than the heap's skips."""

from __future__ import annotations

import heapq
import itertools
import math


class Deadlines:
    """``key -> due``; ``pop_due(now)`` takes out the keys whose time came. A key set again or discarded
    leaves its heap entry behind, skipped when popped; the heap is rebuilt once such entries outnumber
    the live ones. A key due at ``math.inf`` is held without a timer (only ``discard`` or a new ``set``
    moves it)."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def set(self, key: str, due: float) -> None:
        if self._due.get(key) == due:
            return
        self._due[key] = due
        if due == math.inf:
            return
        heapq.heappush(self._heap, (due, next(self._seq), key))
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [e for e in self._heap if self._due.get(e[2]) == e[0]]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        self._due.pop(key, None)

    def pop_due(self, now: float) -> set[str]:
        """The keys due at ``now`` (a hair early: the caller checks its own condition exactly and sets the
        key again when it does not hold yet, so a due time rounded up never skips a tick)."""
        out: set[str] = set()
        heap, due_of = self._heap, self._due
        limit = now + 1e-9 * max(1.0, abs(now))
        while heap and heap[0][0] <= limit:
            due, _, key = heapq.heappop(heap)
            if due_of.get(key) == due:
                del due_of[key]
                out.add(key)
        return out
