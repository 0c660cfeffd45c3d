"""Model building: the actor, its frozen reference, the critic, their DDP wrappers or FSDP2 sharding
(``verl.trainer.fsdp``), optimizers and schedulers, the KL controller, and the rollout engine over the
actor. ``RLTrainer`` composes these."""

from __future__ import annotations

import copy
import gc
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from verl.config import Config, TrainerConfigError
from verl.models.loading import load_causal_lm, load_critic, load_tokenizer
from verl.rollout import make_rollout_engine
from verl.trainer import core_algos
from verl.trainer.distributed import DistContext, Placement, timed_gradient_allreduce
from verl.utils.clock import Clock


@dataclass
class PPOModels:
    tokenizer: Any
    actor: nn.Module
    reference: nn.Module
    critic: nn.Module
    actor_ddp: nn.Module
    critic_ddp: nn.Module
    actor_optim: torch.optim.Optimizer
    critic_optim: torch.optim.Optimizer
    actor_sched: torch.optim.lr_scheduler.LambdaLR
    critic_sched: torch.optim.lr_scheduler.LambdaLR
    kl_ctrl: core_algos.FixedKLController | core_algos.AdaptiveKLController

    @property
    def n_layers(self) -> int:
        model_cfg = self.actor.config
        return getattr(model_cfg, "n_layer", None) or getattr(model_cfg, "num_hidden_layers", 0)

    def release_ddp(self) -> None:
        """Free the DDP wrappers (their C++ reducers) while the process group is still registered, so that
        the group's last reference is the one ``dist.destroy_process_group`` drops, whose destructor joins
        gloo's worker threads with the GIL released. A reducer that outlives it (freed with the trainer,
        at ``sys.exit(main())`` in verl-train) frees the group with the GIL held, and a gloo worker still
        freeing its last collective's output tensors (their Python objects) waits for the GIL inside that
        join: the rank never exited, on a loaded machine, after printing its final digest. Call it before
        ``verl.trainer.distributed.shutdown``; anything run after it runs on the bare modules."""
        self.actor_ddp, self.critic_ddp = self.actor, self.critic
        gc.collect()  # a wrapper kept alive only by a reference cycle is freed here, not at exit

    def state_dict(self) -> dict[str, Any]:
        """The KL controller and both LR schedulers (parameters and optimizers are checkpointed apart)."""
        return {"kl_ctrl": self.kl_ctrl.state_dict(), "actor_lr_scheduler": self.actor_sched.state_dict(),
                "critic_lr_scheduler": self.critic_sched.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.actor_sched.load_state_dict(state["actor_lr_scheduler"])
        self.critic_sched.load_state_dict(state["critic_lr_scheduler"])


def n_positions(cfg: Config) -> int:
    return cfg.data.max_prompt_length + cfg.rollout.response_length + 1


def build_models(cfg: Config, ctx: DistContext, place: Placement) -> PPOModels:
    positions, seed = n_positions(cfg), cfg.trainer.seed
    tokenizer = load_tokenizer(cfg.actor.model)
    actor = load_causal_lm(cfg.actor.model, cfg.actor.tiny, positions, seed).to(place.actor)
    reference = copy.deepcopy(actor).to(place.reference).eval().requires_grad_(False)
    critic = load_critic(cfg.critic.model or cfg.actor.model, cfg.actor.tiny, positions, seed).to(place.critic)
    if cfg.actor.gradient_checkpointing:
        actor.gradient_checkpointing_enable()
    if cfg.critic.gradient_checkpointing and hasattr(critic.backbone, "gradient_checkpointing_enable"):
        critic.backbone.gradient_checkpointing_enable()
    # FSDP before the optimizers: fully_shard swaps the parameters for DTensor shards, and AdamW must hold
    # (and size its state by) the shards
    if cfg.actor.strategy == "fsdp":
        _fsdp(actor, place.actor, ctx, "actor.strategy")
        if place.reference.type == place.actor.type:  # sharded the same way; else kept whole where placed
            _fsdp(reference, place.reference, ctx, "actor.strategy")
    if cfg.critic.strategy == "fsdp":
        _fsdp(critic, place.critic, ctx, "critic.strategy")
    actor_optim = torch.optim.AdamW(actor.parameters(), lr=cfg.actor.lr)
    critic_optim = torch.optim.AdamW(critic.parameters(), lr=cfg.critic.lr)
    warmup = max(1, cfg.actor.warmup_steps)
    return PPOModels(
        tokenizer, actor, reference, critic,
        actor_ddp=_wrap(actor, place.actor, ctx, cfg.actor.strategy),
        critic_ddp=_wrap(critic, place.critic, ctx, cfg.critic.strategy),
        actor_optim=actor_optim, critic_optim=critic_optim,
        actor_sched=torch.optim.lr_scheduler.LambdaLR(actor_optim, lambda s: min(1.0, (s + 1) / warmup)),
        critic_sched=torch.optim.lr_scheduler.LambdaLR(critic_optim, lambda s: min(1.0, (s + 1) / warmup)),
        kl_ctrl=core_algos.make_kl_controller(cfg.algorithm.kl_ctrl, cfg.kl_coef, cfg.algorithm.kl_target,
                                              cfg.algorithm.kl_horizon),
    )


def _fsdp(module: nn.Module, device: torch.device, ctx: DistContext, key: str) -> None:
    from verl.trainer import fsdp

    fsdp.shard(module, fsdp.mesh_for(device, ctx.world_size), fsdp.precision_for(device), key)


def _wrap(module: nn.Module, device: torch.device, ctx: DistContext, strategy: str) -> nn.Module:
    """The module the updates run through: DDP under torchrun, the module itself when alone or FSDP
    (fully_shard hooks the module in place; its gradients are reduce-scattered by FSDP)."""
    if not ctx.distributed or strategy == "fsdp":
        return module
    ddp = DDP(module, device_ids=[device.index] if device.type == "cuda" else None)
    ddp.register_comm_hook(None, timed_gradient_allreduce(ctx.waits))  # the peers' wait apart from compute
    return ddp


def build_rollout(cfg: Config, models: PPOModels, clock: Clock, registry: Any) -> Any:
    """The in-process engine, or supervised worker processes when ``rollout_worker_num > 0`` (hf)."""
    if cfg.actor.strategy == "fsdp" and (cfg.rollout_worker_num > 0 or cfg.rollout.engine != "hf"):
        # both copy whole weights out of the actor, which an FSDP rank does not hold
        raise TrainerConfigError("actor.strategy=fsdp generates in-process with the hf engine only: set "
                          "rollout_worker_num=0 and rollout.engine=hf, or actor.strategy=ddp")
    if cfg.rollout_worker_num <= 0 or cfg.rollout.engine != "hf":
        engine = make_rollout_engine(cfg, models.actor, models.tokenizer, clock)
        if cfg.actor.strategy == "fsdp" and hasattr(engine, "synced_gpus"):
            # every forward of a sharded actor is a collective: a rank whose responses all ended early
            # keeps stepping (HF's synced_gpus) until every rank is done
            engine.synced_gpus = True
        return engine
    from verl.rollout.worker_engine import ModelSpec, WorkerRolloutEngine

    gen = {"response_length": cfg.rollout.response_length, "max_prompt_length": cfg.data.max_prompt_length,
           "temperature": cfg.rollout.temperature, "seed": cfg.trainer.seed}
    return WorkerRolloutEngine(
        models.actor, ModelSpec(cfg.actor.model, cfg.actor.tiny, n_positions(cfg), cfg.trainer.seed), gen,
        cfg.rollout_worker_num, cfg.rollout.worker_chunk_size, cfg.trainer.seed, clock,
        torch_threads=max(1, cfg.trainer.torch_threads), metrics=registry,
    )
