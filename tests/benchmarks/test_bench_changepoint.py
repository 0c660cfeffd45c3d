"""LevelShiftDetector: the ThroughputDrop contract (12000 -> 6000 within 5 min) and its silences."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.detectors.changepoint import LevelShiftDetector, best_split


def tokens_per_second(
    hours: float, dt: float, drop_at: float | None, seed: int, noise: float = 0.05, warmup: bool = True
) -> list[tuple[float, float]]:
    """12000 tok/s with multiplicative noise, a 3-minute compile/warm-up ramp, optional halving."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(int(hours * 3600 / dt)):
        t = 1_700_000_000.0 + i * dt
        level = 12000.0 if drop_at is None or i * dt < drop_at else 6000.0
        if warmup and i * dt < 180:
            level *= 0.2 + 0.8 * (i * dt) / 180
        out.append((t, level * (1 + noise * rng.standard_normal())))
    return out


def first_active(det: LevelShiftDetector, samples: list[tuple[float, float]]):
    for t, v in samples:
        f = det.update(t, v)
        if f.active:
            return f
    return None


@pytest.mark.parametrize("dt", [15.0, 30.0])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_halved_throughput_fires_within_five_minutes(dt: float, seed: int) -> None:
    samples = tokens_per_second(2, dt, drop_at=3600, seed=seed)
    f = first_active(LevelShiftDetector(direction="down"), samples)
    assert f is not None
    onset = samples[0][0] + 3600
    assert f.t - onset <= 300
    assert f.details["before"] == pytest.approx(12000, rel=0.05)
    assert f.details["after"] == pytest.approx(6000, rel=0.1)
    assert f.details["relative_change"] == pytest.approx(-0.5, abs=0.07)
    assert abs(f.details["change_t"] - onset) <= 2 * dt


@pytest.mark.parametrize("direction", ["down", "both"])
def test_noise_and_warmup_do_not_fire_over_a_day(direction: str) -> None:
    samples = tokens_per_second(24, 15.0, drop_at=None, seed=7, noise=0.08)
    assert first_active(LevelShiftDetector(direction=direction), samples) is None


def test_warmup_spike_then_settle_does_not_fire() -> None:
    # First minutes report a burst (short prompts), then the steady state: not a regime change.
    det = LevelShiftDetector(direction="down")
    samples = [(i * 15.0, 20000.0 if i * 15 < 240 else 12000.0) for i in range(400)]
    assert first_active(det, samples) is None


def test_single_dip_is_not_a_shift() -> None:
    samples = tokens_per_second(2, 15.0, drop_at=None, seed=4, warmup=False)
    samples[300] = (samples[300][0], 0.0)
    samples[301] = (samples[301][0], 100.0)
    assert first_active(LevelShiftDetector(direction="down"), samples) is None


def test_small_shift_below_floor_does_not_fire() -> None:
    samples = [(t, v * (0.8 if i >= 240 else 1.0)) for i, (t, v) in enumerate(
        tokens_per_second(2, 15.0, drop_at=None, seed=5, noise=0.01))]
    det = LevelShiftDetector(direction="down")
    assert first_active(det, samples) is None
    assert det.change_points == []  # a 20 % step is under the 30 % floor


def test_direction_filters_and_recovery_clears() -> None:
    samples = tokens_per_second(3, 15.0, drop_at=3600, seed=6, warmup=False)
    recovered = [(t, v * 2 if t - samples[0][0] >= 7200 else v) for t, v in samples]
    up = LevelShiftDetector(direction="up")
    assert first_active(up, samples) is None
    down = LevelShiftDetector(direction="down")
    states = [down.update(t, v).active for t, v in recovered]
    assert any(states[240:480]) and not states[-1]  # fired while halved, cleared after recovery
    assert len(down.change_points) == 2
    up2 = LevelShiftDetector(direction="up")
    assert first_active(up2, recovered) is not None  # the recovery is an upward shift


def test_several_levels_give_several_change_points() -> None:
    rng = np.random.default_rng(0)
    levels = [10.0, 20.0, 5.0]
    vs = np.concatenate([lv + 0.5 * rng.standard_normal(200) for lv in levels])
    det = LevelShiftDetector(baseline_s=60, confirm_s=8, warmup_s=0)
    for i, v in enumerate(vs):
        det.update(float(i), float(v))
    assert [round(c) for c in det.change_points] == [200, 400]


def test_best_split_finds_the_step() -> None:
    assert best_split(np.array([1.0] * 7 + [5.0] * 5), min_size=2) == 7


@pytest.mark.parametrize(
    "kwargs", [{"direction": "sideways"}, {"alpha": 0.0}, {"min_relative_shift": -1}, {"min_baseline": 1}]
)
def test_bad_arguments_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LevelShiftDetector(**kwargs)


def test_a_continuing_trend_is_not_a_level_shift() -> None:
    rng = np.random.default_rng(11)
    trend = 100 + 0.5 * np.arange(300) + rng.normal(0, 1.0, 300)
    params = {"baseline_s": 20, "confirm_s": 12, "min_baseline": 8, "min_relative_shift": 0.0, "warmup_s": 0}
    guarded, unguarded = LevelShiftDetector(**params), LevelShiftDetector(**params, max_trend_tau=1.0)
    for i, v in enumerate(trend):
        guarded.update(float(i), float(v))
        unguarded.update(float(i), float(v))
    assert guarded.change_points == []
    assert len(unguarded.change_points) >= 3  # without the guard a ramp reads as a staircase
    step = LevelShiftDetector(**params)
    for i, v in enumerate(np.where(np.arange(300) < 150, 100.0, 130.0) + rng.normal(0, 1.0, 300)):
        step.update(float(i), float(v))
    assert [round(c) for c in step.change_points] == [150]
