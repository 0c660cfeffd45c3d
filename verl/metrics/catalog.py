"""The one catalogue of trainer metric names (the contract with monitors): names, types, labels, help text.

Everything else — the trainer's prometheus_client registry, the Grafana dashboards, the Prometheus
rules and the monitor's default rules — is tested against this module, so a rename here is caught
everywhere. Names are the *exposed* names: counters carry their ``_total`` suffix, the info metric its
``_info`` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "histogram", "info"]
Level = Literal["hardware", "framework", "algorithm", "data"]


@dataclass(frozen=True)
class MetricSpec:
    """One exported series family."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    level: Level = "framework"
    unit: str = ""

    @property
    def base_name(self) -> str:
        """The name prometheus_client wants (it appends ``_total``/``_info`` itself)."""
        if self.kind == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.kind == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name


# Stages of one PPO step, in pipeline order; the dashboard stacks them as a flame graph. old_log_prob,
# critic_values and advantage are the monitor's names for verl's old_log_prob, values and adv timers.
STAGES: tuple[str, ...] = (
    "rollout",
    "reward",
    "reference",
    "old_log_prob",
    "critic_values",
    "advantage",
    "critic",
    "actor_update",
    "checkpoint",
    "dataloader",
)

# Labels of verl_config_info: the live settings that runbooks and incident suggestions quote.
CONFIG_INFO_LABELS: tuple[str, ...] = (
    "node",
    "gpu_model",
    "model",
    "kl_coef",
    "reward_batch_size",
    "rollout_worker_num",
    "rollout_buffer_max_size",
    "rollout_buffer_eviction_policy",
    "data_num_workers",
    "data_persistent_workers",
    "data_pin_memory",
    "offload_reward_to_cpu",
)

_H = "hardware"
_F = "framework"
_A = "algorithm"
_D = "data"

CATALOG: tuple[MetricSpec, ...] = (
    # --- hardware (sampled every 5 s; GPU series are absent, not zero, without a GPU) ---
    MetricSpec("verl_gpu_memory_used_bytes", "gauge", "GPU framebuffer memory in use.", ("gpu",), _H, "bytes"),
    MetricSpec("verl_gpu_memory_total_bytes", "gauge", "GPU framebuffer memory size.", ("gpu",), _H, "bytes"),
    MetricSpec("verl_gpu_utilization_ratio", "gauge", "GPU SM busy ratio (0-1).", ("gpu",), _H, "ratio"),
    MetricSpec("verl_gpu_temperature_celsius", "gauge", "GPU core temperature.", ("gpu",), _H, "celsius"),
    MetricSpec("verl_gpu_pcie_tx_bytes_per_second", "gauge", "PCIe transmit throughput.", ("gpu",), _H, "Bps"),
    MetricSpec("verl_gpu_pcie_rx_bytes_per_second", "gauge", "PCIe receive throughput.", ("gpu",), _H, "Bps"),
    MetricSpec(
        "verl_gpu_nvlink_errors_total", "counter", "NVLink error counts by link and type.",
        ("gpu", "link", "type"), _H,
    ),
    MetricSpec("verl_gpu_xid_errors_total", "counter", "GPU Xid error events by Xid code.", ("gpu", "xid"), _H),
    MetricSpec("verl_host_cpu_utilization_ratio", "gauge", "Host CPU busy ratio (0-1).", (), _H, "ratio"),
    # --- framework (every --metrics-interval, 30 s by default) ---
    MetricSpec("verl_actor_tokens_per_second", "gauge", "Generated + trained tokens per second.", (), _F, "tps"),
    MetricSpec(
        "verl_stage_seconds", "gauge", "Wall time of each stage in the last step.", ("stage",), _F, "seconds"
    ),
    MetricSpec("verl_dataloader_wait_seconds", "gauge", "Time the last step waited for prompts.", (), _F, "seconds"),
    MetricSpec("verl_rollout_buffer_size", "gauge", "Samples held in the rollout buffer.", ("stage",), _F),
    MetricSpec(
        "verl_rollout_buffer_age_seconds", "gauge", "Age of the oldest sample in the rollout buffer.", (), _F,
        "seconds",
    ),
    MetricSpec(
        "verl_rollout_buffer_evictions_total", "counter", "Samples evicted from the bounded rollout buffer.",
        (), _F,
    ),
    MetricSpec("verl_rollout_workers_alive", "gauge", "Rollout worker processes currently alive.", (), _F),
    MetricSpec(
        "verl_rollout_worker_restarts_total", "counter", "Rollout workers restarted by the supervisor.", (), _F
    ),
    MetricSpec(
        "verl_rollout_prompts_lost_total", "counter",
        "Prompts sent to rollout that came back without a response (checked every step).", (), _F,
    ),
    MetricSpec(
        "verl_rollout_prompts_duplicated_total", "counter",
        "Rollouts beyond one per prompt, dropped before the buffer (checked every step).", (), _F,
    ),
    MetricSpec(
        "verl_rollout_worker_cpu_ratio", "gauge", "CPU use of each rollout worker (cores).", ("worker",), _F,
        "ratio",
    ),
    MetricSpec(
        "verl_rollout_samples_dropped_total", "counter", "Rollout samples rejected by validation, by reason.",
        ("reason",), _F,
    ),
    MetricSpec(
        "verl_reward_model_calls_total", "counter", "Reward model calls by outcome (ok, timeout, error, oom, cached).",
        ("outcome",), _F,
    ),
    MetricSpec(
        "verl_reward_model_circuit_state", "gauge", "Reward model circuit breaker: 0 closed, 1 half-open, 2 open.",
        (), _F,
    ),
    MetricSpec("verl_oom_events_total", "counter", "Out-of-memory events by component.", ("component",), _F),
    MetricSpec(
        "verl_degraded_mode", "gauge", "1 while a component runs degraded (grad checkpointing + micro-batches).",
        ("component",), _F,
    ),
    MetricSpec(
        "verl_checkpoint_last_success_timestamp_seconds", "gauge", "Unix time of the last complete checkpoint.",
        (), _F, "seconds",
    ),
    MetricSpec(
        "verl_checkpoint_stall_seconds", "gauge", "Time the last checkpoint blocked the training step.", (), _F,
        "seconds",
    ),
    MetricSpec("verl_checkpoint_failures_total", "counter", "Checkpoint saves that failed.", (), _F),
    MetricSpec(
        "verl_heartbeat_timestamp_seconds", "gauge", "Unix time the training loop last made progress.", (), _F,
        "seconds",
    ),
    MetricSpec("verl_config_info", "info", "Live trainer settings quoted by runbooks.", CONFIG_INFO_LABELS, _F),
    # --- algorithm (every step) ---
    MetricSpec("verl_global_step", "gauge", "Current global training step.", (), _A),
    MetricSpec("verl_kl_divergence", "gauge", "Mean KL(actor || reference) per token (actor/ppo_kl).", (), _A),
    MetricSpec("verl_kl_coef", "gauge", "Current KL penalty coefficient.", (), _A),
    MetricSpec("verl_reward_mean", "gauge", "Mean sequence reward of the batch.", (), _A),
    MetricSpec("verl_reward_std", "gauge", "Standard deviation of sequence rewards in the batch.", (), _A),
    MetricSpec(
        "verl_reward_extreme_ratio", "gauge", "Share of rewards beyond the guard's extreme bound.", (), _A, "ratio"
    ),
    MetricSpec("verl_entropy", "gauge", "Mean token entropy of the actor policy.", (), _A),
    MetricSpec("verl_clip_fraction", "gauge", "Share of tokens where the PPO ratio was clipped.", (), _A, "ratio"),
    MetricSpec("verl_advantage_variance", "gauge", "Variance of whitened-before advantages.", (), _A),
    MetricSpec("verl_policy_loss", "gauge", "PPO clipped policy loss.", (), _A),
    MetricSpec("verl_critic_loss", "gauge", "Clipped value loss.", (), _A),
    MetricSpec("verl_grad_norm", "gauge", "Gradient norm before clipping, by model.", ("model",), _A),
    MetricSpec(
        "verl_layer_kl", "gauge", "Per-layer divergence of the actor from the reference.", ("layer",), _A
    ),
    MetricSpec("verl_nonfinite_steps_total", "counter", "Steps skipped for NaN/Inf loss or gradients.", (), _A),
    MetricSpec(
        "verl_batches_paused_total", "counter", "Updates skipped by the reward guard, by reason.", ("reason",), _A
    ),
    MetricSpec(
        "verl_updates_skipped_total", "counter",
        "Actor updates skipped for want of a reward signal (cached_rewards: every score from the reward cache).",
        ("reason",), _A,
    ),
    # --- data (every 1000 steps, computed asynchronously) ---
    MetricSpec(
        "verl_prompt_diversity", "gauge", "Prompt diversity; method=semantic|lexical says how it was measured.",
        ("method",), _D,
    ),
    MetricSpec(
        "verl_reward_shift_ks_pvalue", "gauge", "KS-test p-value of recent rewards vs. a reference window (1 until the first test).", (), _D
    ),
    MetricSpec(
        "verl_prompt_shift_pvalue", "gauge", "MMD permutation p-value of recent prompt embeddings vs. the run's first prompts (1 until the first test, and without the semantic extra).", (), _D
    ),
    MetricSpec(
        "verl_buffer_sample_age_seconds", "gauge", "Mean age of samples drawn from the rollout buffer.", (), _D,
        "seconds",
    ),
    # --- per-rank times (global rank 0 exports every rank's, gathered each step) ---
    MetricSpec(
        "verl_rank_step_seconds", "gauge", "Wall time of the last step on each torchrun rank (node: its host).",
        ("rank", "node"), _F, "seconds",
    ),
    MetricSpec(
        "verl_rank_stage_seconds", "gauge", "Wall time of each stage of the last step on each torchrun rank.",
        ("rank", "node", "stage"), _F, "seconds",
    ),
    MetricSpec(
        "verl_rank_stage_wait_seconds", "gauge",
        "Part of each stage of the last step a torchrun rank spent blocked in collectives (waiting for its peers).",
        ("rank", "node", "stage"), _F, "seconds",
    ),
    MetricSpec(
        "verl_rank_stage_compute_seconds", "gauge",
        "Part of each stage of the last step a torchrun rank spent outside collectives (its own work).",
        ("rank", "node", "stage"), _F, "seconds",
    ),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}


def names(level: Level | None = None) -> list[str]:
    """Exposed metric names, optionally of one level."""
    return [m.name for m in CATALOG if level is None or m.level == level]
