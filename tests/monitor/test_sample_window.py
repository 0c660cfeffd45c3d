"""A detector's sample window keeps exactly what two deques trimmed by span and length kept, in 16 B a sample."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from monitor.detectors.base import SampleWindow


@pytest.mark.parametrize("maxlen", [None, 1, 7, 100])
@pytest.mark.parametrize("span", [0.0, 3.0, 60.0, 1e9])
def test_the_window_holds_the_samples_of_the_last_span_seconds(span: float, maxlen: int | None) -> None:
    rng = np.random.default_rng(3)
    gaps = np.concatenate([rng.uniform(0.1, 2.0, 120), [0.0] * 5, rng.uniform(50, 90, 10), rng.uniform(0, 1, 150)])
    times, values = np.cumsum(gaps), rng.standard_normal(gaps.size)
    window = SampleWindow(span, maxlen)
    ts: deque[float] = deque(maxlen=maxlen)
    vs: deque[float] = deque(maxlen=maxlen)
    most = 0
    for t, v in zip(times.tolist(), values.tolist(), strict=True):
        window.add(t, v)
        ts.append(t)
        vs.append(v)
        while ts[0] < t - span:
            ts.popleft()
            vs.popleft()
        wt, wv = window.arrays()
        assert len(window) == len(ts) and list(wt) == list(ts) and list(wv) == list(vs)
        assert window.ts[0] == ts[0] and window.ts[-1] == t
        most = max(most, len(ts))
    assert window._tv.shape[1] <= max(16, 4 * most)  # sized by the most it held, not by all it saw


def test_a_full_window_at_a_steady_cadence_is_sized_for_its_count_not_doubled_past_it() -> None:
    window = SampleWindow(1800.0)  # a leak detector's 30 min at 5 s: 360 samples live
    sizes = set()
    for i in range(6 * 720):
        window.add(5.0 * i, float(i))
        sizes.add(window._tv.shape[1])
    assert len(window) == 361
    assert window._tv.shape[1] <= 1.3 * 361  # a doubling buffer ended at 1024
    assert len(sizes) <= 4  # allocated a few times while it filled, then never again
