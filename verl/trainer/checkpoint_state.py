"""The trainer's state for checkpoints: everything stateful except model parameters and optimizer state
(``verl.checkpoint`` saves those separately), plus the parameter digest the exact-resume tests compare."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from verl.config import TrainerConfigError
from verl.trainer.build import PPOModels
from verl.trainer.distributed import gather_objects
from verl.trainer.fsdp import full
from verl.trainer.parts import StepParts

log = logging.getLogger("verl.trainer")


def trainer_state(parts: StepParts, global_step: int) -> dict[str, Any]:
    """Each part's ``state_dict`` under one key (RNG streams excluded: the checkpointer captures and
    restores them per rank itself). Under torchrun every rank must call it (the checkpoint hook does): each
    rank's loader offset, prompt-cluster cooldowns, reward cache and drop counts differ, and meta.json is
    written by rank 0, so they are gathered into ``per_rank``. The reward guard and OOM flags are the same on
    every rank."""
    local = {"dataloader": parts.loader.state_dict(), "reward_cache": parts.reward_stage.path.breaker.state_dict(),
             "validator": parts.data_guards.validator.state_dict()}
    return {"global_step": global_step, "dataloader": local["dataloader"], "batch_size": parts.config.data.batch_size,
            "per_rank": gather_objects(local, parts.ctx), **parts.models.state_dict(),
            "buffer": parts.buffer.state_dict(), "reward_guard": parts.data_guards.reward.state_dict(),
            **parts.reward_stage.state_dict(), "oom": parts.updates.state_dict()}


def load_trainer_state(parts: StepParts, state: dict[str, Any]) -> int:
    """Loads ``state`` into the parts; returns its global step (the trainer's counter)."""
    cfg, ctx = parts.config, parts.ctx
    per_rank = state.get("per_rank") or [{"dataloader": state["dataloader"]}]
    if len(per_rank) == ctx.world_size:
        local = per_rank[ctx.rank]
    elif "fsdp" in (cfg.actor.strategy, cfg.critic.strategy):
        saved = state.get("batch_size", cfg.data.batch_size)
        if saved != cfg.data.batch_size:
            raise TrainerConfigError(f"data.batch_size {cfg.data.batch_size} differs from the checkpoint's {saved}: a "
                              f"resharded resume keeps the global batch; set data.batch_size={saved}")
        local = resharded_rank_state(per_rank, ctx.rank, ctx.world_size, cfg.data.batch_size)
    else:
        raise TrainerConfigError(f"checkpoint state mismatch: saved by {len(per_rank)} ranks, this run has "
                          f"{ctx.world_size}; relaunch with the same number of ranks (resharding a resume "
                          "needs actor.strategy=fsdp)")
    step = int(state["global_step"])
    parts.loader.load_state_dict(local["dataloader"])
    if "reward_cache" in local:
        parts.reward_stage.path.breaker.load_state_dict(local["reward_cache"])
    if "validator" in local:
        parts.data_guards.validator.load_state_dict(local["validator"])
    parts.reward_stage.load_state_dict(state)
    if "reward_guard" in state:
        parts.data_guards.reward.load_state_dict(state["reward_guard"])
    parts.updates.load_state_dict(state.get("oom", {}))
    parts.models.load_state_dict(state)
    parts.buffer.load_state_dict(state["buffer"])
    return step


def resharded_rank_state(per_rank: list[dict[str, Any]], rank: int, world_size: int,
                         batch_size: int) -> dict[str, Any]:
    """Rank ``rank`` of ``world_size``'s share of a state saved by ``len(per_rank)`` ranks.

    Prompt order is global batch ``b`` split into equal rank slices, so the global batch index does not
    depend on the world size: every new rank starts at the first global batch that no old rank had begun
    (nothing is repeated). When the old ranks stood at the same batch boundary (the usual case: each step
    takes whole batches) nothing is skipped either; otherwise the unread rest of the slices they had begun
    is skipped, and counted in the log line. Cooldown clusters, reward cache and validator counts come
    from old rank ``rank % N`` (they are per-rank caches, not positions)."""
    old = len(per_rank)
    old_share = batch_size // old
    positions = [int(r["dataloader"].get("position", int(r["dataloader"]["batches_consumed"]) * old_share))
                 for r in per_rank]
    start = max(-(-p // old_share) for p in positions)  # ceil: a begun batch counts as taken
    skipped = sum(start * old_share - p for p in positions)
    local = dict(per_rank[rank % old])
    local["dataloader"] = {**local["dataloader"], "position": start * (batch_size // world_size),
                           "batches_consumed": start}
    log.info("resharded resume %d -> %d ranks: rank %d starts at global batch %d (%d prompt(s) of begun "
             "batches skipped)", old, world_size, rank, start, skipped)
    return local


def param_digest(models: PPOModels) -> str:
    """Over the full parameters: the same for DDP and FSDP, any world size (every rank calls it)."""
    h = hashlib.sha256()
    for model in (models.actor, models.critic):
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(full(tensor).detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
