"""The pipeline hands free heap pages back to the kernel once a minute of monitor time, not every tick."""

from __future__ import annotations

import platform

import pytest

from alerting.clock import SimulatedClock
from monitor import heap
from monitor.pipeline import Pipeline


def test_the_tick_trims_the_heap_once_per_trim_period(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    clock = SimulatedClock(1_767_225_600.0)
    monkeypatch.setattr(heap, "trim", lambda: calls.append(clock.now()) or True)
    pipe = Pipeline([], clock)
    for _ in range(30):  # 2.5 min of 5-s ticks
        pipe.tick()
        clock.advance(5.0)
    assert calls == [1_767_225_600.0, 1_767_225_660.0, 1_767_225_720.0]
    pipe.close()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_trim_calls_glibc() -> None:
    assert heap.trim() is True
