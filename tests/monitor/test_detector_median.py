"""``monitor.detectors.base.median`` is ``float(np.median(x))`` bit for bit: the level-shift detector's
decisions (its medians, the MAD, the level it reports) must not move by an ulp with the faster path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.detectors.base import median


def test_equals_numpy_median_bit_for_bit_on_fuzzed_windows() -> None:
    rng = np.random.default_rng(7)
    for _ in range(5000):
        n = int(rng.integers(1, 400))
        scale = float(rng.choice([1.0, 1e-9, 1e3, 1e300]))
        x = rng.normal(size=n) * scale
        if rng.random() < 0.3:  # ties, rounded values, constant stretches: throughput and step times
            x = np.round(x, int(rng.integers(0, 4)))
        if rng.random() < 0.1:
            x[rng.integers(0, n, size=max(1, n // 3))] = x[0]
        want = float(np.median(x))
        got = median(x)
        assert got == want or (math.isnan(got) and math.isnan(want)), (n, x.tolist())


def test_input_left_unchanged() -> None:
    x = np.array([3.0, 1.0, 2.0, 0.5])
    assert median(x) == 1.5 and x.tolist() == [3.0, 1.0, 2.0, 0.5]


@pytest.mark.parametrize("values", [[1.0, math.nan, 2.0], [math.nan], [5.0, 1.0, math.nan, 7.0]])
def test_nan_anywhere_gives_nan_as_numpy_does(values: list[float]) -> None:
    assert math.isnan(median(np.array(values))) and math.isnan(float(np.median(np.array(values))))


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_overflowing_middle_pair_matches_numpy() -> None:
    x = np.array([1.7e308, 1.7e308, -1.0, 1.8e308])
    assert median(x) == float(np.median(x))
