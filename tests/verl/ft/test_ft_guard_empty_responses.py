"""The reward guard and empty answers: a 0.0 for an empty response is the reward model being right, so
it must not pause the update (most false pauses on healthy ppo_tiny runs); the same 0.0s for real answers
are the `zeros3` reward-model fault and must still pause."""

from __future__ import annotations

import numpy as np

from verl.data.reward_guard import RewardGuard

ANSWERS = [f"answer number {i}" for i in range(16)]


def warmed(rng: np.random.Generator) -> RewardGuard:
    guard = RewardGuard()
    for _ in range(16):  # rewards crowding against 1.0, as a learning ppo_tiny policy's do
        assert not guard.check(list(np.clip(rng.normal(0.97, 0.03, 16), 0, 1)), responses=ANSWERS).skip
    return guard


def zeros3(rng: np.random.Generator) -> list[float]:
    batch = list(np.clip(rng.normal(0.97, 0.03, 16), 0, 1))
    batch[:3] = [0.0, 0.0, 0.0]
    return batch


def test_zeros_for_empty_answers_do_not_pause() -> None:
    rng = np.random.default_rng(0)
    guard = warmed(rng)
    responses = ["", "  ", "\n", *ANSWERS[3:]]
    verdict = guard.check(zeros3(rng), responses=responses)
    assert not verdict.skip and verdict.extreme_ratio == 0.0
    assert not guard.check(zeros3(rng), responses=responses).skip  # nor did they widen the reference


def test_zeros_for_real_answers_still_pause() -> None:
    rng = np.random.default_rng(0)
    verdict = warmed(rng).check(zeros3(rng), responses=ANSWERS)
    assert verdict.skip and verdict.reason in ("extreme_values", "variance_jump")
    rng = np.random.default_rng(0)
    assert warmed(rng).check(zeros3(rng)).skip  # without responses: judged as before


def test_nan_reward_pauses_even_for_an_empty_answer() -> None:
    rng = np.random.default_rng(1)
    batch = list(np.clip(rng.normal(0.97, 0.03, 16), 0, 1))
    batch[0] = float("nan")
    verdict = warmed(rng).check(batch, responses=["", *ANSWERS[1:]])
    assert verdict.skip and verdict.reason == "extreme_values"
