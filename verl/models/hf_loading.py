"""The transformers side of model building and generation: a local HF model directory only.

Imported only when ``actor.model`` (or ``critic.model``) names a directory: the tiny model is
``verl.models.tiny_lm`` and never imports transformers (2.6 CPU-s of every tiny trainer process). Nothing
is ever downloaded: loads use ``local_files_only=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LogitsProcessorList

# generate() warns about a missing attention mask although one is passed (left padding is checked by
# tests/verl/test_rollout_reward.py::test_sample_independent_of_batch_and_padding); keep the console readable
transformers.logging.set_verbosity_error()


def load_tokenizer(path: str) -> Any:
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_causal_lm(path: str) -> nn.Module:
    lm = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    lm.config.pad_token_id = lm.config.pad_token_id or lm.config.eos_token_id
    return lm


def load_backbone(path: str) -> nn.Module:
    return AutoModel.from_pretrained(path, local_files_only=True)


def generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
             eos_token_id: int, pad_token_id: int, logits_processor: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             synced_gpus: bool) -> torch.Tensor:
    """Greedy ``generate`` with ``logits_processor`` (the rollout engine's Gumbel sampling)."""
    gen_config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                  eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen_config,
                          logits_processor=LogitsProcessorList([logits_processor]), synced_gpus=synced_gpus)
