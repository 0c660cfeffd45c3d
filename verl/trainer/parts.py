"""``StepParts``: what one PPO step works with, built once by ``RLTrainer`` and handed to ``ppo_step`` and to
the checkpoint state. The trainer itself keeps what lives across steps: the step counter, the checkpointer
and the telemetry; nothing here reaches back into the trainer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.config import Config
from verl.data.buffer import RolloutBuffer
from verl.data.loader import RLDataLoader
from verl.metrics.registry import MetricsRegistry
from verl.trainer.build import PPOModels
from verl.trainer.distributed import DistContext, Placement
from verl.trainer.guards import DataGuards, UpdateGuards
from verl.trainer.reward_stage import RewardStage
from verl.trainer.stages import StepHooks


@dataclass(frozen=True)
class StepParts:
    config: Config
    ctx: DistContext
    placement: Placement
    models: PPOModels           # actor, reference, critic, their optimizers, schedulers and KL controller
    loader: RLDataLoader
    buffer: RolloutBuffer
    data_guards: DataGuards     # prompt clusters on a step clock, rollout validator, reward guard
    reward_stage: RewardStage
    rollout: Any                # a ``verl.rollout.RolloutEngine``
    updates: UpdateGuards       # the OOM degraders the two updates run through
    hooks: StepHooks            # the only way anything that is not PPO acts inside a step
    registry: MetricsRegistry
