"""A series' history, a raw ring or compressed chunks behind a raw head: the same window, interval and
overwrite order as a ring allocated whole, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.series.store import CHUNK, Series


@pytest.mark.parametrize("capacity", [1, 5, CHUNK, CHUNK + 1, 100, 2 * CHUNK, 4096])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 63, 64, 65, 99, 100, 101, 128, 129, 250, 5000])
def test_window_and_interval_are_those_of_the_last_capacity_samples(capacity: int, n: int) -> None:
    s = Series("x", {}, capacity, 0)
    ts = np.cumsum(np.linspace(1.0, 2.0, n)) if n else np.empty(0)
    for i, t in enumerate(ts):
        s.append(float(t), float(i))
    keep = min(n, capacity)
    t, v = s.window()
    assert list(t) == list(ts[n - keep:]) and list(v) == [float(i) for i in range(n - keep, n)]
    assert len(s) == keep and len(s._buf) // 2 <= min(capacity, CHUNK)
    k = min(keep, 17)
    want = float(np.median(np.diff(ts[n - k:]))) if k >= 4 else 0.0
    assert s.interval() == want
    if n:
        t2, _ = s.window(since=float(ts[n - 1]))
        assert list(t2) == [ts[n - 1]]


def test_interval_after_a_seal_reads_the_kept_tail_not_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.series import chunks

    rng = np.random.default_rng(5)
    s = Series("x", {}, 4096, 0)
    times = 1.7e9 + np.cumsum(rng.choice([5.0, 4.999, 5.013, 30.0], 3 * CHUNK))
    for i, t in enumerate(times[: CHUNK + 3].tolist()):  # the head sealed 3 samples ago
        s.append(t, float(i))

    def no_decode(*args: object) -> None:
        raise AssertionError("interval() decoded a chunk")

    monkeypatch.setattr(chunks, "decode", no_decode)
    assert s.interval() == float(np.median(np.diff(times[CHUNK + 3 - 17: CHUNK + 3])))


@pytest.mark.parametrize("ring", [20, CHUNK])
def test_a_full_ring_given_more_room_keeps_its_samples_and_takes_the_next(ring: int) -> None:
    s = Series("x", {}, ring, 0)
    for i in range(ring + 6):
        s.append(float(i), float(i))
    s.reserve(1000)
    for i in range(ring + 6, 3 * CHUNK):
        s.append(float(i), float(i))
    t, v = s.window()
    assert t.tolist() == v.tolist() == [float(i) for i in range(6, 3 * CHUNK)]
    assert s.interval() == 1.0
