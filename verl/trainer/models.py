"""Forward passes the PPO step needs, on top of HF models: response log-probs, entropy, values and the
per-layer ("logit lens") divergence behind ``verl_layer_kl``."""

from __future__ import annotations

import torch
from torch import nn

from verl.trainer.batch import PPOBatch
from verl.trainer.core_algos import entropy_from_logits, log_probs_of


def response_logits(lm: nn.Module, batch: PPOBatch, output_hidden_states: bool = False
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """Logits predicting each response token: positions P-1 .. P+R-2 of the full sequence."""
    out = lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
             output_hidden_states=output_hidden_states, use_cache=False)
    p, r = batch.prompt_length, batch.responses.shape[1]
    return out.logits[:, p - 1:p + r - 1], out.hidden_states if output_hidden_states else None


def log_prob_and_entropy(lm: nn.Module, batch: PPOBatch) -> tuple[torch.Tensor, torch.Tensor]:
    logits, _ = response_logits(lm, batch)
    return log_probs_of(logits, batch.responses), entropy_from_logits(logits)


def values_of(critic: nn.Module, batch: PPOBatch) -> torch.Tensor:
    """V(s_t) for the state before each response token (same positions as the logits)."""
    values = critic(batch.input_ids, batch.attention_mask, batch.position_ids)
    p, r = batch.prompt_length, batch.responses.shape[1]
    return values[:, p - 1:p + r - 1].float()


def final_norm(lm: nn.Module) -> nn.Module | None:
    """The norm applied before the LM head (GPT-2: transformer.ln_f; Llama/Qwen/Mistral: model.norm)."""
    for owner, attr in (("transformer", "ln_f"), ("model", "norm"), ("gpt_neox", "final_layer_norm")):
        module = getattr(getattr(lm, owner, None), attr, None)
        if module is not None:
            return module
    return None


@torch.no_grad()
def layer_kl(actor: nn.Module, reference: nn.Module, actor_hidden: tuple[torch.Tensor, ...],
             ref_hidden: tuple[torch.Tensor, ...], batch: PPOBatch,
             final_logits: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[float]:
    """verl_layer_kl{layer=i}: mean over response tokens of KL(p_actor^i || p_ref^i), where p^i is the
    logit lens of block i -- softmax(lm_head(final_norm(h_i))) with h_i the output of transformer block
    i of that model. The last layer's value is the exact full-distribution KL of the two policies, taken
    from ``final_logits`` (actor, reference) when the caller already has them.
    """
    norm_a, norm_r = final_norm(actor), final_norm(reference)
    if norm_a is None or norm_r is None:
        return []
    head_a, head_r = actor.get_output_embeddings(), reference.get_output_embeddings()
    p, r = batch.prompt_length, batch.responses.shape[1]
    mask = batch.response_mask
    n_layers = len(actor_hidden) - 1  # hidden_states[0] is the embedding output
    out = []
    for i in range(1, n_layers + 1):
        if i == n_layers and final_logits is not None:
            logits_a, logits_r = final_logits
        else:
            ha, hr = actor_hidden[i][:, p - 1:p + r - 1], ref_hidden[i][:, p - 1:p + r - 1]
            if i < n_layers:  # HF applies the final norm to the last hidden state already
                ha, hr = norm_a(ha), norm_r(hr)
            logits_a, logits_r = head_a(ha), head_r(hr)
        logp_a = torch.log_softmax(logits_a.float(), dim=-1)
        logp_r = torch.log_softmax(logits_r.to(logits_a.device).float(), dim=-1)
        kl = (logp_a.exp() * (logp_a - logp_r)).sum(-1)
        out.append(float((kl * mask).sum() / mask.sum().clamp_min(1)))
    return out
