"""A diagnosis' evidence holds the samples a series had at the capture, decoded only when read."""

from __future__ import annotations

import numpy as np

from alerting.evidence import Evidence, SeriesWindow
from monitor.book.evidence import EvidenceCapture
from monitor.series.store import CHUNK, Series, SeriesStore, StoreLimits


def _fill(s: Series, n: int, t0: float = 1.7e9) -> None:
    for i in range(n):
        s.append(t0 + 5.0 * i + (i % 7) * 0.013, round(50.0 + 3.0 * np.sin(i / 9.0), 4))


def test_frozen_is_the_window_at_capture_even_after_the_series_moves_on() -> None:
    for capacity, n in ((20, 15), (20, 50), (300, 40), (300, 1000), (4096, 5 * CHUNK + 3)):
        s = Series("x", {"node": "a"}, capacity, 0)
        _fill(s, n)
        t, v = s.window()
        read = s.frozen()
        _fill(s, 3 * capacity, t0=2e9)  # chunks sealed and dropped, the head refilled
        ft, fv = read()
        assert np.array_equal(ft, t) and np.array_equal(fv, v), (capacity, n)


def test_capture_decodes_nothing_until_a_procedure_reads_and_answers_as_a_copy_would() -> None:
    store = SeriesStore(StoreLimits(capacity=4096))
    s = store.get_or_create("verl_reward_mean", {"node": "gpu-1"})
    assert s is not None
    _fill(s, 1000)
    ev = EvidenceCapture(store, None, ["verl_reward_mean"]).capture(2e9, {"gpu-1"})
    (w,) = ev.series
    assert isinstance(w, SeriesWindow) and w.__dict__["_tv"] is None  # nothing decoded yet
    t, v = s.window()
    copied = Evidence(ev.taken_at, (SeriesWindow(s.name, s.labels, t, v),))
    _fill(s, 500, t0=2e9)
    for e in (ev, copied):
        assert e.latest("verl_reward_mean", "gpu-1") == copied.latest("verl_reward_mean", "gpu-1")
        assert e.median("verl_reward_mean", t[100], t[400], "gpu-1") == copied.median("verl_reward_mean", t[100], t[400], "gpu-1")
        assert e.held_since("verl_reward_mean", "gpu-1") == copied.held_since("verl_reward_mean", "gpu-1")
    assert np.array_equal(w.t, t) and np.array_equal(w.v, v)
