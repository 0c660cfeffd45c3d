"""One PPO step, in the order of the algorithm (CleanRL's ``ppo.py`` loop, for LLM rollouts):

    prompts -> rollout -> reward -> reference log-probs -> old log-probs -> critic values
            -> advantages (GAE) -> critic update -> actor update

``ppo_step`` takes the step's parts (``StepParts``, built once by the trainer) and hands back a
``StepOutcome``; the trainer advances its step counter, checkpoints (stage ``checkpoint``) and reports.
Each stage is timed into ``verl_stage_seconds{stage}`` under its own label (``old_log_prob``,
``critic_values`` and ``advantage`` beside the contract's ``reference``, ``critic``, ``actor_update``…: the
labels are the monitor's names for verl's ``timing_s`` keys). Anything that is not PPO (drills, probes) acts
only through ``parts.hooks`` at the stage boundaries named in ``verl.trainer.stages``; both updates run
through the OOM degrader and the one loop in ``verl.trainer.update``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import astuple, dataclass, fields

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
from verl.trainer.parts import StepParts
from verl.trainer.reward_stage import ScoredBatch
from verl.trainer.stages import (
    AFTER_ROLLOUT,
    AFTER_UPDATES,
    BEFORE_ADVANTAGES,
    BEFORE_REWARD,
    STEP_START,
    StageTimer,
    StepContext,
)
from verl.trainer.update import MicroLoss, UpdateResult, run_update

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


@dataclass
class StepOutcome:
    """What the step hands the trainer: this rank's figures (averaged across ranks in ``step_stats``)."""

    scored: ScoredBatch
    figures: StepFigures
    layers: list[float]
    kl_coef: float
    nonfinite: bool


def ppo_step(p: StepParts, ctx: StepContext, timer: StageTimer) -> StepOutcome:
    """Step ``ctx.step`` up to its updates (the ``after_updates`` event); the trainer does the rest."""
    cfg, m, dev, hooks, step = p.config, p.models, p.placement, p.hooks, ctx.step
    p.data_guards.clock.step = step

    with timer("dataloader"):
        hooks.fire(STEP_START, ctx)
        prompts = next_prompts(p, step)
    with timer("rollout"):
        rollouts = reconciled(p, prompts, p.rollout.generate(prompts, step), step)
    hooks.fire(AFTER_ROLLOUT, ctx)

    hooks.fire(BEFORE_REWARD, ctx)
    with timer("reward"):
        scored = p.reward_stage.run(step, rollouts, p.loader.per_rank)
    batch = collate_rollouts(scored.batch, m.tokenizer.pad_token_id, cfg.rollout.response_length)
    want_layers = cfg.metrics.enabled and cfg.metrics.layer_kl

    with timer("reference"), torch.no_grad():
        ref = policy_output(m.reference, batch.to(dev.reference), want_layers)
    m.actor.eval()   # old log-probs and values without dropout noise; the updates switch back to train()
    m.critic.eval()
    with timer("old_log_prob"), torch.no_grad():
        old = policy_output(m.actor, batch.to(dev.actor), want_layers)
    with timer("critic_values"), torch.no_grad():
        values = values_of(m.critic, batch.to(dev.critic)).to(dev.actor)

    ctx.kl_coef = m.kl_ctrl.value
    hooks.fire(BEFORE_ADVANTAGES, ctx)
    with timer("advantage"):
        adv = advantages_of(p, batch, old, ref, values, ctx.kl_coef)

    critic = actor = None
    if scored.pause:
        p.reward_stage.note_paused(step, scored)
    else:  # each update runs through its OOM degrader; None when the run must stop (p.updates.stop_reason)
        with timer("critic"):
            critic = p.updates.run("critic", lambda micro: update_critic(p, batch, adv, micro))
        if scored.cached_only:  # no reward signal: the policy stays where it is
            p.reward_stage.note_cached_only(step)
        elif critic is not None:
            with timer("actor_update"):
                actor = p.updates.run("actor", lambda micro: update_actor(p, batch, old.log_prob, adv, micro))
    critic, actor = critic or UpdateResult(), actor or UpdateResult()
    current_kl = float(core_algos.masked_mean(adv.kl, adv.mask))
    if not scored.pause:
        m.kl_ctrl.update(mean_across_ranks([current_kl], p.ctx)[0], n_steps=cfg.data.batch_size)
    layers: list[float] = []
    if want_layers and old.hidden is not None and ref.hidden is not None:
        with root_unsharded(m.actor, m.reference):  # the logit lens calls the final norm and LM head directly
            layers = layer_kl(m.actor, m.reference, old.hidden, ref.hidden, batch.to(dev.actor),
                              (old.logits, ref.logits))
    hooks.fire(AFTER_UPDATES, ctx)
    figures = StepFigures(current_kl, actor.stat("entropy"), actor.stat("clipfrac"), adv.raw_variance, actor.loss,
                          critic.loss, actor.grad_norm, critic.grad_norm, float(batch.attention_mask.sum()))
    return StepOutcome(scored, figures, layers, ctx.kl_coef, actor.nonfinite or critic.nonfinite)


def step_stats(out: StepOutcome, ctx: StepContext, stage_seconds: dict[str, float], stall: float,
               dist: DistContext) -> StepStats:
    """The step's ``StepStats``, its figures averaged across ranks (one all-reduce, on every rank)."""
    mean, layer_means = out.figures.across_ranks(out.layers, dist)
    scored = out.scored
    return StepStats(
        global_step=ctx.step, reward_mean=_mean(scored.scores), reward_std=_std(scored.scores),
        reward_extreme_ratio=scored.verdict.extreme_ratio, kl=mean.kl, kl_coef=out.kl_coef,
        entropy=mean.entropy, clip_fraction=mean.clip_fraction, advantage_variance=mean.advantage_variance,
        policy_loss=mean.policy_loss, critic_loss=mean.critic_loss,
        grad_norm={"actor": mean.actor_grad_norm, "critic": mean.critic_grad_norm}, layer_kl=layer_means,
        stage_seconds=stage_seconds,
        tokens_per_second=mean.tokens * dist.world_size / max(ctx.step_seconds, 1e-9),
        dataloader_wait_seconds=stage_seconds["dataloader"], step_seconds=ctx.step_seconds,
        nonfinite=out.nonfinite, extra={"checkpoint_stall": stall},
    )


# ---- the stages -------------------------------------------------------------------------------------------
def next_prompts(p: StepParts, step: int) -> list[PromptItem]:
    """This step's prompts, plus one extra batch while the rollout backlog is below its target."""
    prompts = p.loader.next_batch()
    target = p.loader.per_rank * p.config.rollout.prefetch_batches
    if step > p.reward_stage.refill_after and len(p.buffer) < target:
        prompts += p.loader.next_batch()
    if not prompts:
        raise RuntimeError("every prompt was filtered out by loader filters; check the dataset and filters")
    return prompts


def reconciled(p: StepParts, prompts: list[PromptItem], rollouts: list[Rollout], step: int) -> list[Rollout]:
    got = reconcile(prompts, rollouts)
    if got.lost or got.duplicated:
        log.error("rollout of step %d: %d prompt(s) lost, %d duplicate rollout(s) dropped", step, got.lost,
                  got.duplicated)
    if p.config.metrics.enabled:
        p.registry["verl_rollout_prompts_lost_total"].inc(got.lost)
        p.registry["verl_rollout_prompts_duplicated_total"].inc(got.duplicated)
    return got.rollouts


def policy_output(lm: torch.nn.Module, batch: PPOBatch, want_layers: bool) -> PolicyOutput:
    logits, hidden = response_logits(lm, batch, want_layers)
    return PolicyOutput(core_algos.log_probs_of(logits, batch.responses), logits, hidden)


def advantages_of(p: StepParts, batch: PPOBatch, old: PolicyOutput, ref: PolicyOutput, values: torch.Tensor,
                  beta: float) -> Advantages:
    """GAE over the token rewards (score on the last token, -beta * KL on each); ``values``: V(s_t), no grad."""
    cfg, dev = p.config.algorithm, p.placement
    mask = batch.response_mask.to(dev.actor)
    kl = core_algos.kl_penalty(old.log_prob, ref.log_prob.to(dev.actor), cfg.kl_penalty)
    rewards = core_algos.token_level_rewards(batch.scores.to(dev.actor), kl, mask, beta)
    advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, cfg.gamma, cfg.lam)
    return Advantages(mask, kl, values, advantages, returns, float(core_algos.masked_var(returns - values, mask)))


def update_critic(p: StepParts, batch: PPOBatch, adv: Advantages, micro_batches: int) -> UpdateResult:
    m, cfg, device = p.models, p.config.critic, p.placement.critic
    cbatch, values, returns = batch.to(device), adv.values.to(device), adv.returns.to(device)

    def loss(idx: torch.Tensor) -> MicroLoss:
        mb = cbatch.select(idx)
        value_loss, _ = core_algos.compute_value_loss(values_of(m.critic_ddp, mb), returns[idx], values[idx],
                                                      mb.response_mask, cfg.cliprange_value)
        return MicroLoss(value_loss, value_loss.item())

    m.critic.train()
    result = run_update(loss, list(m.critic.parameters()), m.critic_optim, size=cbatch.size,
                        epochs=cfg.ppo_epochs, mini_batch_size=cfg.ppo_mini_batch_size,
                        micro_batches=micro_batches, grad_clip=cfg.grad_clip)
    m.critic_sched.step()
    return result


def update_actor(p: StepParts, batch: PPOBatch, old_log_prob: torch.Tensor, adv: Advantages,
                 micro_batches: int) -> UpdateResult:
    m, cfg = p.models, p.config.actor
    abatch = batch.to(p.placement.actor)

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
    p.rollout.sync_weights(m.actor)
    return result


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
