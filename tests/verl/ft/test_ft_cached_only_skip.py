"""A step whose scores all come from the breaker's cache (the reward model not answering) keeps the loop
alive, the critic update included, but does not move the policy: cached scores carry no reward signal, and
training on them during a long hang pulled the policy back to the reference."""

from __future__ import annotations

import pytest

from verl.trainer import RLTrainer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def optimizer_steps(optim: object) -> int:
    state = list(optim.state.values())  # type: ignore[attr-defined]
    return int(state[0]["step"]) if state else 0


def skipped(trainer: RLTrainer) -> float:
    return trainer.registry["verl_updates_skipped_total"].labels(reason="cached_rewards")._value.get()


def test_steps_on_cached_scores_only_skip_the_actor_update_and_are_counted() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=[
        "trainer.total_steps=200", "metrics.layer_kl=false", "rollout_worker_num=0", "reward.timeout_s=0.3",
        "reward.probe_interval_s=0.3", "faults.reward_hang_at_step=4", "faults.reward_hang_seconds=2"])
    rows = []  # (step, actor optimizer steps, critic optimizer steps, counted as skipped)
    try:
        # until the model has answered again for 2 steps after the skipped ones (the hang lasts 2 s of wall time)
        while len(rows) < 200 and not (any(r[3] for r in rows) and not any(r[3] for r in rows[-2:])):
            before = (optimizer_steps(trainer.actor_optim), optimizer_steps(trainer.critic_optim), skipped(trainer))
            stats = trainer.step()
            rows.append((stats.global_step, optimizer_steps(trainer.actor_optim) - before[0],
                         optimizer_steps(trainer.critic_optim) - before[1], skipped(trainer) - before[2]))
    finally:
        trainer.close()
    skips = [r for r in rows if r[3]]
    assert skips, f"no step ran on cached scores only: {rows}"
    assert min(r[0] for r in skips) >= 4  # only from the hang on
    assert all(r[1] == 0 and r[2] > 0 for r in skips), rows  # the policy stayed, the critic trained
    assert all(r[1] > 0 and r[2] > 0 for r in rows if not r[3]), rows  # every other step trained
    assert not rows[-1][3] and not rows[-2][3], "training did not resume once the reward model answered"
