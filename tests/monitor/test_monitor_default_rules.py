"""Each default rule fires on its trigger and stays quiet on healthy data (one short scenario each)."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_scenarios import T0, firing, run, times

N = "gpu-06"
T = times(1800, 15.0)
K = T - T0


def step(at: float, before: float, after: float) -> np.ndarray:
    return np.where(at <= K, after, before)


def counter(at: float, by: float = 1.0) -> np.ndarray:
    return step(at, 3.0, 3.0 + by)


CASES = {
    "TrainingStalled": ("verl_heartbeat_timestamp_seconds", {}, np.minimum(T, T0 + 600), T),
    "TrainerDown": ("up", {"job": "verl", "target": "trainer"}, step(600, 1, 0), np.ones(len(T))),
    # a hanging reward model: the breaker alternates open (2) and half-open (1) on each failed probe;
    # quiet: one failed probe's open state that closes again within 30 s
    "RewardModelCircuitOpen": ("verl_reward_model_circuit_state", {},
                               np.where(K >= 600, np.where((K // 15) % 2 == 0, 2.0, 1.0), 0.0),
                               np.where((K >= 600) & (K < 615), 2.0, 0.0)),
    "RewardModelTimeout": ("verl_reward_model_calls_total", {"outcome": "timeout"}, counter(600, 5),
                           counter(600, 1)),
    "NonFiniteGradients": ("verl_nonfinite_steps_total", {}, counter(600), np.full(len(T), 3.0)),
    "GPUXidError": ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "2"}, step(600, 0, 79), np.zeros(len(T))),
    "NVLinkErrors": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", {"gpu": "2"}, counter(600, 12),
                     np.zeros(len(T))),
    "GPUOverTemperature": ("verl_gpu_temperature_celsius", {"gpu": "1"}, step(600, 70, 91), step(600, 70, 84)),
    "RolloutBacklog": ("verl_rollout_buffer_age_seconds", {}, step(600, 60, 2400), np.full(len(T), 1700.0)),
    "CheckpointStale": ("verl_checkpoint_last_success_timestamp_seconds", {}, T - 4 * 3600, T - 1800),
    "RewardVarianceSpike": ("verl_reward_std", {}, step(1200, 0.3, 0.6), step(1200, 0.3, 0.4)),
    "RolloutWorkerCrash": ("verl_rollout_worker_restarts_total", {}, counter(600), np.zeros(len(T))),
    "RewardModelOOM": ("verl_oom_events_total", {"component": "reward"}, counter(600), np.zeros(len(T))),
}


@pytest.mark.parametrize("alertname", sorted(CASES))
def test_default_rule_fires_on_trigger_only(alertname: str) -> None:
    name, labels, trigger, healthy = CASES[alertname]
    rng = np.random.default_rng(0)
    jitter = 1 + rng.normal(0, 1e-4, len(T)) if alertname == "RewardVarianceSpike" else 1.0
    hits = firing(run([(name, {**labels, "node": N}, T, trigger * jitter)]), alertname)
    assert len(hits) == 1, alertname
    assert hits[0]["labels"]["node"] == N and hits[0]["annotations"]["summary"]
    assert "template error" not in hits[0]["annotations"]["summary"]
    assert firing(run([(name, {**labels, "node": N}, T, healthy * jitter)]), alertname) == []


def test_oom_of_another_component_is_not_a_reward_model_oom() -> None:
    recs = run([("verl_oom_events_total", {"component": "critic", "node": N}, T, counter(600))])
    assert firing(recs, "RewardModelOOM") == []
