"""One PPO step, in the order of the algorithm (CleanRL's ``ppo.py`` loop, for LLM rollouts):

    prompts -> rollout -> reward -> reference log-probs -> old log-probs -> advantages (GAE)
            -> critic update -> actor update -> checkpoint

Each stage is timed into ``verl_stage_seconds{stage}`` by ``StageTimer`` (the old log-probs are recomputed
by the actor and counted in ``actor_update``; the advantages in ``critic``). Anything that is not PPO
(drills, probes) acts only through ``trainer.hooks`` at the stage boundaries named in
``verl.trainer.stages``; both updates run through the OOM degrader and the one loop in
``verl.trainer.update``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING

import torch

from verl.data.buffer import Rollout
from verl.data.loader import PromptItem
from verl.metrics.sink import StepStats
from verl.rollout import reconcile
from verl.trainer import core_algos
from verl.trainer.batch import PPOBatch, collate_rollouts
from verl.trainer.distributed import DistContext, mean_across_ranks
from verl.trainer.fsdp import root_unsharded
from verl.trainer.models import layer_kl, log_prob_and_entropy, response_logits, values_of
from verl.trainer.stages import (
    AFTER_ROLLOUT,
    AFTER_UPDATES,
    BEFORE_ADVANTAGES,
    BEFORE_REWARD,
    STEP_END,
    STEP_START,
    StageTimer,
    StepContext,
)
from verl.trainer.update import MicroLoss, UpdateResult, run_update

if TYPE_CHECKING:
    from verl.trainer.ppo_trainer import RLTrainer

log = logging.getLogger("verl.trainer")


@dataclass
class PolicyOutput:
    """Log-probs of the response tokens under one model, with what layer KL needs."""

    log_prob: torch.Tensor
    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...] | None


@dataclass
class Advantages:
    mask: torch.Tensor         # response tokens that count
    kl: torch.Tensor           # per-token KL(actor || reference)
    values: torch.Tensor       # V(s_t) before the update
    advantages: torch.Tensor
    returns: torch.Tensor
    raw_variance: float        # Var(returns - values): verl_advantage_variance


@dataclass
class StepFigures:
    """The figures averaged across ranks (one all-reduce, in field order)."""

    kl: float
    entropy: float
    clip_fraction: float
    advantage_variance: float
    policy_loss: float
    critic_loss: float
    actor_grad_norm: float
    critic_grad_norm: float
    tokens: float

    def across_ranks(self, layers: list[float], ctx: DistContext) -> tuple[StepFigures, list[float]]:
        n = len(fields(self))
        means = mean_across_ranks([*astuple(self), *layers], ctx)
        return StepFigures(*means[:n]), means[n:]


def ppo_step(t: RLTrainer) -> StepStats:
    cfg, m, dev, hooks = t.config, t.models, t.placement, t.hooks
    ctx = StepContext(step=t.global_step + 1)
    step = ctx.step
    timer = StageTimer(t.clock)
    started = t.clock.monotonic()
    t.data_guards.clock.step = step

    with timer("dataloader"):
        hooks.fire(STEP_START, ctx)
        prompts = next_prompts(t, step)
    with timer("rollout"):
        rollouts = reconciled(t, prompts, t.rollout.generate(prompts, step), step)
    hooks.fire(AFTER_ROLLOUT, ctx)

    hooks.fire(BEFORE_REWARD, ctx)
    with timer("reward"):
        scored = t.reward_stage.run(step, rollouts, t.loader.per_rank)
    batch = collate_rollouts(scored.batch, m.tokenizer.pad_token_id, cfg.rollout.response_length)
    want_layers = cfg.metrics.enabled and cfg.metrics.layer_kl

    with timer("reference"), torch.no_grad():
        ref = policy_output(m.reference, batch.to(dev.reference), want_layers)
    with timer("actor_update"), torch.no_grad():
        m.actor.eval()   # old log-probs and values without dropout noise; the updates switch back to train()
        m.critic.eval()
        old = policy_output(m.actor, batch.to(dev.actor), want_layers)

    ctx.kl_coef = m.kl_ctrl.value
    hooks.fire(BEFORE_ADVANTAGES, ctx)
    with timer("critic"):
        adv = advantages_of(t, batch, old, ref, ctx.kl_coef)

    critic = actor = None
    if scored.pause:
        t.reward_stage.note_paused(step, scored)
    else:  # each update runs through its OOM degrader; None when the run must stop (t.updates.stop_reason)
        with timer("critic"):
            critic = t.updates.run("critic", lambda micro: update_critic(t, batch, adv, micro))
        if critic is not None:
            with timer("actor_update"):
                actor = t.updates.run("actor", lambda micro: update_actor(t, batch, old.log_prob, adv, micro))
    critic, actor = critic or UpdateResult(), actor or UpdateResult()
    current_kl = float(core_algos.masked_mean(adv.kl, adv.mask))
    if not scored.pause:
        m.kl_ctrl.update(mean_across_ranks([current_kl], t.ctx)[0], n_steps=cfg.data.batch_size)
    layers: list[float] = []
    if want_layers and old.hidden is not None and ref.hidden is not None:
        with root_unsharded(m.actor, m.reference):  # the logit lens calls the final norm and LM head directly
            layers = layer_kl(m.actor, m.reference, old.hidden, ref.hidden, batch.to(dev.actor),
                              (old.logits, ref.logits))
    hooks.fire(AFTER_UPDATES, ctx)
    t.global_step = step

    with timer("checkpoint"):
        stall = maybe_checkpoint(t, step)
    ctx.step_seconds = t.clock.monotonic() - started
    hooks.fire(STEP_END, ctx)

    figures = StepFigures(current_kl, actor.stat("entropy"), actor.stat("clipfrac"), adv.raw_variance, actor.loss,
                          critic.loss, actor.grad_norm, critic.grad_norm, float(batch.attention_mask.sum()))
    mean, layer_means = figures.across_ranks(layers, t.ctx)
    stats = StepStats(
        global_step=step, reward_mean=_mean(scored.scores), reward_std=_std(scored.scores),
        reward_extreme_ratio=scored.verdict.extreme_ratio, kl=mean.kl, kl_coef=ctx.kl_coef,
        entropy=mean.entropy, clip_fraction=mean.clip_fraction, advantage_variance=mean.advantage_variance,
        policy_loss=mean.policy_loss, critic_loss=mean.critic_loss,
        grad_norm={"actor": mean.actor_grad_norm, "critic": mean.critic_grad_norm}, layer_kl=layer_means,
        stage_seconds=timer.seconds,
        tokens_per_second=mean.tokens * t.ctx.world_size / max(ctx.step_seconds, 1e-9),
        dataloader_wait_seconds=timer.seconds["dataloader"], step_seconds=ctx.step_seconds,
        nonfinite=actor.nonfinite or critic.nonfinite, extra={"checkpoint_stall": stall},
    )
    t.telemetry.observe(stats, scored.valid, scored.taken_at, scored.evicted)
    return stats


# ---- the stages -------------------------------------------------------------------------------------------
def next_prompts(t: RLTrainer, step: int) -> list[PromptItem]:
    """This step's prompts, plus one extra batch while the rollout backlog is below its target."""
    prompts = t.loader.next_batch()
    target = t.loader.per_rank * t.config.rollout.prefetch_batches
    if step > t.reward_stage.refill_after and len(t.buffer) < target:
        prompts += t.loader.next_batch()
    if not prompts:
        raise RuntimeError("every prompt was filtered out by loader filters; check the dataset and filters")
    return prompts


def reconciled(t: RLTrainer, prompts: list[PromptItem], rollouts: list[Rollout], step: int) -> list[Rollout]:
    got = reconcile(prompts, rollouts)
    if got.lost or got.duplicated:
        log.error("rollout of step %d: %d prompt(s) lost, %d duplicate rollout(s) dropped", step, got.lost,
                  got.duplicated)
    if t.config.metrics.enabled:
        t.registry["verl_rollout_prompts_lost_total"].inc(got.lost)
        t.registry["verl_rollout_prompts_duplicated_total"].inc(got.duplicated)
    return got.rollouts


def policy_output(lm: torch.nn.Module, batch: PPOBatch, want_layers: bool) -> PolicyOutput:
    logits, hidden = response_logits(lm, batch, want_layers)
    return PolicyOutput(core_algos.log_probs_of(logits, batch.responses), logits, hidden)


def advantages_of(t: RLTrainer, batch: PPOBatch, old: PolicyOutput, ref: PolicyOutput, beta: float) -> Advantages:
    cfg, m, dev = t.config.algorithm, t.models, t.placement
    mask = batch.response_mask.to(dev.actor)
    kl = core_algos.kl_penalty(old.log_prob, ref.log_prob.to(dev.actor), cfg.kl_penalty)
    rewards = core_algos.token_level_rewards(batch.scores.to(dev.actor), kl, mask, beta)
    with torch.no_grad():
        values = values_of(m.critic, batch.to(dev.critic)).to(dev.actor)
    advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, cfg.gamma, cfg.lam)
    return Advantages(mask, kl, values, advantages, returns, float(core_algos.masked_var(returns - values, mask)))


def update_critic(t: RLTrainer, batch: PPOBatch, adv: Advantages, micro_batches: int) -> UpdateResult:
    m, cfg, device = t.models, t.config, t.placement.critic
    cbatch, values, returns = batch.to(device), adv.values.to(device), adv.returns.to(device)

    def loss(idx: torch.Tensor) -> MicroLoss:
        mb = cbatch.select(idx)
        value_loss, _ = core_algos.compute_value_loss(values_of(m.critic_ddp, mb), returns[idx], values[idx],
                                                      mb.response_mask, cfg.critic.cliprange_value)
        return MicroLoss(value_loss, value_loss.item())

    m.critic.train()
    result = run_update(loss, list(m.critic.parameters()), m.critic_optim, size=cbatch.size,
                        epochs=cfg.actor.ppo_epochs, mini_batch_size=cfg.actor.ppo_mini_batch_size,
                        micro_batches=micro_batches, grad_clip=cfg.critic.grad_clip)
    m.critic_sched.step()
    return result


def update_actor(t: RLTrainer, batch: PPOBatch, old_log_prob: torch.Tensor, adv: Advantages,
                 micro_batches: int) -> UpdateResult:
    m, cfg = t.models, t.config.actor
    abatch = batch.to(t.placement.actor)

    def loss(idx: torch.Tensor) -> MicroLoss:
        mb = abatch.select(idx)
        log_prob, entropy = log_prob_and_entropy(m.actor_ddp, mb)
        pg_loss, clipfrac, _ = core_algos.compute_policy_loss(old_log_prob[idx], log_prob, adv.advantages[idx],
                                                              mb.response_mask, cfg.clip_ratio, cfg.clip_ratio_c)
        mean_entropy = core_algos.masked_mean(entropy, mb.response_mask)
        return MicroLoss(pg_loss - cfg.entropy_coeff * mean_entropy, pg_loss.item(),
                         {"clipfrac": clipfrac.item(), "entropy": mean_entropy.item()})

    m.actor.train()
    result = run_update(loss, list(m.actor.parameters()), m.actor_optim, size=abatch.size, epochs=cfg.ppo_epochs,
                        mini_batch_size=cfg.ppo_mini_batch_size, micro_batches=micro_batches,
                        grad_clip=cfg.grad_clip)
    m.actor_sched.step()
    t.rollout.sync_weights(m.actor)
    return result


def maybe_checkpoint(t: RLTrainer, step: int) -> float:
    """Save on ``checkpoint.interval``, else snapshot to the in-memory tier when the checkpointer has one
    (``checkpoint.memory_interval``); seconds the step was blocked (nothing after a stop request)."""
    interval = t.config.checkpoint.interval
    if t.checkpointer is None or t.updates.stop_reason is not None:
        return 0.0
    if interval > 0 and step % interval == 0:
        return t.checkpointer.save(t, step)
    snapshot = getattr(t.checkpointer, "snapshot", None)
    return snapshot(t, step) if snapshot is not None else 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
