"""A live ppo_tiny run: the reward rises, and a scrape of its endpoint shows the whole metrics contract."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The contract's metric names, algorithm and framework levels, written out literally so a rename anywhere is caught here.
ALGORITHM = [
    "verl_global_step", "verl_kl_divergence", "verl_kl_coef", "verl_reward_mean", "verl_reward_std",
    "verl_reward_extreme_ratio", "verl_entropy", "verl_clip_fraction", "verl_advantage_variance",
    "verl_policy_loss", "verl_critic_loss", "verl_grad_norm", "verl_layer_kl", "verl_nonfinite_steps_total",
    "verl_batches_paused_total",
]
FRAMEWORK = [
    "verl_actor_tokens_per_second", "verl_stage_seconds", "verl_dataloader_wait_seconds",
    "verl_rollout_buffer_size", "verl_rollout_buffer_age_seconds", "verl_rollout_buffer_evictions_total",
    "verl_rollout_workers_alive", "verl_rollout_worker_restarts_total", "verl_rollout_worker_cpu_ratio",
    "verl_rollout_samples_dropped_total", "verl_reward_model_calls_total", "verl_reward_model_circuit_state",
    "verl_oom_events_total", "verl_degraded_mode", "verl_checkpoint_last_success_timestamp_seconds",
    "verl_checkpoint_stall_seconds", "verl_checkpoint_failures_total", "verl_heartbeat_timestamp_seconds",
    "verl_config_info",
]
STAGES = ["rollout", "reward", "reference", "old_log_prob", "critic_values", "advantage", "critic", "actor_update",
          "checkpoint", "dataloader"]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback test endpoint
        return resp.read()


@pytest.fixture(scope="module")
def live_run() -> dict:
    """ppo_tiny for 60 steps with --metrics-port 0; scraped while alive at step 5."""
    cmd = [sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny", "--metrics-port", "0",
           "trainer.total_steps=60", "metrics.interval_s=1", "metrics.hardware_interval_s=1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: dict = {"lines": []}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out["lines"].append(line)
            if line.startswith("metrics: "):
                out["url"] = line.split()[1]
            if "step 5/60" in line:
                base = out["url"].removesuffix("/metrics")
                out["metrics"] = _get(out["url"]).decode()
                out["healthz"] = json.loads(_get(base + "/healthz"))
                out["outliers"] = json.loads(_get(base + "/api/v1/reward_outliers?k=3"))
        out["rc"] = proc.wait(timeout=170)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def test_run_completes(live_run: dict) -> None:
    assert live_run["rc"] == 0, "".join(live_run["lines"][-20:])
    assert live_run["url"].startswith("http://127.0.0.1:")


def test_reward_rises_within_60_steps(live_run: dict) -> None:
    text = "".join(live_run["lines"])
    match = re.search(r"reward_first10=([\d.]+) reward_last10=([\d.]+)", text)
    assert match, text[-2000:]
    first, last = float(match.group(1)), float(match.group(2))
    assert last > first + 0.2, (first, last)


def _series(metrics: str) -> dict[str, float]:
    series = {}
    for line in metrics.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            series[key] = float(value)
    return series


def test_scrape_has_every_algorithm_and_framework_metric(live_run: dict) -> None:
    names = {re.split(r"[{ ]", key)[0] for key in _series(live_run["metrics"])}
    missing = [n for n in ALGORITHM + FRAMEWORK if n not in names]
    assert not missing, missing


def test_scrape_values(live_run: dict) -> None:
    series = _series(live_run["metrics"])
    assert 'verl_rollout_buffer_size{stage="train"}' in series
    assert series["verl_global_step"] >= 5
    for stage in STAGES:
        assert f'verl_stage_seconds{{stage="{stage}"}}' in series
    assert series['verl_stage_seconds{stage="rollout"}'] > 0
    assert {'verl_layer_kl{layer="0"}', 'verl_layer_kl{layer="1"}'} <= set(series)
    assert series["verl_actor_tokens_per_second"] > 0
    assert series["verl_host_cpu_utilization_ratio"] >= 0
    info = next(k for k in series if k.startswith("verl_config_info{"))
    for label in ('kl_coef="0.01"', 'rollout_buffer_max_size="50000"', 'gpu_model="cpu"', 'model="tiny-gpt2"',
                  'rollout_buffer_eviction_policy="fifo"', 'offload_reward_to_cpu="false"'):
        assert label in info


def test_no_gpu_series_without_gpu(live_run: dict) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert "verl_gpu_memory_used_bytes{" not in live_run["metrics"]


def test_health_and_outliers(live_run: dict) -> None:
    assert live_run["healthz"]["status"] == "ok" and live_run["healthz"]["global_step"] >= 5
    outliers = live_run["outliers"]["outliers"]
    assert len(outliers) == 3
    assert {"prompt", "reward", "z", "step"} <= set(outliers[0])
    assert outliers[0]["z"] >= outliers[-1]["z"]


def test_lost_and_duplicated_prompts_are_counted_and_never_trained() -> None:
    from verl.trainer import RLTrainer

    trainer = RLTrainer("ppo_tiny", overrides=["trainer.total_steps=2", "metrics.layer_kl=false"])
    generate = trainer.rollout.generate
    seen: list[list[int]] = []

    def faulty(prompts: list, step: int) -> list:
        out = generate(prompts, step)
        return out[1:] + out[-1:] if step == 2 else out  # step 2: the first lost, the last twice

    put = trainer.buffer.put

    def recording(rollouts: list) -> int:
        seen.append([r.prompt_id for r in rollouts])
        return put(rollouts)

    trainer.rollout.generate, trainer.buffer.put = faulty, recording
    try:
        trainer.train()
        lost = trainer.registry["verl_rollout_prompts_lost_total"]._value.get()
        dup = trainer.registry["verl_rollout_prompts_duplicated_total"]._value.get()
    finally:
        trainer.close()
    assert (lost, dup) == (1, 1)
    assert len(seen[1]) == len(set(seen[1])) == len(seen[0]) - 1  # the duplicate never reached the buffer
