"""PPO math against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer import core_algos as ca


def test_gae_matches_hand_computation() -> None:
    # One sequence of 3 tokens, reward 1 at the end, values 0.5, 0.4, 0.2; gamma 0.9, lam 0.8.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.4, 0.2]])
    mask = torch.ones(1, 3)
    _, returns = ca.compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    d2 = 1.0 - 0.2                      # last token: no next value
    d1 = 0.0 + 0.9 * 0.2 - 0.4
    d0 = 0.0 + 0.9 * 0.4 - 0.5
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    expected_returns = torch.tensor([[a0 + 0.5, a1 + 0.4, a2 + 0.2]])
    assert torch.allclose(returns, expected_returns, atol=1e-6)


def test_gae_ignores_padding_and_whitens() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    values = torch.tensor([[0.1, 0.2, 9.0], [0.3, 0.1, 0.4]])  # 9.0 sits on padding
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, returns = ca.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    assert returns[0, 1].item() == pytest.approx(1.0)  # padding value never bootstraps
    assert adv[0, 2].item() == 0.0
    assert ca.masked_mean(adv, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert ca.masked_var(adv, mask).item() == pytest.approx(1.0, rel=1e-4)


def test_policy_loss_clip_and_dual_clip() -> None:
    old = torch.zeros(1, 3)
    # ratios: e^0.5 ~ 1.65 (A>0, clipped to 1.2), e^-0.5 ~ 0.61 (A>0, unclipped side), e^2 ~ 7.39 (A<0, dual clip)
    logp = torch.tensor([[0.5, -0.5, 2.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    loss, clipfrac, ppo_kl = ca.compute_policy_loss(old, logp, adv, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    t0 = -1.0 * 1.2                     # max(-1.65, -1.2)
    t1 = -1.0 * math.exp(-0.5)          # max(-0.61, -0.8)
    t2 = 3.0                            # min(max(7.39, 1.2), 3.0)
    assert loss.item() == pytest.approx((t0 + t1 + t2) / 3, rel=1e-5)
    # only token 0 hits the ratio clip; token 2 is bounded by the dual clip, which clipfrac does not count
    assert clipfrac.item() == pytest.approx(1 / 3)
    assert ppo_kl.item() == pytest.approx(-(0.5 - 0.5 + 2.0) / 3)


def test_value_loss_clipped() -> None:
    vpreds = torch.tensor([[1.0, 0.0]])
    values = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    loss, clipfrac = ca.compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.5)
    # token 0: unclipped (1-1)^2 = 0, clipped (0.5-1)^2 = 0.25 -> 0.25; token 1: both (0-1)^2 = 1
    assert loss.item() == pytest.approx(0.5 * (0.25 + 1.0) / 2)
    assert clipfrac.item() == pytest.approx(0.5)


@pytest.mark.parametrize(("kind", "expected"), [
    ("kl", 0.3), ("abs", 0.3), ("mse", 0.045), ("low_var_kl", math.exp(-0.3) + 0.3 - 1),
])
def test_kl_estimators(kind: str, expected: float) -> None:
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.3])
    assert ca.kl_penalty(logp, ref, kind).item() == pytest.approx(expected, rel=1e-5)


def test_kl_estimator_unknown() -> None:
    with pytest.raises(ValueError, match="unknown KL estimator"):
        ca.kl_penalty(torch.zeros(1), torch.zeros(1), "js")


def test_token_level_rewards_put_score_on_last_real_token() -> None:
    kl = torch.tensor([[0.1, 0.2, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    r = ca.token_level_rewards(torch.tensor([2.0]), kl, mask, kl_coef=0.5)
    assert torch.allclose(r, torch.tensor([[-0.05, -0.1 + 2.0, 0.0]]))


def test_adaptive_kl_controller_moves_towards_target_and_round_trips() -> None:
    ctrl = ca.AdaptiveKLController(0.2, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=0.2, n_steps=10)    # error clipped to +0.2 -> x1.02
    assert ctrl.value == pytest.approx(0.204)
    ctrl.update(current_kl=0.05, n_steps=10)   # error -0.5 clipped to -0.2 -> x0.98
    assert ctrl.value == pytest.approx(0.204 * 0.98)
    other = ca.AdaptiveKLController(1.0, 0.1, 100)
    other.load_state_dict(ctrl.state_dict())
    assert other.value == ctrl.value
    fixed = ca.FixedKLController(0.3)
    fixed.update(5.0, 10)
    assert fixed.value == 0.3


def test_entropy_of_uniform() -> None:
    assert ca.entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))
