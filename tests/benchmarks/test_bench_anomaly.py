"""RareValueDetector: empirical tail probability, episodes, warm-up."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.detectors.anomaly import RareValueDetector


def test_p_value_is_the_two_sided_rank_fraction() -> None:
    det = RareValueDetector(history=100, min_history=10)
    for i, v in enumerate(range(1, 101)):  # history 1..100
        det.update(float(i), float(v))
    assert det.p_value(50.5) == pytest.approx(1.0)
    assert det.p_value(3.0) == pytest.approx(2 * 3 / 100)  # 1, 2, 3 are <= 3
    assert det.p_value(100.0) == pytest.approx(2 * 1 / 100)
    near, far = det.p_value(101.0), det.p_value(200.0)
    assert 0 < far < near < 2 / 100  # beyond every value seen, and farther is rarer
    assert det.p_value(-5.0) < 2 / 100


def test_history_is_bounded_and_slides() -> None:
    det = RareValueDetector(history=50, min_history=10)
    for i in range(200):
        det.update(float(i), float(i))
    assert len(det._window) == 50 and det._window._sorted[0] == 150.0
    assert det.p_value(100.0) < 2 / 50  # 100 has left the window: now below everything remembered


def test_spike_opens_one_episode_that_closes_after_hold() -> None:
    rng = np.random.default_rng(0)
    det = RareValueDetector(history=1000, min_history=100, alpha=0.001, hold_samples=20)
    values = list(50 + rng.normal(0, 1, 400))
    values[300] = values[301] = 90.0  # a two-sample burst
    active = [det.update(float(i), v).active for i, v in enumerate(values)]
    starts = [i for i in range(1, len(active)) if active[i] and not active[i - 1]]
    assert 300 in starts
    assert all(active[300:320]) and not active[322]
    assert len([s for s in starts if 300 <= s < 330]) == 1


def test_nothing_before_min_history() -> None:
    det = RareValueDetector(min_history=100)
    findings = [det.update(float(i), float(i * i)) for i in range(100)]  # every value a new maximum
    assert not any(f.active for f in findings)
    assert det.update(100.0, 1e9).active


@pytest.mark.parametrize("kwargs", [{"alpha": 0}, {"history": 5}, {"min_history": 1}, {"hold_samples": -1}])
def test_bad_arguments_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RareValueDetector(**kwargs)
