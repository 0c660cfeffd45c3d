"""The PPO step takes its parts: the critic's own epochs and mini-batch size, one timer label per stage,
the trainer's state without RNG streams (the checkpointer owns those), and a state that round-trips."""

from __future__ import annotations

import inspect
import json

import pytest

from verl.metrics.catalog import STAGES
from verl.trainer.parts import StepParts
from verl.trainer.ppo_step import ppo_step
from verl.trainer.ppo_trainer import RLTrainer

QUICK = ["trainer.total_steps=2", "data.batch_size=8", "data.dedup=false", "metrics.layer_kl=false",
         "rollout.response_length=4"]


@pytest.fixture(scope="module")
def trainer() -> RLTrainer:
    # the actor makes one pass in one mini-batch, the critic three passes in mini-batches of 4
    t = RLTrainer("ppo_tiny", overrides=[*QUICK, "actor.ppo_epochs=1", "actor.ppo_mini_batch_size=8",
                                         "critic.ppo_epochs=3", "critic.ppo_mini_batch_size=4"])
    yield t
    t.close()


def optimizer_steps(optim: object) -> int:
    state = list(optim.state.values())  # type: ignore[attr-defined]
    return int(state[0]["step"]) if state else 0


def test_the_critic_updates_with_its_own_epochs_and_mini_batches(trainer: RLTrainer) -> None:
    actor, critic = optimizer_steps(trainer.actor_optim), optimizer_steps(trainer.critic_optim)
    stats = trainer.step()
    assert not stats.nonfinite
    assert optimizer_steps(trainer.actor_optim) - actor == 1
    assert optimizer_steps(trainer.critic_optim) - critic == 3 * (8 // 4)


def test_each_stage_is_timed_under_its_own_label(trainer: RLTrainer) -> None:
    stats = trainer.step()
    assert set(stats.stage_seconds) == set(STAGES)
    for stage in ("reference", "old_log_prob", "critic_values", "advantage", "critic", "actor_update"):
        assert stats.stage_seconds[stage] > 0, stage


def test_the_step_takes_its_parts_not_the_trainer() -> None:
    params = list(inspect.signature(ppo_step).parameters.values())
    assert params[0].annotation in ("StepParts", StepParts)
    assert not any("RLTrainer" in str(p.annotation) for p in params)


def test_trainer_state_has_no_rng_and_round_trips(trainer: RLTrainer) -> None:
    state = json.loads(json.dumps(trainer.state_dict(), default=str))
    assert "rng" not in state
    assert state["global_step"] == trainer.global_step
    assert {"kl_ctrl", "actor_lr_scheduler", "critic_lr_scheduler", "oom", "refill_after"} <= set(state)
    fresh = RLTrainer("ppo_tiny", overrides=QUICK)
    try:
        fresh.load_state_dict(trainer.state_dict())
        assert fresh.global_step == trainer.global_step
        assert fresh.models.actor_sched.state_dict() == trainer.models.actor_sched.state_dict()
        assert fresh.loader.state_dict() == trainer.loader.state_dict()
    finally:
        fresh.close()
