"""Recorded-looking series for the four diagnosis scenarios of issue 15 (kl_coef zeroed, reward model
broken, unbounded rollout buffer, data-loading bottleneck), plus their healthy twins, written as the
long CSV ``verl-monitor replay --input`` reads. One node (``gpu-01``), scrape-like intervals, noise.
Used by ``benchmarks/diagnosis_replay.py`` and ``tests/monitor/test_monitor_diagnosis_replay.py``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NODE = {"instance": "gpu-01:8000", "job": "verl"}
LABEL_COLS = ["instance", "job", "gpu", "stage", "kl_coef", "rollout_worker_num", "rollout_buffer_max_size",
              "rollout_buffer_eviction_policy", "data_num_workers", "data_persistent_workers", "data_pin_memory"]
CONFIG = {"kl_coef": "0.2", "rollout_worker_num": "4", "rollout_buffer_max_size": "50000",
          "rollout_buffer_eviction_policy": "fifo", "data_num_workers": "8", "data_persistent_workers": "true",
          "data_pin_memory": "true"}

Column = tuple[str, dict[str, str], np.ndarray, np.ndarray]


def grid(minutes: float, step: float) -> np.ndarray:
    return T0 + np.arange(0.0, minutes * 60.0, step)


def steps(t: np.ndarray, first: int = 1000, step_s: float = 30.0) -> Column:
    return "verl_global_step", dict(NODE), t, first + np.floor((t - T0) / step_s)


def config(t: np.ndarray, **overrides: str) -> Column:
    return "verl_config_info", {**NODE, **CONFIG, **overrides}, t, np.ones(len(t))


def kl_scenario(rng: np.random.Generator, zeroed: bool = True) -> list[Column]:
    """kl_coef gauge drops 0.2 -> 0.0 at 90 min; KL then climbs 0.02 -> 0.08 within the hour."""
    t = grid(210, 30.0)
    onset = T0 + 90 * 60
    coef = np.where((t >= onset) & zeroed, 0.0, 0.2)
    ramp = np.clip((t - onset) / 3600.0, 0.0, 1.0) if zeroed else np.zeros(len(t))
    kl = 0.02 + 0.06 * ramp + rng.normal(0, 0.004, len(t))
    if not zeroed:  # healthy twin: KL drifts up for another reason while the penalty stays on
        kl = 0.02 + 0.06 * np.clip((t - onset) / 3600.0, 0.0, 1.0) + rng.normal(0, 0.004, len(t))
    return [steps(t), config(t), ("verl_kl_coef", dict(NODE), t, coef), ("verl_kl_divergence", dict(NODE), t, kl),
            ("verl_reward_mean", dict(NODE), t, 0.8 + rng.normal(0, 0.02, len(t)))]


def reward_scenario(rng: np.random.Generator, broken: bool = True, with_nan: bool = True,
                    kl_off_at_min: float | None = None) -> list[Column]:
    """The reward model breaks at 40 min: reward mean ~0 (with NaN steps, skipped as non-finite, unless
    ``with_nan`` is False). Healthy twin (``broken=False``): one NaN gradient step, rewards fine.
    ``kl_off_at_min``: kl_coef goes to 0 then, before the rewards fall (a policy running away)."""
    t = grid(60, 10.0)
    onset = T0 + 40 * 60
    mean = 0.8 + rng.normal(0, 0.02, len(t))
    nonfinite = np.zeros(len(t))
    if broken:
        after = t >= onset
        mean[after] = rng.normal(0, 0.005, int(after.sum()))
        if with_nan:
            nan_idx = np.flatnonzero(after)[::4]
            mean[nan_idx] = np.nan
            nonfinite = np.cumsum(np.isin(np.arange(len(t)), nan_idx)).astype(float)
    else:
        nonfinite[t >= onset] = 1.0
    coef = np.full(len(t), 0.2)
    if kl_off_at_min is not None:
        coef[t >= T0 + kl_off_at_min * 60] = 0.0
    return [steps(t, step_s=10.0), config(t), ("verl_reward_mean", dict(NODE), t, mean),
            ("verl_nonfinite_steps_total", dict(NODE), t, nonfinite),
            ("verl_kl_coef", dict(NODE), t, coef),
            ("verl_kl_divergence", dict(NODE), t, 0.02 + rng.normal(0, 0.002, len(t)))]


def buffer_scenario(rng: np.random.Generator, unbounded: bool = True) -> list[Column]:
    """GPU memory rises 60 MB/min for 70 min; the buffer grows with it (unbounded) or stays flat."""
    t5, t30 = grid(70, 5.0), grid(70, 30.0)
    mem = 40e9 + 60e6 * (t5 - T0) / 60.0 + 2e9 * (((t5 - T0) % 90) / 90) + rng.normal(0, 50e6, len(t5))
    buf = 5000 + (40 * (t30 - T0) / 60.0 if unbounded else 0.0) + rng.normal(0, 20, len(t30))
    gpu = {**NODE, "gpu": "0"}
    return [steps(t30), config(t30, rollout_buffer_max_size="-1" if unbounded else "50000"),
            ("verl_gpu_memory_used_bytes", gpu, t5, mem), ("verl_gpu_memory_total_bytes", gpu, t5, np.full(len(t5), 80e9)),
            ("verl_rollout_buffer_size", {**NODE, "stage": "train"}, t30, buf)]


def loader_scenario(rng: np.random.Generator, loader_bound: bool = True) -> list[Column]:
    """tokens/s 12000 -> 6000 at 20 min with GPU utilisation ~0.9; the dataloader's time per step rises
    0.01 -> 1.2 s (or, healthy twin, stays put: something else slowed down)."""
    t = grid(45, 15.0)
    onset = T0 + 20 * 60
    tok = np.where(t >= onset, 6000.0, 12000.0) * (1 + 0.04 * rng.standard_normal(len(t)))
    wait = np.where((t >= onset) & loader_bound, 1.2, 0.01) + np.abs(rng.normal(0, 0.002, len(t)))
    overrides = {"data_num_workers": "2", "data_persistent_workers": "false", "data_pin_memory": "false"} \
        if loader_bound else {}
    return [steps(t), config(t, **overrides), ("verl_actor_tokens_per_second", dict(NODE), t, tok),
            ("verl_stage_seconds", {**NODE, "stage": "dataloader"}, t, wait),
            ("verl_gpu_utilization_ratio", {**NODE, "gpu": "0"}, t, np.clip(0.9 + rng.normal(0, 0.02, len(t)), 0, 1))]


def write_csv(path: Path, columns: list[Column]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "name", "value", *LABEL_COLS])
        for name, labels, t, v in columns:
            for ts, val in zip(t.tolist(), v.tolist(), strict=True):
                w.writerow([f"{ts:.3f}", name, "NaN" if val != val else f"{val:.6g}",
                            *[labels.get(k, "") for k in LABEL_COLS]])
