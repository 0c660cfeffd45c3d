"""The tiny actor/critic model: a GPT-2-shaped causal LM written on ``torch.nn``, without transformers.

Importing transformers (its lazy import structure scans a directory, GPT-2's modeling pulls torch._dynamo)
was a quarter of a tiny trainer process's CPU, paid by every rank, rollout forkserver and test subprocess:
a 1-rank 4-step ``verl-train`` run took 11.3-13.0 CPU-s with it, 8.2-9.8 without; the forkserver's preload
9.0-9.4, now 3.9-4.2 (benchmarks/RESULTS.md).

This module reproduces, bit for bit in float32 on CPU, what transformers' ``GPT2LMHeadModel`` /
``GPT2Model`` with the SDPA attention (their default) do for the calls the trainer makes, so the tuned
trajectories (fault timings, KL collapse, exact resume) are unchanged: the same parameters under the same
seed (constructor draws, then GPT-2's re-initialisation in the same order), the same state_dict keys
(checkpoints load both ways), the same ops in the same order for the forward, and
``verl.models.tiny_generate`` for generation. ``tests/verl/test_tiny_lm.py`` checks all three against
transformers with ``torch.equal``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

KVCache = list[tuple[torch.Tensor, torch.Tensor] | None]
"""Per layer: keys and values seen so far, (B, heads, T, head_dim); None before the first forward."""


@dataclass
class TinyLMConfig:
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02

    @property
    def hidden_size(self) -> int:
        return self.n_embd


@dataclass
class TinyLMOutput:
    logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """Input of block 0, outputs of blocks 0..n-2, then the final-normed output (as transformers returns them)."""


class TransposedLinear(nn.Module):
    """GPT-2's ``Conv1D``: a linear layer whose weight is stored (in, out), applied with one ``addmm``."""

    def __init__(self, n_out: int, n_in: int) -> None:
        super().__init__()
        self.n_out = n_out
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(x.size()[:-1] + (self.n_out,))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's gelu ("gelu_new"), in this op order: F.gelu(approximate='tanh') differs in the last bits."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class TinyAttention(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.n_embd, self.n_head = cfg.n_embd, cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.scaling = self.head_dim ** -0.5
        self.c_attn = TransposedLinear(3 * cfg.n_embd, cfg.n_embd)
        self.c_proj = TransposedLinear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None, layer: int) -> torch.Tensor:
        query, key, value = self.c_attn(x).split(self.n_embd, dim=2)
        shape = (*x.shape[:-1], -1, self.head_dim)
        query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
        if cache is not None:  # concatenated as transformers' DynamicCache does (a contiguous copy at first)
            past = cache[layer]
            key = key.contiguous() if past is None else torch.cat([past[0], key], dim=-2)
            value = value.contiguous() if past is None else torch.cat([past[1], value], dim=-2)
            cache[layer] = (key, value)
        q_len = query.shape[2]
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                             is_causal=q_len > 1 and mask is None)
        out = out.transpose(1, 2).contiguous()
        return self.c_proj(out.reshape(*out.shape[:-2], -1).contiguous())


class TinyMLP(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.c_fc = TransposedLinear(4 * cfg.n_embd, cfg.n_embd)
        self.c_proj = TransposedLinear(cfg.n_embd, 4 * cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class TinyBlock(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = TinyAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = TinyMLP(cfg)
        self.checkpointed = False

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None, layer: int) -> torch.Tensor:
        # the checkpoint wraps forward, not __call__, so FSDP's hooks on the block run once (as transformers does)
        if self.checkpointed and self.training and torch.is_grad_enabled() and cache is None:
            return checkpoint(self._forward, x, mask, None, layer, use_reentrant=False)
        return self._forward(x, mask, cache, layer)

    def _forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None, layer: int) -> torch.Tensor:
        x = self.attn(self.ln_1(x), mask, cache, layer) + x
        return x + self.mlp(self.ln_2(x))


def sdpa_mask(padding: torch.Tensor | None, q_len: int, kv_len: int, q_offset: int) -> torch.Tensor | None:
    """The boolean (B, 1, q, kv) mask transformers builds for SDPA, or None where it lets SDPA's ``is_causal``
    (prefill) or no mask (one query) stand in: the kernel SDPA picks, hence the bits, depends on it."""
    if (q_len == 1 or kv_len == q_len) and (padding is None or bool(padding.all())):
        return None
    if q_offset == 0 and (padding is None or (bool(padding[:, :q_len].all()) and bool((~padding[:, q_len:]).all()))):
        return None
    q_idx = torch.arange(q_len, device=padding.device if padding is not None else None) + q_offset
    kv_idx = torch.arange(kv_len, device=q_idx.device)
    causal = kv_idx[None, None, None, :] <= q_idx[None, None, :, None]
    if padding is None:
        return causal.expand(1, 1, q_len, kv_len)
    return causal & padding[:, None, None, :kv_len]


class TinyTransformer(nn.Module):
    """GPT-2's ``GPT2Model``: embeddings, blocks, final norm; also the critic's backbone."""

    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList([TinyBlock(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self._reinit()

    @torch.no_grad()
    def _reinit(self) -> None:
        """GPT-2's post-construction initialisation, in transformers' order (children before parents, depth
        first): every draw below is made, so the RNG stream, hence every parameter, matches."""
        std = self.config.initializer_range
        scaled = std / math.sqrt(2 * self.config.n_layer)  # GPT-2's residual-path scaling
        self.wte.weight.normal_(0.0, std)
        self.wpe.weight.normal_(0.0, std)
        for block in self.h:
            for norm in (block.ln_1, block.ln_2):
                norm.weight.fill_(1.0)
                norm.bias.zero_()
            for owner in (block.attn, block.mlp):
                first = owner.c_attn if isinstance(owner, TinyAttention) else owner.c_fc
                for linear in (first, owner.c_proj):
                    linear.weight.normal_(0.0, std)
                    linear.bias.zero_()
                owner.c_proj.weight.normal_(0.0, scaled)
        self.ln_f.weight.fill_(1.0)
        self.ln_f.bias.zero_()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: KVCache | None = None,
                output_hidden_states: bool = False, **_unused: object) -> TinyLMOutput:
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[-2]
        if position_ids is None:
            position_ids = (torch.arange(input_ids.shape[1], device=input_ids.device) + past).unsqueeze(0)
        h = self.wte(input_ids) + self.wpe(position_ids)
        padding = None if attention_mask is None else attention_mask.to(device=h.device, dtype=torch.bool)
        mask = sdpa_mask(padding, input_ids.shape[1], past + input_ids.shape[1], past)
        hidden = [h] if output_hidden_states else None
        for i, block in enumerate(self.h):
            h = block(h, mask, cache, i)
            if hidden is not None:
                hidden.append(h)
        h = self.ln_f(h)
        if hidden is not None:
            hidden[-1] = h
        return TinyLMOutput(last_hidden_state=h, hidden_states=tuple(hidden) if hidden is not None else None)

    def gradient_checkpointing_enable(self) -> None:
        """Recompute each block's activations in the backward (the OOM degrader switches this on)."""
        for block in self.h:
            block.checkpointed = True

    activation_checkpointing_enable = gradient_checkpointing_enable


class TinyCausalLM(nn.Module):
    """GPT-2's ``GPT2LMHeadModel``: the transformer and an LM head tied to the token embedding."""

    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.config = cfg
        self.transformer = TinyTransformer(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        with torch.no_grad():  # transformers draws this init too before tying: same RNG state after construction
            self.lm_head.weight.normal_(0.0, cfg.initializer_range)
        self.lm_head.weight = self.transformer.wte.weight

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: KVCache | None = None,
                output_hidden_states: bool = False, logits_to_keep: int = 0, **_unused: object) -> TinyLMOutput:
        out = self.transformer(input_ids, attention_mask, position_ids, cache, output_hidden_states)
        out.logits = self.lm_head(out.last_hidden_state[:, -logits_to_keep:, :])
        return out

    def gradient_checkpointing_enable(self) -> None:
        self.transformer.gradient_checkpointing_enable()

    activation_checkpointing_enable = gradient_checkpointing_enable

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 eos_token_id: int, pad_token_id: int,
                 logits_processor: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 synced_gpus: bool = False) -> torch.Tensor:
        from verl.models.tiny_generate import greedy_generate

        return greedy_generate(self, input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id,
                               logits_processor, synced_gpus)
