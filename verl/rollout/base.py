"""The seam between the trainer and whatever generates text (in-process HF, vLLM, worker processes)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Reconciled:
    rollouts: list[Rollout]
    lost: int
    """Requested prompts that came back without a rollout."""
    duplicated: int
    """Rollouts beyond one per requested prompt (dropped here, never trained on)."""


def reconcile(prompts: list[PromptItem], rollouts: list[Rollout]) -> Reconciled:
    """Exactly-once check between the loader and the buffer, for every engine on every step: at most
    one rollout per requested prompt goes on (request multiplicity counts: a prompt drawn twice may come
    back twice), extra ones are dropped and counted, missing ones are counted. Engines promise one per
    prompt (the worker supervisor re-queues a dead worker's prompts); this is where the promise is
    measured, as ``verl_rollout_prompts_lost_total`` / ``verl_rollout_prompts_duplicated_total``."""
    owed = Counter(p.prompt_id for p in prompts)
    kept: list[Rollout] = []
    for rollout in rollouts:
        if owed[rollout.prompt_id] > 0:
            owed[rollout.prompt_id] -= 1
            kept.append(rollout)
    return Reconciled(kept, sum(owed.values()), len(rollouts) - len(kept))


def make_rollout_engine(config: Config, actor: nn.Module, tokenizer: Any, clock: Clock) -> RolloutEngine:
    kwargs = {"tokenizer": tokenizer, "response_length": config.rollout.response_length,
              "max_prompt_length": config.data.max_prompt_length, "temperature": config.rollout.temperature,
              "seed": config.trainer.seed, "clock": clock}
    if config.rollout.engine == "vllm":
        from verl.rollout.vllm import VLLMRolloutEngine

        return VLLMRolloutEngine(model_path=config.actor.model, **kwargs)
    from verl.rollout.hf import HFRolloutEngine

    return HFRolloutEngine(model=actor, **kwargs)
