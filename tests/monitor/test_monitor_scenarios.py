"""Issue 4's Done-when scenarios, end to end through the replay pipeline with the default rules."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_scenarios import (
    T0,
    firing,
    first_fire_time,
    gpu_memory,
    memory_column,
    run,
    times,
)

from benchmarks.scenarios import ar1

DAY = 24 * 3600.0


# last: 200 s PPO steps, 2 GB swing, 50 MB noise (benchmarks/scenarios.py leak_20mb_slow_steps); with
# 100 MB noise on that small swing the 30 min are met in 6 of 8 seeds (monitor/README.md)
@pytest.mark.parametrize("family,period,swing,noise", [("verl", 90.0, 8e9, 100e6), ("dcgm", 90.0, 8e9, 100e6),
                                                       ("verl", 212.0, 2e9, 50e6)])
def test_leak_20mb_per_min_fires_within_30_min(family: str, period: float, swing: float, noise: float) -> None:
    rng = np.random.default_rng(1)
    onset = T0 + 2 * 3600
    t = times(4 * 3600, 5.0)
    mem = gpu_memory(t, rng, 20.0, onset, swing=swing, period=period, noise=noise)
    recs = run([memory_column(family, t, mem)])
    fired = first_fire_time(recs, "MemoryLeakSuspected")
    assert fired is not None, "20 MB/min leak not detected"
    detected_at = max(fired, onset)
    alert = firing(recs, "MemoryLeakSuspected")[0]
    assert alert["labels"]["node"] == "gpu-08" and alert["labels"]["gpu"] == "0"
    assert alert["labels"]["severity"] == "P1"
    assert fired >= onset, "fired before the leak started"
    assert detected_at - onset <= 30 * 60


@pytest.mark.slow
@pytest.mark.parametrize("family,rate,period", [("verl", 5.0, 90.0), ("dcgm", 0.0, 90.0),
                                                ("verl", 5.0, 94.6)])  # 94.6 s: aliased by 5 s scrapes
def test_slow_growth_and_flat_memory_stay_quiet(family: str, rate: float, period: float) -> None:
    rng = np.random.default_rng(2)
    t = times(DAY, 5.0)
    recs = run([memory_column(family, t, gpu_memory(t, rng, rate, T0, period=period))])
    assert firing(recs, "MemoryLeakSuspected") == []


def kl_series(t: np.ndarray, rng: np.random.Generator, ramp_start: float, ramp_s: float = 3600.0,
              phi: float = 0.0) -> np.ndarray:
    frac = np.clip((t - ramp_start) / ramp_s, 0.0, 1.0)
    return 0.02 + 0.06 * frac + ar1(rng, len(t), phi, 0.01)


@pytest.mark.parametrize("step,phi", [(10.0, 0.0), (30.0, 0.7)])  # one PPO step every 10 s / 30 s
def test_kl_drift_fires_before_static_threshold(step: float, phi: float) -> None:
    rng = np.random.default_rng(3)
    ramp = T0 + 3600
    t = times(3 * 3600, step)
    recs = run([("verl_kl_divergence", {"node": "gpu-01"}, t, kl_series(t, rng, ramp, phi=phi))])
    hits = firing(recs, "KLDriftDetected")
    assert hits, "KL drift not detected"
    fired = first_fire_time(recs, "KLDriftDetected")
    crossing = ramp + (0.06 - 0.02) / 0.06 * 3600  # when the noiseless KL reaches 0.06
    assert ramp < fired < crossing
    assert "p=" in hits[0]["annotations"]["summary"]
    p = float(hits[0]["annotations"]["summary"].split("p=")[1].split(")")[0])
    assert p < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("step,phi,sd", [(10.0, 0.9, 0.005), (30.0, 0.7, 0.01)])
def test_stationary_autocorrelated_kl_is_quiet(step: float, phi: float, sd: float) -> None:
    rng = np.random.default_rng(4)
    t = times(DAY, step)
    kl = 0.02 + ar1(rng, len(t), phi, sd)
    recs = run([("verl_kl_divergence", {"node": "gpu-01"}, t, kl)])
    assert firing(recs, "KLDriftDetected") == []


def cpu_gpu(cpu: np.ndarray, t: np.ndarray, mem_swing: float, rng: np.random.Generator) -> list:
    mem = 40e9 * (1 + mem_swing * np.sin((t - T0) / 7.0)) + rng.normal(0, 20e6, len(t))
    return [("verl_host_cpu_utilization_ratio", {"node": "gpu-02"}, t, cpu),
            memory_column("dcgm", t, mem, node="gpu-02")]


def test_lone_cpu_spike_alerts_nothing() -> None:
    rng = np.random.default_rng(5)
    t = times(1800, 5.0)
    cpu = np.clip(0.6 + rng.normal(0, 0.05, len(t)), 0, 1)
    cpu[100] = 0.99
    recs = run(cpu_gpu(cpu, t, 0.10, rng))
    assert firing(recs, "CPUBoundBottleneck") == []


def test_sustained_cpu_with_gpu_memory_swing_is_cpu_bound() -> None:
    rng = np.random.default_rng(6)
    t = times(1800, 5.0)
    cpu = np.clip(0.6 + rng.normal(0, 0.02, len(t)), 0, 1)
    cpu[200:212] = 0.97 + rng.uniform(0, 0.02, 12)  # 60 s above 95 %
    recs = run(cpu_gpu(cpu, t, 0.10, rng))
    hits = firing(recs, "CPUBoundBottleneck")
    assert len(hits) == 1 and hits[0]["labels"]["node"] == "gpu-02"
    assert first_fire_time(recs, "CPUBoundBottleneck") >= t[200]


def test_cpu_high_for_only_5_s_with_gpu_memory_swing_is_nothing() -> None:
    rng = np.random.default_rng(10)
    t = times(1800, 5.0)
    cpu = np.clip(0.6 + rng.normal(0, 0.02, len(t)), 0, 1)
    cpu[200:202] = 0.99  # two samples: 5 s above 95 %
    recs = run(cpu_gpu(cpu, t, 0.10, rng))
    assert firing(recs, "CPUBoundBottleneck") == []


def test_sustained_cpu_with_flat_gpu_memory_is_nothing() -> None:
    rng = np.random.default_rng(7)
    t = times(1800, 5.0)
    cpu = np.clip(0.6 + rng.normal(0, 0.02, len(t)), 0, 1)
    cpu[200:260] = 0.98
    recs = run(cpu_gpu(cpu, t, 0.005, rng))
    assert firing(recs, "CPUBoundBottleneck") == []


def test_throughput_halving_fires_throughput_drop_within_5_min() -> None:
    rng = np.random.default_rng(8)
    t = times(2 * 3600, 30.0)
    drop = T0 + 3600
    tps = np.where(t < drop, 12000.0, 6000.0) * (1 + rng.normal(0, 0.03, len(t)))
    tg = times(2 * 3600, 5.0)
    util = np.clip(0.75 + rng.normal(0, 0.03, len(tg)), 0, 1)  # GPU utilisation normal throughout
    recs = run([("verl_actor_tokens_per_second", {"node": "gpu-03"}, t, tps),
                ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "Hostname": "gpu-03"}, tg, util * 100)])
    fired = first_fire_time(recs, "ThroughputDrop")
    assert fired is not None
    # startsAt is when the condition began; the record is emitted at the latest 5 min after the drop
    assert drop - 60 <= fired <= drop + 300
    summary = firing(recs, "ThroughputDrop")[0]["annotations"]["summary"]
    before, after = (float(x) for x in summary.split(": ")[1].split(" tokens")[0].split(" -> "))
    assert 11000 < before < 13000 and 5500 < after < 6500


@pytest.mark.parametrize("minutes,expected", [(5.5, 1), (2.0, 0)])
def test_reward_std_above_08(minutes: float, expected: int) -> None:
    rng = np.random.default_rng(9)
    t = times(3600, 10.0)
    std = 0.5 + rng.normal(0, 0.03, len(t))
    start = T0 + 1800
    high = (t >= start) & (t < start + minutes * 60)
    std[high] = 0.9 + rng.normal(0, 0.02, high.sum())
    recs = run([("verl_reward_std", {"node": "gpu-04"}, t, std)])
    assert len(firing(recs, "RewardDistributionDrift")) == expected
