"""Build the actor/reference/critic from config: the tiny random-init GPT-2-shaped model
(``verl.models.tiny_lm``, no transformers) or a local HF directory (``verl.models.hf_loading``, imported
only then).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from verl.config.errors import TrainerConfigError
from verl.config.schema import TinyModelConfig
from verl.models.tiny_lm import TinyCausalLM, TinyLMConfig, TinyTransformer
from verl.models.tokenizer import ByteTokenizer
from verl.utils.seeding import derive_seed


def tiny_config(shape: TinyModelConfig, n_positions: int) -> TinyLMConfig:
    tok = ByteTokenizer()
    return TinyLMConfig(
        vocab_size=tok.vocab_size, n_positions=n_positions, n_embd=shape.n_embd, n_layer=shape.n_layer,
        n_head=shape.n_head, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def load_tokenizer(model: str) -> Any:
    if model == "tiny":
        return ByteTokenizer()
    from verl.models import hf_loading

    return hf_loading.load_tokenizer(_local_dir(model, "actor.model"))


def load_causal_lm(model: str, shape: TinyModelConfig, n_positions: int, seed: int) -> nn.Module:
    if model == "tiny":
        # Same seed on every rank and for actor and reference: identical initial weights.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "actor-init"))
            lm = TinyCausalLM(tiny_config(shape, n_positions))
        return _printable_only(lm)
    from verl.models import hf_loading

    return hf_loading.load_causal_lm(_local_dir(model, "actor.model"))


def _printable_only(lm: TinyCausalLM) -> TinyCausalLM:
    """Give the byte tokenizer's unprintable ids a logit of -1e4 (probability 0, log-probability finite,
    so entropies stay finite). Responses carrying them are dropped by rollout validation and never
    scored, so nothing in PPO's objective pushes the policy away from them: unmasked, a random-init model
    emitted an invalid response 3 times in 4, and one seed in three drifted into all-invalid batches by
    step 80 and stopped learning. The mask lives on the model, so generation, the update and the
    reference see the same distribution; it holds no parameters, so checkpoints are unchanged."""
    bias = torch.zeros(lm.config.vocab_size)
    bias[list(ByteTokenizer.unprintable_ids)] = -1e4

    def mask(_module: nn.Module, _inputs: Any, logits: torch.Tensor) -> torch.Tensor:
        return logits + bias.to(device=logits.device, dtype=logits.dtype)

    lm.lm_head.register_forward_hook(mask)
    return lm


class ValueModel(nn.Module):
    """Critic: a transformer backbone with a scalar head; one value per position."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        return self.value_head(out.last_hidden_state).squeeze(-1)


def load_critic(model: str, shape: TinyModelConfig, n_positions: int, seed: int) -> ValueModel:
    if model == "tiny":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "critic-init"))
            cfg = tiny_config(shape, n_positions)
            critic = ValueModel(TinyTransformer(cfg), cfg.n_embd)
            nn.init.zeros_(critic.value_head.weight)
            nn.init.zeros_(critic.value_head.bias)
        return critic
    from verl.models import hf_loading

    backbone = hf_loading.load_backbone(_local_dir(model, "critic.model"))
    critic = ValueModel(backbone, backbone.config.hidden_size)
    nn.init.zeros_(critic.value_head.weight)
    nn.init.zeros_(critic.value_head.bias)
    return critic


def model_label(model: str) -> str:
    """Bounded label value for verl_config_info: 'tiny' or the model directory's name."""
    return "tiny-gpt2" if model == "tiny" else Path(model).name


def _local_dir(path: str, key: str) -> str:
    if not Path(path).is_dir():
        raise TrainerConfigError(f"{key}: model directory '{path}' not found; give a local HF model directory or 'tiny'")
    return path
