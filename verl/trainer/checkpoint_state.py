"""The trainer's state for checkpoints: everything stateful except model parameters and optimizer state
(``verl.checkpoint`` saves those separately), plus the parameter digest the exact-resume tests compare."""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from verl.config import ConfigError
from verl.trainer.distributed import gather_objects
from verl.trainer.fsdp import full
from verl.utils.seeding import load_rng_state, rng_state

if TYPE_CHECKING:
    from verl.trainer.ppo_trainer import RLTrainer

log = logging.getLogger("verl.trainer")


def trainer_state(t: RLTrainer) -> dict[str, Any]:
    """Under torchrun every rank must call it (the checkpoint hook does): each rank's loader offset,
    prompt-cluster cooldowns, reward cache and drop counts differ, and meta.json is written by rank 0,
    so they are gathered into ``per_rank``. The reward guard and OOM flags are the same on every rank."""
    m = t.models
    local = {"dataloader": t.loader.state_dict(), "reward_cache": t.reward_path.breaker.state_dict(),
             "validator": t.data_guards.validator.state_dict()}
    return {"global_step": t.global_step, "dataloader": local["dataloader"], "batch_size": t.config.data.batch_size,
            "per_rank": gather_objects(local, t.ctx),
            "kl_ctrl": m.kl_ctrl.state_dict(), "actor_lr_scheduler": m.actor_sched.state_dict(),
            "critic_lr_scheduler": m.critic_sched.state_dict(), "buffer": t.buffer.state_dict(),
            "reward_guard": t.data_guards.reward.state_dict(), "refill_after": t.reward_stage.refill_after,
            "oom": {"critic": t.updates.critic.state_dict(), "actor": t.updates.actor.state_dict()},
            "rng": rng_state()}


def load_trainer_state(t: RLTrainer, state: dict[str, Any]) -> None:
    m = t.models
    t.global_step = int(state["global_step"])
    per_rank = state.get("per_rank") or [{"dataloader": state["dataloader"]}]
    if len(per_rank) == t.ctx.world_size:
        local = per_rank[t.ctx.rank]
    elif "fsdp" in (t.config.actor.strategy, t.config.critic.strategy):
        saved = state.get("batch_size", t.config.data.batch_size)
        if saved != t.config.data.batch_size:
            raise ConfigError(f"data.batch_size {t.config.data.batch_size} differs from the checkpoint's {saved}: a "
                              f"resharded resume keeps the global batch; set data.batch_size={saved}")
        local = resharded_rank_state(per_rank, t.ctx.rank, t.ctx.world_size, t.config.data.batch_size)
    else:
        raise ConfigError(f"checkpoint state mismatch: saved by {len(per_rank)} ranks, this run has "
                          f"{t.ctx.world_size}; relaunch with the same number of ranks (resharding a resume "
                          "needs actor.strategy=fsdp)")
    t.loader.load_state_dict(local["dataloader"])
    if "reward_cache" in local:
        t.reward_path.breaker.load_state_dict(local["reward_cache"])
    if "validator" in local:
        t.data_guards.validator.load_state_dict(local["validator"])
    t.reward_stage.refill_after = int(state.get("refill_after", 0))
    if "reward_guard" in state:
        t.data_guards.reward.load_state_dict(state["reward_guard"])
    for name, degrader in (("critic", t.updates.critic), ("actor", t.updates.actor)):
        degrader.load_state_dict(state.get("oom", {}).get(name, {}))
    m.kl_ctrl.load_state_dict(state["kl_ctrl"])
    m.actor_sched.load_state_dict(state["actor_lr_scheduler"])
    m.critic_sched.load_state_dict(state["critic_lr_scheduler"])
    t.buffer.load_state_dict(state["buffer"])
    load_rng_state(state["rng"])


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


def param_digest(t: RLTrainer) -> str:
    """Over the full parameters: the same for DDP and FSDP, any world size (every rank calls it)."""
    h = hashlib.sha256()
    for model in (t.models.actor, t.models.critic):
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(full(tensor).detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
