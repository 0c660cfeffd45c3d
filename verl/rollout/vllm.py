"""Rollouts with vLLM (the ``[vllm]`` extra), for real models on GPUs. Not exercised in CI.

Each request carries its own seed derived from (seed, step, prompt_id), so sampling stays independent of
batching, as with the HF engine. Weights are pushed from the actor after each update through the
engine's model ``load_weights`` (vLLM's in-process executor).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from verl.config.errors import TrainerConfigError
from verl.data.buffer import Rollout
from verl.data.loader import PromptItem
from verl.utils.clock import Clock
from verl.utils.seeding import derive_seed

try:  # guarded: vLLM is an optional extra
    import vllm
except ImportError:  # pragma: no cover - depends on the environment
    vllm = None


class VLLMRolloutEngine:
    def __init__(self, model_path: str, tokenizer: Any, response_length: int, max_prompt_length: int,
                 temperature: float, seed: int, clock: Clock) -> None:
        if vllm is None:
            raise TrainerConfigError("rollout.engine=vllm needs vLLM: pip install 'verl-ops[vllm]', or set rollout.engine=hf")
        if model_path == "tiny":
            raise TrainerConfigError("rollout.engine=vllm needs actor.model to be a local HF directory, not 'tiny'")
        self.llm = vllm.LLM(model=model_path, seed=seed)
        self.tokenizer = tokenizer
        self.response_length, self.max_prompt_length = response_length, max_prompt_length
        self.temperature, self.seed, self.clock = temperature, seed, clock

    def sync_weights(self, actor: nn.Module) -> None:
        module = getattr(actor, "module", actor)
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(module.state_dict().items())

    def generate(self, prompts: list[PromptItem], step: int) -> list[Rollout]:
        encoded = [self.tokenizer.encode(p.prompt, add_special_tokens=False)[-self.max_prompt_length:]
                   for p in prompts]
        params = [vllm.SamplingParams(temperature=self.temperature, max_tokens=self.response_length,
                                      seed=derive_seed(self.seed, "rollout", step, p.prompt_id) % (1 << 31))
                  for p in prompts]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded], params, use_tqdm=False)
        now = self.clock.now()
        return [Rollout(prompt_id=p.prompt_id, step=step, prompt=p.prompt, response=o.outputs[0].text,
                        prompt_ids=ids, response_ids=list(o.outputs[0].token_ids), created_at=now)
                for p, ids, o in zip(prompts, encoded, outputs, strict=True)]
