"""Value checks of the trainer config, as data: one row per numeric key.

Every ``int``/``float`` field of the schema must have a row here (``tests/verl/test_config_values.py``
fails otherwise), so a key added later cannot slip through unchecked: add its row beside the field.
Floats are also checked for finiteness by the loader (``nan``/``inf`` never reach a check).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.metrics.catalog import STAGES


@dataclass(frozen=True)
class Range:
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself is not allowed
    hi_open: bool = False

    def admits(self, value: float) -> bool:
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))

    def describe(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        return " and ".join(parts) or "any number"


AT_LEAST_1 = Range(lo=1)
AT_LEAST_0 = Range(lo=0)
POSITIVE = Range(lo=0, lo_open=True)
UNIT = Range(lo=0, hi=1)
FRACTION = Range(lo=0, hi=1, lo_open=True)  # (0, 1]

# key -> allowed range; `None` values of optional keys are not checked. List keys apply to each item.
RANGES: dict[str, Range] = {
    "trainer.total_steps": AT_LEAST_1,
    "trainer.seed": AT_LEAST_0,
    "trainer.log_interval": AT_LEAST_1,
    "trainer.torch_threads": AT_LEAST_0,
    "data.batch_size": AT_LEAST_1,
    "data.max_prompt_length": AT_LEAST_1,
    "data.num_workers": AT_LEAST_0,
    "data.cooldown_minutes": AT_LEAST_0,
    "data.max_response_tokens": AT_LEAST_1,
    "data.guard_step_seconds": POSITIVE,
    "actor.tiny.n_layer": AT_LEAST_1,
    "actor.tiny.n_embd": AT_LEAST_1,
    "actor.tiny.n_head": AT_LEAST_1,
    "actor.lr": POSITIVE,
    "actor.warmup_steps": AT_LEAST_0,
    "actor.ppo_epochs": AT_LEAST_1,
    "actor.ppo_mini_batch_size": AT_LEAST_1,
    "actor.clip_ratio": Range(lo=0, hi=1, lo_open=True, hi_open=True),
    "actor.clip_ratio_c": Range(lo=1, lo_open=True),
    "actor.entropy_coeff": AT_LEAST_0,
    "actor.grad_clip": POSITIVE,
    "actor.micro_batches": AT_LEAST_1,
    "critic.lr": POSITIVE,
    "critic.ppo_epochs": AT_LEAST_1,
    "critic.ppo_mini_batch_size": AT_LEAST_1,
    "critic.cliprange_value": POSITIVE,
    "critic.grad_clip": POSITIVE,
    "critic.micro_batches": AT_LEAST_1,
    "reward.timeout_s": POSITIVE,
    "reward.failure_threshold": AT_LEAST_1,
    "reward.cache_size": AT_LEAST_1,
    "reward.probe_interval_s": POSITIVE,
    "reward.deadline_multiplier": AT_LEAST_0,
    "reward.deadline_floor_s": AT_LEAST_0,
    "rollout.response_length": AT_LEAST_1,
    "rollout.temperature": POSITIVE,
    "rollout.prefetch_batches": AT_LEAST_0,
    "rollout.oom_backoff_steps": AT_LEAST_0,
    "rollout.worker_chunk_size": AT_LEAST_1,
    "algorithm.gamma": UNIT,
    "algorithm.lam": UNIT,
    "algorithm.kl_target": POSITIVE,
    "algorithm.kl_horizon": AT_LEAST_1,
    "guard.variance_jump": Range(lo=1, lo_open=True),
    "guard.extreme_ratio": FRACTION,
    "guard.window": AT_LEAST_1,
    "checkpoint.interval": AT_LEAST_0,
    "checkpoint.keep_last": AT_LEAST_1,
    "checkpoint.rollout_cache_shard_bytes": AT_LEAST_1,
    "checkpoint.memory_interval": AT_LEAST_0,
    "checkpoint.memory_keep_last": AT_LEAST_1,
    "checkpoint.sigterm_grace_s": POSITIVE,
    "faults.reward_hang_at_step": AT_LEAST_0,
    "faults.reward_oom_at_step": AT_LEAST_0,
    "faults.critic_oom_at_step": AT_LEAST_0,
    "faults.critic_oom_repeat": AT_LEAST_1,
    "faults.reward_hang_seconds": AT_LEAST_0,
    "faults.kill_rollout_worker_at_steps": AT_LEAST_0,
    "faults.checkpoint_enospc_at_steps": AT_LEAST_1,
    "faults.checkpoint_write_delay_s": AT_LEAST_0,
    "faults.gpu_leak_mb_per_min": AT_LEAST_0,
    "faults.throughput_drop_at_step": AT_LEAST_0,
    "faults.throughput_drop_factor": FRACTION,
    "faults.kl_drift_at_step": AT_LEAST_0,
    "faults.kill_trainer_at_step": AT_LEAST_0,
    "faults.slow_rank": AT_LEAST_0,
    "faults.slow_rank_seconds": AT_LEAST_0,
    "faults.slow_rank_from_step": AT_LEAST_1,
    "metrics.port": Range(lo=0, hi=65535),
    "metrics.interval_s": POSITIVE,
    "metrics.hardware_interval_s": POSITIVE,
    "metrics.data_interval_steps": AT_LEAST_1,
    "metrics.outliers_top_k": AT_LEAST_1,
    "kl_coef": AT_LEAST_0,
    "rollout_worker_num": AT_LEAST_0,
    "reward_batch_size": AT_LEAST_1,
    "rollout_buffer_max_size": Range(lo=-1),  # -1 = unbounded; 0 is refused in validate()
}

CHOICES: dict[str, tuple[str, ...]] = {
    "rollout_buffer_eviction_policy": ("fifo", "priority"),
    "algorithm.kl_penalty": ("kl", "abs", "mse", "low_var_kl"),
    "algorithm.kl_ctrl": ("fixed", "adaptive"),
    "rollout.engine": ("hf", "vllm"),
    "trainer.dist_backend": ("auto", "gloo", "nccl"),
    "data.dedup_method": ("minhash", "semantic"),
    "metrics.prompt_analysis": ("auto", "semantic", "lexical"),
    "actor.strategy": ("ddp", "fsdp"),
    "critic.strategy": ("ddp", "fsdp"),
    "faults.slow_rank_stage": STAGES,
}
