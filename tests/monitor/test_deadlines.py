"""Keys due at a time (the alert book's loose alerts): popped once their time comes, never before it by
more than a rounding hair, never when set again or discarded since; the heap stays bounded."""

from __future__ import annotations

import math

from monitor.book.deadlines import Deadlines


def test_keys_come_out_when_due_and_only_as_last_set() -> None:
    d = Deadlines()
    d.set("a", 10.0)
    d.set("b", 5.0)
    d.set("c", math.inf)  # held without a timer
    d.set("a", 20.0)  # moved later: its old entry is skipped
    d.set("b", 5.0)  # the same time again: nothing new
    assert d.pop_due(4.0) == set()
    assert d.pop_due(10.0) == {"b"} and "b" not in d
    d.discard("a")
    assert d.pop_due(1e9) == set()
    assert len(d) == 1 and "c" in d


def test_a_due_time_rounded_up_still_comes_out_on_its_tick() -> None:
    d = Deadlines()
    cleared, keep = 0.1, 0.2
    d.set("a", cleared + keep)  # 0.30000000000000004
    assert d.pop_due(0.3) == {"a"}


def test_the_heap_is_rebuilt_when_stale_entries_outnumber_live_ones() -> None:
    d = Deadlines()
    for i in range(10_000):
        d.set("a", float(i))  # one live key, rescheduled again and again
    assert len(d._heap) <= 2 * len(d) + 65
    assert d.pop_due(9_999.0) == {"a"}
