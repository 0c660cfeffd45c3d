"""verl_layer_kl: zero for identical models, and the last layer equals the exact policy KL."""

from __future__ import annotations

import copy

import torch

from verl.config.schema import TinyModelConfig
from verl.data.buffer import Rollout
from verl.metrics.outliers import OutlierBook, RewardRecord
from verl.models.loading import load_causal_lm
from verl.trainer.batch import collate_rollouts
from verl.trainer.models import layer_kl, response_logits


def _batch():
    rollouts = [Rollout(i, 1, "p", "r", prompt_ids=[65 + i, 66, 67][: 2 + i % 2], response_ids=[97, 98, 257][: 1 + i % 3],
                        created_at=0.0, reward=0.5) for i in range(4)]
    return collate_rollouts(rollouts, pad_token_id=256, response_length=4)


def test_layer_kl_zero_then_exact() -> None:
    actor = load_causal_lm("tiny", TinyModelConfig(n_layer=3), n_positions=16, seed=0).eval()
    reference = copy.deepcopy(actor)
    batch = _batch()
    with torch.no_grad():
        la, ha = response_logits(actor, batch, True)
        lr, hr = response_logits(reference, batch, True)
    assert layer_kl(actor, reference, ha, hr, batch) == [0.0, 0.0, 0.0]

    with torch.no_grad():
        for p in actor.transformer.h[1].parameters():
            p.add_(0.05 * torch.randn_like(p))
        la, ha = response_logits(actor, batch, True)
    values = layer_kl(actor, reference, ha, hr, batch)
    assert values[0] == 0.0 and values[1] > 0 and values[2] > 0   # block 0 is untouched
    logp_a, logp_r = torch.log_softmax(la, -1), torch.log_softmax(lr, -1)
    exact = ((logp_a.exp() * (logp_a - logp_r)).sum(-1) * batch.response_mask).sum() / batch.response_mask.sum()
    assert abs(values[2] - float(exact)) < 1e-5
    assert layer_kl(actor, reference, ha, hr, batch, (la, lr)) == values


def test_outlier_book_ranks_by_robust_z() -> None:
    book = OutlierBook()
    book.record([RewardRecord(1, i, f"p{i}", "r", 0.5 + 0.01 * (i % 3)) for i in range(30)])
    book.record([RewardRecord(2, 99, "weird", "r", 9.0), RewardRecord(2, 98, "low", "r", -3.0)])
    top = book.top(2)
    assert [t["prompt"] for t in top] == ["weird", "low"]
    assert book.extreme_ratio([0.5, 9.0]) == 0.5
