"""The seam between the trainer and whatever generates text (in-process HF, vLLM, worker processes)."""

from __future__ import annotations

from typing import Any, Protocol

from torch import nn

from verl.config.schema import Config
from verl.data.buffer import Rollout
from verl.data.loader import PromptItem
from verl.utils.clock import Clock


class RolloutEngine(Protocol):
    def generate(self, prompts: list[PromptItem], step: int) -> list[Rollout]:
        """One response per prompt, sampled from generators seeded by (seed, step, prompt_id)."""

    def sync_weights(self, actor: nn.Module) -> None:
        """Make the next ``generate`` use the actor's current weights."""


def make_rollout_engine(config: Config, actor: nn.Module, tokenizer: Any, clock: Clock) -> RolloutEngine:
    kwargs = {"tokenizer": tokenizer, "response_length": config.rollout.response_length,
              "max_prompt_length": config.data.max_prompt_length, "temperature": config.rollout.temperature,
              "seed": config.trainer.seed, "clock": clock}
    if config.rollout.engine == "vllm":
        from verl.rollout.vllm import VLLMRolloutEngine

        return VLLMRolloutEngine(model_path=config.actor.model, **kwargs)
    from verl.rollout.hf import HFRolloutEngine

    return HFRolloutEngine(model=actor, **kwargs)
