"""Greedy generation for ``TinyCausalLM``, step for step what transformers' ``generate`` does for the rollout
engine's call (greedy, a logits processor, EOS/pad, KV cache, ``synced_gpus``), so the sampled tokens are
the same bit for bit (``tests/verl/test_tiny_lm.py``):

- position ids from the left-padded mask (cumsum - 1, pads at 0), then the last one + 1 per new token;
- one prefill forward over the prompt, then one token at a time against the KV cache, the mask growing by
  one column of ones per step (finished rows too);
- logits of the last position only (the LM head applied to that slice: a different GEMM shape may round
  differently), copied to float32, then the processor, then argmax;
- finished rows get ``pad_token_id``; a row finishes on EOS, all rows at ``max_new_tokens``; the loop stops
  when every row has finished -- with ``synced_gpus``, when every rank has (an all-reduce each step), a
  finished rank running forwards without appending tokens, because each forward of a sharded model is a
  collective.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _keep_going(finished: bool, synced_gpus: bool, device: torch.device) -> bool:
    """Another step? With ``synced_gpus``: while any rank is unfinished (an all-reduce, every rank, every step)."""
    if not synced_gpus:
        return not finished
    import torch.distributed as dist

    flag = torch.tensor(0.0 if finished else 1.0, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.SUM)
    return flag.item() != 0.0


@torch.no_grad()
def greedy_generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    max_new_tokens: int, eos_token_id: int, pad_token_id: int,
                    logits_processor: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    synced_gpus: bool = False) -> torch.Tensor:
    """(B, P) left-padded prompts -> (B, P + generated) tokens, as transformers' greedy ``generate``;
    ``model`` is a ``verl.models.tiny_lm.TinyCausalLM`` (its forward takes the per-layer ``cache`` list)."""
    device = input_ids.device
    max_length = input_ids.shape[1] + max_new_tokens
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    mask = attention_mask
    cache: list = [None] * len(model.transformer.h)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=device)
    pad = torch.tensor(pad_token_id, dtype=torch.long, device=device)
    finished = False
    logits = model(input_ids, attention_mask=mask, position_ids=positions, cache=cache, logits_to_keep=1).logits
    prefilled = True
    while _keep_going(finished, synced_gpus, device):
        if not prefilled:
            logits = model(input_ids[:, -1:].clone(), attention_mask=mask, position_ids=positions[..., -1:].clone(),
                           cache=cache, logits_to_keep=1).logits
        prefilled = False
        positions = torch.cat([positions, positions[..., -1:] + 1], dim=-1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        if finished:  # synced_gpus: keep this rank's collectives in step with the others, append nothing
            continue
        scores = logits_processor(input_ids, logits[:, -1].to(copy=True, dtype=torch.float32))
        tokens = torch.argmax(scores, dim=-1)
        tokens = tokens * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, tokens[:, None]], dim=-1)
        done = torch.full((input_ids.shape[0],), input_ids.shape[1] >= max_length, dtype=torch.bool, device=device)
        done = done | torch.isin(input_ids[:, -1], torch.tensor([eos_token_id], device=device))
        unfinished = unfinished & ~done
        finished = bool(unfinished.max() == 0)
    return input_ids
