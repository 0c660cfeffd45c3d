"""Rollouts -> padded tensors. Layout: ``[left-pad | prompt | response | right-pad]``, so every row's
response starts at the same column ``P`` and per-token tensors are ``(B, R)``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verl.data.buffer import Rollout


@dataclass
class PPOBatch:
    input_ids: torch.Tensor       # (B, P + R)
    attention_mask: torch.Tensor  # (B, P + R)
    position_ids: torch.Tensor    # (B, P + R)
    responses: torch.Tensor       # (B, R)
    response_mask: torch.Tensor   # (B, R) float
    scores: torch.Tensor          # (B,) sequence rewards
    prompt_length: int            # P

    def to(self, device: torch.device | str) -> PPOBatch:
        return PPOBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.position_ids,
                                                 self.responses, self.response_mask, self.scores)),
                        self.prompt_length)

    def select(self, index: torch.Tensor) -> PPOBatch:
        return PPOBatch(self.input_ids[index], self.attention_mask[index], self.position_ids[index],
                        self.responses[index], self.response_mask[index], self.scores[index], self.prompt_length)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])


def collate_rollouts(rollouts: list[Rollout], pad_token_id: int, response_length: int) -> PPOBatch:
    prompt_len = max(len(r.prompt_ids) for r in rollouts)
    batch = len(rollouts)
    input_ids = torch.full((batch, prompt_len + response_length), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for i, r in enumerate(rollouts):
        p, resp = r.prompt_ids, r.response_ids[:response_length]
        input_ids[i, prompt_len - len(p):prompt_len] = torch.tensor(p, dtype=torch.long)
        attention[i, prompt_len - len(p):prompt_len] = 1
        if resp:
            input_ids[i, prompt_len:prompt_len + len(resp)] = torch.tensor(resp, dtype=torch.long)
            attention[i, prompt_len:prompt_len + len(resp)] = 1
    position_ids = (attention.cumsum(dim=1) - 1).clamp_min(0)
    responses = input_ids[:, prompt_len:]
    response_mask = attention[:, prompt_len:].float()
    for i, r in enumerate(rollouts):
        if r.extra.get("dropped"):  # failed rollout validation: kept for equal shapes, never trained on
            response_mask[i] = 0.0
    scores = torch.tensor([float(r.reward or 0.0) for r in rollouts])
    return PPOBatch(input_ids, attention, position_ids, responses, response_mask, scores, prompt_len)
