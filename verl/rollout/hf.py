"""Rollouts in the trainer's process: greedy generation with Gumbel noise, through the tiny model's own
``generate`` (``verl.models.tiny_generate``, equal bit for bit to transformers') or transformers'
``generate`` for a local HF model (``verl.models.hf_loading``, imported only then).

Sampling is made deterministic per (seed, step, prompt_id) with the Gumbel-max trick: ``generate`` runs
greedy, and a logits processor adds Gumbel noise drawn from each row's own generator, so
``argmax(logits / T + G)`` is an exact sample of ``softmax(logits / T)`` that does not depend on batch
composition, rank, worker or wall time (HF's own sampling draws from the global RNG).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from verl.data.buffer import Rollout
from verl.data.loader import PromptItem
from verl.models.tiny_lm import TinyCausalLM
from verl.utils.clock import Clock
from verl.utils.seeding import generator_for


class GumbelSampling:
    """A logits processor (transformers' interface: ``(input_ids, scores) -> scores``)."""

    def __init__(self, generators: list[torch.Generator], temperature: float) -> None:
        self.generators = generators
        self.temperature = temperature

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=g) for g in self.generators])
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))
        return scores.float() / self.temperature + gumbel.to(scores.device)


class HFRolloutEngine:
    def __init__(self, model: nn.Module, tokenizer: Any, response_length: int, max_prompt_length: int,
                 temperature: float, seed: int, clock: Clock) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.response_length = response_length
        self.max_prompt_length = max_prompt_length
        self.temperature = temperature
        self.seed = seed
        self.clock = clock
        self.synced_gpus = False
        """Set for a sharded (FSDP) actor: generate until every rank is done (each forward is a collective)."""

    def sync_weights(self, actor: nn.Module) -> None:
        self.model = actor  # same process, same tensors: nothing to copy

    def encode_prompt(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids[-self.max_prompt_length:]

    @torch.no_grad()
    def generate(self, prompts: list[PromptItem], step: int) -> list[Rollout]:
        if not prompts:
            return []
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        encoded = [self.encode_prompt(p.prompt) for p in prompts]
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, ids in enumerate(encoded):
            input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[i, width - len(ids):] = 1
        generators = [generator_for(self.seed, "rollout", step, p.prompt_id) for p in prompts]
        sampling = GumbelSampling(generators, self.temperature)
        was_training = self.model.training
        self.model.eval()
        if isinstance(self.model, TinyCausalLM):
            generate = self.model.generate
        else:
            from verl.models import hf_loading

            generate = functools.partial(hf_loading.generate, self.model)
        out = generate(input_ids.to(device), attention.to(device), self.response_length, tok.eos_token_id,
                       tok.pad_token_id, sampling, self.synced_gpus)
        self.model.train(was_training)
        now = self.clock.now()
        rollouts = []
        for i, prompt in enumerate(prompts):
            response = _until_eos(out[i, width:].tolist(), tok.eos_token_id, tok.pad_token_id)
            text_ids = [t for t in response if t != tok.eos_token_id]
            rollouts.append(Rollout(
                prompt_id=prompt.prompt_id, step=step, prompt=prompt.prompt,
                response=tok.decode(text_ids, skip_special_tokens=True),
                prompt_ids=encoded[i], response_ids=response, created_at=now,
            ))
        return rollouts


def _until_eos(ids: list[int], eos: int, pad: int) -> list[int]:
    """Response tokens up to and including the first EOS; trailing pads dropped."""
    if eos in ids:
        return ids[:ids.index(eos) + 1]
    while ids and ids[-1] == pad and pad != eos:
        ids = ids[:-1]
    return ids
