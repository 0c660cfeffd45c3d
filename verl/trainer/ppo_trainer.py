"""``RLTrainer``: the PPO loop as a pipeline of stages, one PPO step per ``step()``.

dataloader -> rollout -> reward -> (buffer) -> reference -> critic -> actor_update -> checkpoint

Each stage is timed into ``verl_stage_seconds{stage}``. Fault-tolerance components plug in through plain
attributes: ``reward`` (anything with ``.score(texts)``), ``rollout`` (a ``RolloutEngine``), ``loader``
(``RLDataLoader``, with ``filters``), ``buffer`` (``RolloutBuffer``) and ``checkpointer``.
"""

from __future__ import annotations

import copy
import glob
import logging
import math
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from verl.config import Config, ConfigError, TrainingStopped, load_config
from verl.data.buffer import Rollout, RolloutBuffer
from verl.data.loader import PromptDataset, PromptItem, RLDataLoader
from verl.fault import DegradedOOMError
from verl.metrics.hardware import HardwareSampler
from verl.metrics.outliers import OutlierBook, RewardRecord
from verl.metrics.registry import MetricsRegistry
from verl.metrics.server import MetricsServer
from verl.metrics.sink import Sampler, StepStats, TrainerMetrics
from verl.models.loading import load_causal_lm, load_critic, load_tokenizer, model_label
from verl.models.reward import load_reward_model
from verl.rollout import make_rollout_engine, reconcile
from verl.trainer import core_algos
from verl.trainer.batch import PPOBatch, collate_rollouts
from verl.trainer.distributed import (
    DistContext,
    gather_objects,
    init_distributed,
    mean_across_ranks,
    resolve_device,
    shutdown,
)
from verl.trainer.fault_tolerance import (
    build_data_guards,
    build_reward_path,
    build_update_guards,
    pause_label,
)
from verl.trainer.faults import CoreFaults, delay_checkpoint_writes, kill_worker_when_busy
from verl.trainer.models import layer_kl, log_prob_and_entropy, response_logits, values_of
from verl.trainer.reward_stage import RewardStage
from verl.utils.clock import Clock, SystemClock
from verl.utils.seeding import load_rng_state, rng_state, seed_everything

log = logging.getLogger("verl.trainer")


class Checkpointer(Protocol):
    """Implemented by the fault-tolerance checkpoint component (``verl.checkpoint``)."""

    def save(self, trainer: RLTrainer, step: int, final: bool = False) -> float:
        """Save (async where configured); returns seconds the step was blocked."""

    def resume(self, trainer: RLTrainer) -> int | None:
        """Load the newest complete checkpoint into ``trainer``; its step, or None when there is none."""

    def close(self) -> None: ...


@dataclass
class TrainResult:
    steps: int
    rewards: list[float] = field(default_factory=list)
    tokens_per_second: list[float] = field(default_factory=list)
    metrics_url: str | None = None

    @property
    def reward_first10(self) -> float:
        return _mean(self.rewards[:10])

    @property
    def reward_last10(self) -> float:
        return _mean(self.rewards[-10:])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


class RLTrainer:
    def __init__(self, config: Config | str | Path = "ppo_tiny", checkpoint_dir: str | Path | None = None, *,
                 overrides: list[str] | tuple[str, ...] = (), clock: Clock | None = None,
                 metrics_registry: MetricsRegistry | None = None) -> None:
        self.config = config if isinstance(config, Config) else load_config(str(config), overrides)
        cfg = self.config
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.clock = clock or SystemClock()
        self.ctx: DistContext = init_distributed(cfg.trainer.dist_backend)
        if cfg.trainer.torch_threads > 0:
            torch.set_num_threads(cfg.trainer.torch_threads)
        seed_everything(cfg.trainer.seed + self.ctx.rank)
        if cfg.trainer.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)

        # Placement per component (the article: actor on A100, reward model on V100).
        self.actor_device = resolve_device(cfg.actor.device, self.ctx, "actor.device")
        self.critic_device = resolve_device(cfg.critic.device, self.ctx, "critic.device")
        self.ref_device = resolve_device(cfg.reference.device, self.ctx, "reference.device")
        reward_spec = "cpu" if cfg.offload_reward_to_cpu else cfg.reward.device
        self.reward_device = resolve_device(reward_spec, self.ctx, "reward.device")

        self.registry = metrics_registry or MetricsRegistry()
        # Data first: a missing dataset should fail before any model is built.
        self.data_guards = build_data_guards(cfg, self.registry)
        self.loader = RLDataLoader(
            PromptDataset(cfg.data.prompt_dataset, cfg.data.prompt_key), cfg.data.batch_size,
            seed=cfg.trainer.seed, shuffle=cfg.data.shuffle, num_workers=cfg.data.num_workers,
            persistent_workers=cfg.data.persistent_workers, pin_memory=cfg.data.pin_memory,
            rank=self.ctx.rank, world_size=self.ctx.world_size, clusters=self.data_guards.clusters,
        )
        if self.loader.duplicates_removed:
            log.info("data guard: %d near-duplicate prompts removed", self.loader.duplicates_removed)
        self.buffer = RolloutBuffer(cfg.rollout_buffer_max_size, cfg.rollout_buffer_eviction_policy)

        n_positions = cfg.data.max_prompt_length + cfg.rollout.response_length + 1
        self.tokenizer = load_tokenizer(cfg.actor.model)
        self.actor = load_causal_lm(cfg.actor.model, cfg.actor.tiny, n_positions, cfg.trainer.seed).to(self.actor_device)
        self.reference = copy.deepcopy(self.actor).to(self.ref_device).eval().requires_grad_(False)
        self.critic = load_critic(cfg.critic.model or cfg.actor.model, cfg.actor.tiny, n_positions,
                                  cfg.trainer.seed).to(self.critic_device)
        self._set_gradient_checkpointing()
        self.actor_ddp: nn.Module = self._wrap(self.actor, self.actor_device)
        self.critic_ddp: nn.Module = self._wrap(self.critic, self.critic_device)
        self.actor_optim = torch.optim.AdamW(self.actor.parameters(), lr=cfg.actor.lr)
        self.critic_optim = torch.optim.AdamW(self.critic.parameters(), lr=cfg.critic.lr)
        warmup = max(1, cfg.actor.warmup_steps)
        self.actor_sched = torch.optim.lr_scheduler.LambdaLR(self.actor_optim, lambda s: min(1.0, (s + 1) / warmup))
        self.critic_sched = torch.optim.lr_scheduler.LambdaLR(self.critic_optim, lambda s: min(1.0, (s + 1) / warmup))
        self.kl_ctrl = core_algos.make_kl_controller(cfg.algorithm.kl_ctrl, cfg.kl_coef, cfg.algorithm.kl_target,
                                                     cfg.algorithm.kl_horizon)

        self.updates = build_update_guards(self)
        base_reward = load_reward_model(cfg.reward.path, device=str(self.reward_device),
                                        batch_size=cfg.reward_batch_size)
        self.reward_path = build_reward_path(base_reward, cfg, self.clock, self.registry)
        self.reward_stage = RewardStage(cfg, self.reward_path, self.data_guards, self.buffer, self.registry,
                                        self.clock, self.ctx)
        self.rollout: Any = self._make_rollout(n_positions)
        self.faults = CoreFaults(cfg.faults, self.clock, self.actor_device)
        self.checkpointer: Checkpointer | None = _default_checkpointer(self)
        delay_checkpoint_writes(self.checkpointer, cfg.faults.checkpoint_write_delay_s)

        self.metrics = TrainerMetrics(self.registry, self.clock, enabled=cfg.metrics.enabled)
        self.outliers = OutlierBook()
        self.hardware = HardwareSampler(self.registry)
        self.metrics.set_config_info(self.config_info())
        model_cfg = self.actor.config
        self.metrics.init_layers(getattr(model_cfg, "n_layer", None) or getattr(model_cfg, "num_hidden_layers", 0))
        self.metrics.init_workers(max(1, cfg.rollout_worker_num))  # the in-process engine is worker "0"
        if cfg.metrics.enabled and not cfg.rollout_worker_num:  # the in-process engine: one always-alive worker
            self.registry["verl_rollout_workers_alive"].set(1)
        self.server: MetricsServer | None = None
        self.sampler: Sampler | None = None

        self.global_step = 0
        self._stop_reason: str | None = None
        self._last_work_seconds = 0.0
        self._evictions_reported = 0
        self._tty = sys.stderr.isatty()

    @property
    def reward(self) -> Any:
        """The reward seam: the circuit-breaker-wrapped model, or any ``.score(texts)`` object assigned here."""
        return self.reward_stage.reward

    @reward.setter
    def reward(self, model: Any) -> None:
        self.reward_stage.reward = model

    # ---- set-up helpers -------------------------------------------------------------------------------
    def _make_rollout(self, n_positions: int) -> Any:
        cfg = self.config
        kills = cfg.faults.kill_rollout_worker_at_steps
        if cfg.rollout_worker_num <= 0 or cfg.rollout.engine != "hf":
            if kills:
                log.warning("faults.kill_rollout_worker_at_steps needs rollout_worker_num > 0 (hf engine): ignored")
            return make_rollout_engine(cfg, self.actor, self.tokenizer, self.clock)
        from verl.rollout.workers import ModelSpec, WorkerRolloutEngine

        gen = {"response_length": cfg.rollout.response_length, "max_prompt_length": cfg.data.max_prompt_length,
               "temperature": cfg.rollout.temperature, "seed": cfg.trainer.seed}
        engine = WorkerRolloutEngine(
            self.actor, ModelSpec(cfg.actor.model, cfg.actor.tiny, n_positions, cfg.trainer.seed), gen,
            cfg.rollout_worker_num, cfg.rollout.worker_chunk_size, cfg.trainer.seed, self.clock,
            torch_threads=max(1, cfg.trainer.torch_threads), metrics=self.registry,
        )
        if kills:
            n = cfg.rollout_worker_num
            engine.on_step = lambda pool, step: kill_worker_when_busy(pool, step % n) if step in kills else None
        return engine

    def _wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        if not self.ctx.distributed:
            return module
        ids = [device.index] if device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def _set_gradient_checkpointing(self) -> None:
        if self.config.actor.gradient_checkpointing:
            self.actor.gradient_checkpointing_enable()
        if self.config.critic.gradient_checkpointing and hasattr(self.critic.backbone, "gradient_checkpointing_enable"):
            self.critic.backbone.gradient_checkpointing_enable()

    def config_info(self) -> dict[str, str]:
        cfg = self.config
        gpu_model = self.hardware.gpu_model if hasattr(self, "hardware") else "cpu"
        return {
            "node": socket.gethostname(), "gpu_model": gpu_model, "model": model_label(cfg.actor.model),
            "kl_coef": str(cfg.kl_coef), "reward_batch_size": str(cfg.reward_batch_size),
            "rollout_worker_num": str(cfg.rollout_worker_num),
            "rollout_buffer_max_size": str(cfg.rollout_buffer_max_size),
            "rollout_buffer_eviction_policy": cfg.rollout_buffer_eviction_policy,
            "data_num_workers": str(cfg.data.num_workers),
            "data_persistent_workers": str(cfg.data.persistent_workers).lower(),
            "data_pin_memory": str(cfg.data.pin_memory).lower(),
            "offload_reward_to_cpu": str(cfg.offload_reward_to_cpu).lower(),
        }

    def start_metrics_server(self, host: str | None = None, port: int | None = None) -> str | None:
        """Serve /metrics on this node's local rank 0; returns the URL (None on other ranks)."""
        host = host or self.config.metrics.host
        port = self.config.metrics.port if port is None else port
        if port is None or not self.ctx.is_node_main:
            return None
        self.server = MetricsServer(self.registry.registry, host, port, self.health,
                                    lambda k: self.outliers.top(k), api_token=self.config.metrics.api_token)
        self.sampler = Sampler(self.hardware, self.config.metrics.hardware_interval_s, self.config.metrics.interval_s,
                               [self._refresh_framework])
        self.sampler.start()
        return self.server.url

    def health(self) -> dict[str, Any]:
        degraded = [name for name, d in (("critic", self.updates.critic), ("actor", self.updates.actor)) if d.degraded]
        return {"status": "ok", "global_step": self.global_step, "rank": self.ctx.rank,
                "world_size": self.ctx.world_size, "reward_circuit": self.reward_path.breaker.state.name.lower(),
                "degraded": degraded}

    def _refresh_framework(self) -> None:
        self.metrics.observe_buffer(len(self.buffer), self.buffer.oldest_age(self.clock.now()), 0)

    # ---- state for checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything stateful except model parameters and optimizer state (saved separately).

        Under torchrun every rank must call it (the checkpoint hook does): each rank's loader offset,
        prompt-cluster cooldowns, reward cache and drop counts differ, and meta.json is written by rank 0,
        so they are gathered into ``per_rank``. The reward guard and OOM flags are the same on every rank.
        """
        local = {"dataloader": self.loader.state_dict(), "reward_cache": self.reward_path.breaker.state_dict(),
                 "validator": self.data_guards.validator.state_dict()}
        return {"global_step": self.global_step, "dataloader": local["dataloader"],
                "per_rank": gather_objects(local, self.ctx),
                "kl_ctrl": self.kl_ctrl.state_dict(), "actor_lr_scheduler": self.actor_sched.state_dict(),
                "critic_lr_scheduler": self.critic_sched.state_dict(), "buffer": self.buffer.state_dict(),
                "reward_guard": self.data_guards.reward.state_dict(), "refill_after": self.reward_stage.refill_after,
                "oom": {"critic": self.updates.critic.state_dict(), "actor": self.updates.actor.state_dict()},
                "rng": rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])
        per_rank = state.get("per_rank") or [{"dataloader": state["dataloader"]}]
        if len(per_rank) != self.ctx.world_size:
            raise ConfigError(f"checkpoint state mismatch: saved by {len(per_rank)} ranks, this run has "
                              f"{self.ctx.world_size}; relaunch with the same number of ranks")
        local = per_rank[self.ctx.rank]
        self.loader.load_state_dict(local["dataloader"])
        if "reward_cache" in local:
            self.reward_path.breaker.load_state_dict(local["reward_cache"])
        if "validator" in local:
            self.data_guards.validator.load_state_dict(local["validator"])
        self.reward_stage.refill_after = int(state.get("refill_after", 0))
        if "reward_guard" in state:
            self.data_guards.reward.load_state_dict(state["reward_guard"])
        for name, degrader in (("critic", self.updates.critic), ("actor", self.updates.actor)):
            degrader.load_state_dict(state.get("oom", {}).get(name, {}))
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.actor_sched.load_state_dict(state["actor_lr_scheduler"])
        self.critic_sched.load_state_dict(state["critic_lr_scheduler"])
        self.buffer.load_state_dict(state["buffer"])
        self._evictions_reported = self.buffer.evictions
        load_rng_state(state["rng"])

    def param_digest(self) -> str:
        import hashlib

        h = hashlib.sha256()
        for model in (self.actor, self.critic):
            for name, tensor in sorted(model.state_dict().items()):
                h.update(name.encode())
                h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    # ---- the loop -------------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: bool = False, resume_or_start: bool = False) -> TrainResult:
        """``resume_from_checkpoint``: continue from the newest complete checkpoint, and raise
        ``ConfigError`` when there is none (a mistyped directory must not silently start over);
        ``resume_or_start`` also allows that fresh start."""
        cfg = self.config
        if resume_from_checkpoint:
            self._resume(resume_or_start)
        log.info("rank=%d step=%d initial param_sha256=%s", self.ctx.rank, self.global_step, self.param_digest())
        url = self.server.url if self.server else None
        result = TrainResult(steps=0, metrics_url=url)
        try:
            while self.global_step < cfg.trainer.total_steps:
                stats = self.step()
                result.rewards.append(stats.reward_mean)
                result.tokens_per_second.append(stats.tokens_per_second)
                self._report(stats)
                if self._stop_reason is not None:
                    self._stop()
            if self.checkpointer is not None:
                self.checkpointer.save(self, self.global_step, final=True)
        finally:
            if self._tty and self.ctx.is_main:
                sys.stderr.write("\n")
        result.steps = self.global_step
        if self.ctx.is_main:
            log.info("finished step=%d reward_first10=%.4f reward_last10=%.4f", self.global_step,
                     result.reward_first10, result.reward_last10)
        log.info("rank=%d step=%d param_sha256=%s", self.ctx.rank, self.global_step, self.param_digest())
        return result

    def _stop(self) -> None:
        """Checkpoint the step just finished (its failed update skipped), then stop with one line."""
        where = "no checkpoint_dir: nothing saved"
        if self.checkpointer is not None:
            self.checkpointer.save(self, self.global_step, final=True)
            where = f"checkpoint global_step_{self.global_step} written; fix it, then --resume"
        raise TrainingStopped(f"{self._stop_reason} ({where})")

    def _resume(self, start_if_missing: bool = False) -> None:
        step = None
        if self.checkpointer is not None:
            step = self.checkpointer.resume(self)
        elif self.checkpoint_dir and glob.glob(str(self.checkpoint_dir / "global_step_*")):
            raise ConfigError(f"--resume: checkpoints exist in '{self.checkpoint_dir}' but checkpoint support "
                              "(verl.checkpoint) is not installed; refusing to start over silently")
        if step is not None:
            log.info("resumed from step %s", step)
            return
        if not start_if_missing:
            found = sorted(glob.glob(str(self.checkpoint_dir / "global_step_*"))) if self.checkpoint_dir else []
            hint = (f"{len(found)} global_step_* dir(s) there lack the COMPLETE marker; check them with verl-ckpt list"
                    if found else "check --checkpoint-dir")
            raise ConfigError(f"--resume: no complete checkpoint in '{self.checkpoint_dir}' ({hint}); "
                              "pass --resume-or-start to start from step 0 instead")
        log.info("resume requested, no checkpoint found in %s: fresh start (--resume-or-start)", self.checkpoint_dir)

    def step(self) -> StepStats:
        cfg, clock = self.config, self.clock
        step = self.global_step + 1
        self.data_guards.clock.step = step
        stage: dict[str, float] = {}
        t_step = clock.monotonic()

        t = clock.monotonic()
        self.faults.throughput_sleep(step, self._last_work_seconds)
        injected = clock.monotonic() - t
        prompts = self._prompts(step)
        stage["dataloader"] = clock.monotonic() - t

        t = clock.monotonic()
        rollouts = self._reconciled(prompts, self.rollout.generate(prompts, step), step)
        stage["rollout"] = clock.monotonic() - t
        self.faults.maybe_kill(step)

        t = clock.monotonic()
        scored = self.reward_stage.run(step, rollouts, self.loader.per_rank)
        scores, verdict, pause = scored.scores, scored.verdict, scored.pause
        stage["reward"] = clock.monotonic() - t

        batch = collate_rollouts(scored.batch, self.tokenizer.pad_token_id, cfg.rollout.response_length)
        want_layers = cfg.metrics.enabled and cfg.metrics.layer_kl
        t = clock.monotonic()
        with torch.no_grad():
            ref_logits, ref_hidden = response_logits(self.reference, batch.to(self.ref_device), want_layers)
            ref_log_prob = core_algos.log_probs_of(ref_logits, batch.responses.to(self.ref_device))
        stage["reference"] = clock.monotonic() - t

        t = clock.monotonic()
        self.actor.eval()   # old log-probs and values without dropout noise; updates switch back to train()
        self.critic.eval()
        with torch.no_grad():
            a_batch = batch.to(self.actor_device)
            old_logits, old_hidden = response_logits(self.actor, a_batch, want_layers)
            old_log_prob = core_algos.log_probs_of(old_logits, a_batch.responses)
        t_actor_pre = clock.monotonic() - t

        t = clock.monotonic()
        mask = batch.response_mask.to(self.actor_device)
        kl = core_algos.kl_penalty(old_log_prob, ref_log_prob.to(self.actor_device), cfg.algorithm.kl_penalty)
        beta = self.faults.kl_coef(step, self.kl_ctrl.value)
        rewards = core_algos.token_level_rewards(batch.scores.to(self.actor_device), kl, mask, beta)
        with torch.no_grad():
            values = values_of(self.critic, batch.to(self.critic_device)).to(self.actor_device)
        advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, cfg.algorithm.gamma,
                                                                      cfg.algorithm.lam)
        raw_adv_var = float(core_algos.masked_var(returns - values, mask))
        critic_out: dict[str, Any] = {"vf_loss": math.nan, "grad_norm": math.nan, "nonfinite": False}
        actor_out: dict[str, Any] = {"pg_loss": math.nan, "clipfrac": math.nan, "entropy": math.nan,
                                     "grad_norm": math.nan, "nonfinite": False}
        if pause:
            label = pause_label(verdict.reason, scores)
            log.warning("reward guard: update of step %d skipped (%s)", step, label)
            if cfg.metrics.enabled:
                self.registry["verl_batches_paused_total"].labels(reason=label).inc()
        else:
            try:
                critic_out = self.updates.critic.run(lambda micro: self._critic_attempt(step, batch, values,
                                                                                        returns, micro))
                stage["critic"] = clock.monotonic() - t
                t = clock.monotonic()
                actor_out = self.updates.actor.run(lambda micro: self._update_actor(batch, old_log_prob,
                                                                                    advantages, micro))
            except DegradedOOMError as exc:
                self._stop_reason = str(exc)
        if "critic" not in stage:  # paused, or stopped inside the critic update
            stage["critic"] = clock.monotonic() - t
            t = clock.monotonic()
        stage["actor_update"] = clock.monotonic() - t + t_actor_pre
        current_kl = float(core_algos.masked_mean(kl, mask))
        if not pause:
            self.kl_ctrl.update(mean_across_ranks([current_kl], self.ctx)[0], n_steps=cfg.data.batch_size)

        layers = (layer_kl(self.actor, self.reference, old_hidden, ref_hidden, a_batch, (old_logits, ref_logits))
                  if want_layers and old_hidden is not None and ref_hidden is not None else [])
        self.faults.grow_leak()
        self.global_step = step

        t = clock.monotonic()
        stall = 0.0
        if (self.checkpointer is not None and self._stop_reason is None and cfg.checkpoint.interval > 0
                and step % cfg.checkpoint.interval == 0):
            stall = self.checkpointer.save(self, step)
        stage["checkpoint"] = clock.monotonic() - t

        step_seconds = clock.monotonic() - t_step
        self._last_work_seconds = step_seconds - injected
        n_tokens = float(batch.attention_mask.sum())
        means = mean_across_ranks([
            current_kl, actor_out["entropy"], actor_out["clipfrac"], raw_adv_var, actor_out["pg_loss"],
            critic_out["vf_loss"], actor_out["grad_norm"], critic_out["grad_norm"], n_tokens, *layers,
        ], self.ctx)
        stats = StepStats(
            global_step=step, reward_mean=_mean(scores), reward_std=_std(scores),
            reward_extreme_ratio=verdict.extreme_ratio,
            kl=means[0], kl_coef=beta,
            entropy=means[1], clip_fraction=means[2], advantage_variance=means[3], policy_loss=means[4],
            critic_loss=means[5], grad_norm={"actor": means[6], "critic": means[7]}, layer_kl=means[9:],
            stage_seconds=stage, tokens_per_second=means[8] * self.ctx.world_size / max(step_seconds, 1e-9),
            dataloader_wait_seconds=stage["dataloader"], step_seconds=step_seconds,
            nonfinite=bool(actor_out["nonfinite"] or critic_out["nonfinite"]), extra={"checkpoint_stall": stall},
        )
        self._observe(stats, scored.valid, scored.taken_at, scored.evicted)
        return stats

    def _reconciled(self, prompts: list[PromptItem], rollouts: list[Rollout], step: int) -> list[Rollout]:
        got = reconcile(prompts, rollouts)
        if got.lost or got.duplicated:
            log.error("rollout of step %d: %d prompt(s) lost, %d duplicate rollout(s) dropped", step, got.lost,
                      got.duplicated)
        if self.config.metrics.enabled:
            self.registry["verl_rollout_prompts_lost_total"].inc(got.lost)
            self.registry["verl_rollout_prompts_duplicated_total"].inc(got.duplicated)
        return got.rollouts

    def _prompts(self, step: int) -> list[PromptItem]:
        """This step's prompts, plus one extra batch while the rollout backlog is below its target."""
        prompts = self.loader.next_batch()
        target = self.loader.per_rank * self.config.rollout.prefetch_batches
        if step > self.reward_stage.refill_after and len(self.buffer) < target:
            prompts += self.loader.next_batch()
        if not prompts:
            raise RuntimeError("every prompt was filtered out by loader filters; check the dataset and filters")
        return prompts

    def _observe(self, stats: StepStats, rollouts: list[Rollout], now: float, evicted: int) -> None:
        if not self.config.metrics.enabled:
            return
        self.outliers.record([RewardRecord(stats.global_step, r.prompt_id, r.prompt, r.response, float(r.reward or 0))
                              for r in rollouts])
        self.metrics.observe_step(stats)
        self.metrics.observe_buffer(len(self.buffer), self.buffer.oldest_age(now), evicted)
        self.metrics.observe_samples([r.prompt for r in rollouts], [float(r.reward or 0) for r in rollouts],
                                     [max(0.0, now - r.created_at) for r in rollouts])
        if stats.global_step == 1 or stats.global_step % self.config.metrics.data_interval_steps == 0:
            self.metrics.report_data_level()

    # ---- updates --------------------------------------------------------------------------------------
    def _minibatches(self, size: int) -> list[torch.Tensor]:
        mini = min(self.config.actor.ppo_mini_batch_size, size)
        return [torch.arange(i, min(i + mini, size)) for i in range(0, size, mini)]

    def _critic_attempt(self, step: int, batch: PPOBatch, values: torch.Tensor, returns: torch.Tensor,
                        micro_batches: int) -> dict[str, float]:
        self.updates.injected.maybe_raise(step, "critic")  # faults.critic_oom_at_step, before any work
        return self._update_critic(batch, values, returns, micro_batches)

    def _update_critic(self, batch: PPOBatch, values: torch.Tensor, returns: torch.Tensor,
                       micro_batches: int) -> dict[str, float]:
        cfg = self.config.critic
        device = self.critic_device
        cbatch, values, returns = batch.to(device), values.to(device), returns.to(device)
        losses, norms, nonfinite = [], [], False
        self.critic.train()
        for _ in range(self.config.actor.ppo_epochs):
            for idx in self._minibatches(cbatch.size):
                self.critic_optim.zero_grad(set_to_none=True)
                chunks = idx.chunk(micro_batches)
                for micro in chunks:
                    mb = cbatch.select(micro)
                    vpreds = values_of(self.critic_ddp, mb)
                    loss, _ = core_algos.compute_value_loss(vpreds, returns[micro], values[micro], mb.response_mask,
                                                            cfg.cliprange_value)
                    (loss * len(micro) / len(idx)).backward()
                    losses.append(loss.item())
                norm = float(torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip))
                norms.append(norm)
                if math.isfinite(norm) and all(math.isfinite(v) for v in losses[-len(chunks):]):
                    self.critic_optim.step()
                else:
                    nonfinite = True
        self.critic_sched.step()
        return {"vf_loss": _mean(losses), "grad_norm": _mean(norms), "nonfinite": nonfinite}

    def _update_actor(self, batch: PPOBatch, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      micro_batches: int) -> dict[str, float]:
        cfg = self.config.actor
        abatch = batch.to(self.actor_device)
        pg_losses, clipfracs, entropies, norms, nonfinite = [], [], [], [], False
        self.actor.train()
        for _ in range(cfg.ppo_epochs):
            for idx in self._minibatches(abatch.size):
                self.actor_optim.zero_grad(set_to_none=True)
                chunks = idx.chunk(micro_batches)
                for micro in chunks:
                    mb = abatch.select(micro)
                    log_prob, entropy = log_prob_and_entropy(self.actor_ddp, mb)
                    pg_loss, clipfrac, _ = core_algos.compute_policy_loss(
                        old_log_prob[micro], log_prob, advantages[micro], mb.response_mask, cfg.clip_ratio,
                        cfg.clip_ratio_c)
                    mean_entropy = core_algos.masked_mean(entropy, mb.response_mask)
                    loss = pg_loss - cfg.entropy_coeff * mean_entropy
                    (loss * len(micro) / len(idx)).backward()
                    pg_losses.append(pg_loss.item())
                    clipfracs.append(clipfrac.item())
                    entropies.append(mean_entropy.item())
                norm = float(torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip))
                norms.append(norm)
                if math.isfinite(norm) and all(math.isfinite(v) for v in pg_losses[-len(chunks):]):
                    self.actor_optim.step()
                else:
                    nonfinite = True
        self.actor_sched.step()
        self.rollout.sync_weights(self.actor)
        return {"pg_loss": _mean(pg_losses), "clipfrac": _mean(clipfracs), "entropy": _mean(entropies),
                "grad_norm": _mean(norms), "nonfinite": nonfinite}

    # ---- reporting ------------------------------------------------------------------------------------
    def _report(self, s: StepStats) -> None:
        if not self.ctx.is_main:
            return
        total = self.config.trainer.total_steps
        line = (f"step {s.global_step}/{total} | reward {s.reward_mean:.3f} | kl {s.kl:.4f} | "
                f"{s.tokens_per_second:,.0f} tok/s")
        if self._tty:
            sys.stderr.write("\r" + line.ljust(80))
            sys.stderr.flush()
        elif s.global_step % self.config.trainer.log_interval == 0 or s.global_step == total:
            log.info("%s | pg_loss %.4f | vf_loss %.4f | clipfrac %.3f | entropy %.3f", line, s.policy_loss,
                     s.critic_loss, s.clip_fraction, s.entropy)

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()
        if self.server:
            self.server.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        self.reward_path.faulty.close()
        self.reward_path.breaker.close()
        if hasattr(self.rollout, "close"):
            self.rollout.close()
        self.metrics.close()
        shutdown(self.ctx)


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _default_checkpointer(trainer: RLTrainer) -> Checkpointer | None:
    """The fault-tolerance engineer's ``verl.checkpoint.make_checkpointer`` when present."""
    if trainer.checkpoint_dir is None:
        return None
    try:
        from verl.checkpoint import make_checkpointer  # type: ignore[attr-defined]
    except ImportError:
        log.warning("checkpoint_dir given but verl.checkpoint is not available: no checkpoints will be written")
        return None
    return make_checkpointer(trainer.config, trainer.checkpoint_dir, trainer.clock, trainer.ctx)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
