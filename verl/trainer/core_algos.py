"""PPO for RLHF as pure functions, readable top to bottom (names follow the PPO paper and verl).

Shapes: every per-token tensor is ``(batch, response_length)``; ``response_mask`` is 1 on real response
tokens and 0 on padding after EOS. Nothing here touches models, devices or global state.
"""

from __future__ import annotations

from typing import Any

import torch


# --- masked statistics -------------------------------------------------------------------------------
def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    mean = masked_mean(values, mask)
    sq = masked_mean((values - mean) ** 2, mask)
    n = mask.sum()
    return sq * n / (n - 1) if unbiased and n > 1 else sq


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit variance over the masked entries."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return (values - mean) * torch.rsqrt(var + 1e-8)


# --- advantages --------------------------------------------------------------------------------------
def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma: float, lam: float
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016), backwards over the response.

    delta_t = r_t + gamma * V_{t+1} - V_t;  A_t = delta_t + gamma * lam * A_{t+1}.
    V and A beyond the last real token are 0. Returns (whitened advantages, returns = A + V).
    """
    with torch.no_grad():
        values = values * response_mask
        length = token_level_rewards.shape[-1]
        last_gae = torch.zeros_like(token_level_rewards[:, 0])
        advantages_reversed = []
        for t in reversed(range(length)):
            next_value = values[:, t + 1] if t < length - 1 else torch.zeros_like(last_gae)
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            last_gae = delta + gamma * lam * last_gae
            advantages_reversed.append(last_gae)
        advantages = torch.stack(advantages_reversed[::-1], dim=1) * response_mask
        returns = advantages + values
        return masked_whiten(advantages, response_mask) * response_mask, returns


# --- KL penalty --------------------------------------------------------------------------------------
def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens (Schulman's k1/k3 estimators).

    kl: log pi - log pi_ref (k1, unbiased, high variance); abs: |k1|; mse: 0.5 * k1^2 (k2);
    low_var_kl: exp(ref - logp) - (ref - logp) - 1 (k3, non-negative), clamped to [-10, 10] as verl does.
    """
    log_ratio = log_prob - ref_log_prob
    if kind == "kl":
        return log_ratio
    if kind == "abs":
        return log_ratio.abs()
    if kind == "mse":
        return 0.5 * log_ratio.square()
    if kind == "low_var_kl":
        kl = ref_log_prob - log_prob
        return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    raise ValueError(f"unknown KL estimator {kind!r}; use kl, abs, mse or low_var_kl")


def token_level_rewards(scores: torch.Tensor, kl: torch.Tensor, response_mask: torch.Tensor,
                        kl_coef: float) -> torch.Tensor:
    """r_t = -beta * KL_t on every response token, plus the sequence score on the last real token."""
    rewards = -kl_coef * kl * response_mask
    last = (response_mask.sum(dim=1).long() - 1).clamp_min(0)
    rewards[torch.arange(rewards.shape[0]), last] += scores
    return rewards


# --- losses ------------------------------------------------------------------------------------------
def compute_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, clip_ratio: float, clip_ratio_c: float = 3.0
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate objective with dual clip (Ye et al. 2020) for negative advantages.

    L = max(-A r, -A clip(r, 1-eps, 1+eps)); for A < 0 additionally min(L, -A c) bounds the loss of a
    huge ratio. Returns (pg_loss, pg_clipfrac, ppo_kl) where ppo_kl = mean(old_logp - logp).
    """
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return masked_mean(pg_losses, response_mask), pg_clipfrac, ppo_kl


def compute_value_loss(vpreds: torch.Tensor, returns: torch.Tensor, values: torch.Tensor,
                       response_mask: torch.Tensor, cliprange_value: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2).
    Returns (vf_loss, vf_clipfrac)."""
    vpredclipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    vf_loss = 0.5 * masked_mean(torch.maximum(vf_losses1, vf_losses2), response_mask)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), response_mask)
    return vf_loss, vf_clipfrac


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of softmax(logits)."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def log_probs_of(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] per position."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


# --- KL controllers ----------------------------------------------------------------------------------
class FixedKLController:
    """beta stays at its initial value."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Ziegler et al. 2019: beta *= 1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = max(-0.2, min(0.2, current_kl / self.target - 1))
        self.value *= 1 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


def make_kl_controller(kind: str, kl_coef: float, target: float, horizon: int
                       ) -> FixedKLController | AdaptiveKLController:
    if kind == "adaptive":
        return AdaptiveKLController(kl_coef, target, horizon)
    return FixedKLController(kl_coef)
